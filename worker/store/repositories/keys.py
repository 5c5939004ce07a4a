"""Secrets of this database (``instance_keys``), made once at random and read by name."""

from __future__ import annotations

import secrets

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from worker.store.models import InstanceKeyRow

NOTE_IDS = "note_ids"  # keys remember's derived note ids (worker.host.remember.derived_id)


class InstanceKeyRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, name: str) -> str:
        """The key ``name``; made now if the database has none (a row deleted by hand): the
        first writer's key stands, a concurrent one reads it."""
        stmt = select(InstanceKeyRow.value).where(InstanceKeyRow.name == name)
        found = self.session.scalar(stmt)
        if found is not None:
            return found
        try:
            with self.session.begin_nested():
                self.session.add(InstanceKeyRow(name=name, value=secrets.token_hex(32)))
        except IntegrityError:
            pass
        value: str = self.session.scalars(stmt).one()
        return value
