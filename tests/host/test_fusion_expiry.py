"""The host's fuse keeps its sources' life: the fused note expires at the latest of their
expiries, never when one never expires (it used to never expire whatever they did)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from tests.support.factories import NOW, add_notes
from worker.app import App
from worker.host import fuse
from worker.safety.undo import undo_run
from worker.store.models import NoteRow

SOON, LATER = NOW + timedelta(days=10), NOW + timedelta(days=40)


def _at(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


@pytest.mark.parametrize(("second", "fused"), [(LATER, LATER), (None, None)])
def test_the_host_fusion_expires_with_its_longest_lived_source(
        app: App, second: datetime | None, fused: datetime | None) -> None:
    add_notes(app, {"id": "a", "content": "Prefers green tea.", "expires_at": SOON.isoformat()},
              {"id": "b", "content": "Prefers green tea in the morning.",
               "expires_at": second.isoformat() if second else None})
    result = fuse(app, ["a", "b"], "Prefers green tea, in the morning too.")
    with app.uow() as uow:
        rows = {r.id: r for r in uow.session.scalars(select(NoteRow))}
    new = rows[result.note["id"]]
    assert _at(new.expires_at) == fused
    undo_run(app, result.undo_id)
    with app.uow() as uow:
        assert {r.id: r.status for r in uow.session.scalars(select(NoteRow))} == {
            "a": "active", "b": "active", new.id: "revoked"}
