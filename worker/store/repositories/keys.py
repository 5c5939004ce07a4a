"""Secrets of this database (``instance_keys``), made once at random and read by name; and the
scopes' id salts (``scope_salt``), made at random on a scope's first remember and deleted by
every erasure of notes of the scope (``forget_salts``)."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from worker.domain.types import Scope
from worker.store.chunks import chunked
from worker.store.models import InstanceKeyRow

NOTE_IDS = "note_ids"  # keys remember's derived note ids (worker.host.remember.derived_id)
SALT_PREFIX = "ids:"  # a scope's salt row: SALT_PREFIX + user part (24) + scope part (32)


def _mac(key: str, text: str, length: int) -> str:
    return hmac.new(key.encode("ascii"), text.encode("utf-8"), hashlib.sha256).hexdigest()[:length]


def _user_part(key: str, user_id: str | None) -> str:
    return _mac(key, "salt-user\n" + json.dumps(user_id), 24)


def salt_name(key: str, scope_key: str) -> str:
    """The name of scope ``scope_key``'s salt row: keyed hashes (under the ``note_ids`` key) of
    its user and of the scope, so no scope or user id is stored in clear, and an erasure of a
    user finds every salt of the user's scopes by the first part (``forget_salts``)."""
    user = Scope.from_key(scope_key).user_id
    return SALT_PREFIX + _user_part(key, user) + _mac(key, "salt-scope\n" + scope_key, 32)


class InstanceKeyRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, name: str) -> str:
        """The key ``name``; made now if the database has none (a row deleted by hand): the
        first writer's key stands, a concurrent one reads it."""
        found = self.find(name)
        if found is not None:
            return found
        try:
            with self.session.begin_nested():
                self.session.add(InstanceKeyRow(name=name, value=secrets.token_hex(32)))
        except IntegrityError:
            pass
        value = self.find(name)
        assert value is not None
        return value

    def find(self, name: str) -> str | None:
        """The key ``name``, or None (no row: nothing is made)."""
        return self.session.scalar(select(InstanceKeyRow.value).where(InstanceKeyRow.name == name))

    def scope_salt(self, key: str, scope_key: str, *, make: bool = False) -> str | None:
        """The scope's salt as stored now, or None (never made, or erased since); ``make``:
        made at random now if there is none (``get``: a concurrent maker's stands)."""
        name = salt_name(key, scope_key)
        return self.get(name) if make else self.find(name)

    def forget_salts(self, key: str, scope_keys: Iterable[str] = (),
                     user_id: str | None = None) -> int:
        """Delete the salts of ``scope_keys`` and, given ``user_id``, of every scope of that
        user: the next remember there makes a new one, and derives ids unrelated to every id
        derived before (an erased note's id confirms no guess at its text then)."""
        deleted = 0
        for names in chunked(sorted({salt_name(key, k) for k in scope_keys})):
            deleted += _count(self.session.execute(
                delete(InstanceKeyRow).where(InstanceKeyRow.name.in_(names))))
        if user_id is not None:
            prefix = SALT_PREFIX + _user_part(key, user_id)  # hex: no LIKE wildcard in it
            deleted += _count(self.session.execute(
                delete(InstanceKeyRow).where(InstanceKeyRow.name.like(prefix + "%"))))
        return deleted


def _count(result: Any) -> int:
    return int(result.rowcount)
