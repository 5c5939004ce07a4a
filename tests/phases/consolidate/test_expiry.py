"""A fused note lives as long as the longest-lived of its sources (SQLite and PostgreSQL).

Before, consolidation dropped ``expires_at``: a note fused from notes that all expire was
written with none and stayed active for ever. A retirement never shortens a fact's life
either: the fusion of a note that never expires never expires.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from tests.support.factories import NOW, add_notes
from worker.app import App
from worker.domain.types import Scope, lasting_expiry
from worker.runs import service
from worker.store.models import NoteRow

SCOPE = Scope("agent-1")
EDITOR = "User prefers dark mode in the code editor"
SOON, LATER = NOW + timedelta(days=10), NOW + timedelta(days=40)


def _at(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _run(app: App, phases: list[str], clock: datetime = NOW) -> None:
    run_id = service.create_run(app, SCOPE, force=True, clock=clock, phases=phases)
    assert run_id
    service.execute_run(app, run_id)


def _rows(app: App) -> dict[str, NoteRow]:
    with app.uow() as uow:
        return {r.id: r for r in uow.session.scalars(select(NoteRow))}


@pytest.mark.parametrize(("first", "second", "fused"), [
    (SOON, LATER, LATER),  # both expire: the later
    (LATER, SOON, LATER),
    (SOON, None, None),  # one never expires: neither does the fusion
    (None, None, None),
])
def test_the_fused_note_expires_with_its_longest_lived_source(
        app: App, first: datetime | None, second: datetime | None,
        fused: datetime | None) -> None:
    add_notes(app, {"id": "d1", "content": EDITOR, "expires_at": _iso(first)},
              {"id": "d2", "content": f"{EDITOR} at night", "expires_at": _iso(second)})
    _run(app, ["consolidate"])
    rows = _rows(app)
    assert rows["d1"].status == rows["d2"].status == "revoked"
    [new] = [r for r in rows.values() if r.status == "active"]
    assert _at(new.expires_at) == fused


def test_a_fusion_of_expiring_notes_is_archived_once_they_would_all_have_expired(
        app: App) -> None:
    """The whole run carries the expiry to its archive phase, and a later run archives the
    fused note as expired (before: active for ever)."""
    add_notes(app, {"id": "d1", "content": EDITOR, "expires_at": _iso(SOON)},
              {"id": "d2", "content": f"{EDITOR} at night", "expires_at": _iso(LATER)})
    _run(app, ["consolidate", "contradictions", "prune", "archive"])
    [new] = [r for r in _rows(app).values() if r.id not in ("d1", "d2")]
    assert new.status == "active"
    _run(app, ["archive"], clock=LATER + timedelta(days=1))
    assert _rows(app)[new.id].status == "archived"


def test_lasting_expiry() -> None:
    assert lasting_expiry([]) is None  # nothing said: no limit
    assert lasting_expiry([SOON, LATER, SOON]) == LATER
    assert lasting_expiry([LATER, None]) is None


def test_notes_past_their_expiry_are_not_fused_and_go_in_the_same_runs_archive(app: App) -> None:
    """Both notes had expired (still active: no archive ran since): consolidation leaves them
    out, and the run's archive phase, reading the carried scope, archives each. (Until the
    expiry rule, they were fused into a note with the later expiry, archived in their place.)"""
    add_notes(app, {"id": "d1", "content": EDITOR, "expires_at": _iso(NOW - timedelta(days=2))},
              {"id": "d2", "content": f"{EDITOR} at night",
               "expires_at": _iso(NOW - timedelta(days=1))})
    _run(app, ["consolidate", "archive"])
    assert {k: r.status for k, r in _rows(app).items()} == {"d1": "archived", "d2": "archived"}


def test_a_note_expired_at_the_run_s_clock_joins_no_fusion(app: App) -> None:
    """A note past its ``expires_at`` when the run starts is archive's to take: consolidation
    leaves it out (``notes_expired`` on the step), so it neither absorbs the note that lasts
    nor lends it its text; the archive phase then takes it alone and the lasting fact stays.
    Before, the two fused into a note that never expired and carried the ended fact along."""
    add_notes(app, {"id": "d1", "content": EDITOR},
              {"id": "d2", "content": f"{EDITOR} at night",
               "expires_at": _iso(NOW - timedelta(days=1))})
    _run(app, ["consolidate", "archive"])
    rows = _rows(app)
    assert (rows["d1"].status, rows["d2"].status, len(rows)) == ("active", "archived", 2)
