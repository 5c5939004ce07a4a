"""The host's fuse keeps its sources' life: the fused note expires at the latest of their
expiries, never when one never expires (it used to never expire whatever they did)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from tests.support.factories import add_notes
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.host import fuse, fusion_candidates
from worker.host.errors import Conflict
from worker.safety.undo import undo_run
from worker.store.models import NoteRow

# A host fuses at the wall clock's time: the expiries are after it.
SOON, LATER = utcnow() + timedelta(days=10), utcnow() + timedelta(days=40)


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


def test_an_expired_note_is_offered_for_no_fusion_and_fused_with_nothing(app: App) -> None:
    """A note past its ``expires_at`` is the next dream's archive's: the candidates hold no
    pair with it, and a fuse naming it is refused, nothing written. Before, the host fused it
    with a lasting note into a note that never expired, and the ended fact lived on."""
    add_notes(app, {"id": "a", "content": "Prefers green tea.",
                    "expires_at": (utcnow() - timedelta(days=1)).isoformat()},
              {"id": "b", "content": "Prefers green tea in the morning."})
    assert not [c for c in fusion_candidates(app, Scope("agent-1"), threshold=0.0)
                if "a" in c["note_ids"]]
    with pytest.raises(Conflict, match="expired"):
        fuse(app, ["a", "b"], "Prefers green tea, in the morning too.")
    with app.uow() as uow:
        assert {r.id: r.status for r in uow.session.scalars(select(NoteRow))} == {
            "a": "active", "b": "active"}
