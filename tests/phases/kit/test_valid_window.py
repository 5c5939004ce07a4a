"""A note's validity never ends before it begins: every write that ends one (``valid_to``) ends
it no earlier than its ``valid_from``. SQLite and PostgreSQL.

A note's ``valid_from`` can be later than its ``created_at``: a fusion (a dream's, a host's) is
valid from the time it was written though dated at its sources' latest statement, and an
import may give any later start. Before, a retirement ended such a note at the time it set (a
conflict winner's date, the host's clock, the date an erasure left), held only to
``created_at``: the window ended before it began, and an export of it was refused by the
import. An export of a store an older worker wrote so ends the note at its start."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import update

from tests.conftest import make_sqlite_app
from tests.phases.contradictions.test_restate import modes
from tests.phases.contradictions.test_service import IMPERIAL, METRIC, rows, run_phase, with_stub
from tests.safety.test_erase_dates import _history
from tests.support.factories import add_notes, days_ago
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.clock import utcnow
from worker.export import export_notes
from worker.host import fuse
from worker.ingest import import_notes
from worker.safety.erase import erase
from worker.store.models import NoteRow


def _at(value: datetime | str | None) -> datetime | None:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _window(app: App, note_id: str) -> tuple[datetime | None, datetime | None]:
    note = rows(app)[note_id]
    return _at(note.valid_from), _at(note.valid_to)


def test_a_fusion_is_valid_from_its_write_though_dated_at_its_sources(app: App) -> None:
    """What makes the case the worker's own: the host's fuse (as a dream's consolidation)
    dates the fused note at its newest source and makes it valid from the write."""
    add_notes(app, {"id": "a", "content": "Prefers green tea.", "created_at": days_ago(20)},
              {"id": "b", "content": "Prefers green tea in the morning.",
               "created_at": days_ago(19)})
    fused = fuse(app, ["a", "b"], "Prefers green tea in the morning.").note["id"]
    note = rows(app)[fused]
    assert _at(note.created_at) == _at(days_ago(19))
    assert _at(note.valid_from) > _at(note.created_at)  # type: ignore[operator]


def test_a_conflict_loser_is_not_ended_before_its_validity_began(
        app: App, llm_stub: LLMStub) -> None:
    """The loser is dated 20 days ago and valid from 3 days ago (a fusion written then); the
    winner is dated 6 days ago. It was ended at the winner's date, before it began; it now ends
    at its start."""
    with_stub(app, llm_stub)
    add_notes(app, {"id": "old", "content": METRIC, "created_at": days_ago(20),
                    "valid_from": days_ago(3), "access_count": 50},
              {"id": "new", "content": IMPERIAL, "created_at": days_ago(6)})
    run_phase(app)
    assert rows(app)["old"].consolidated_into_id == "new"
    assert _window(app, "old") == (_at(days_ago(3)), _at(days_ago(3)))


def test_a_host_fuse_does_not_end_a_note_before_its_validity_began(app: App) -> None:
    """A source valid from next month, fused now: ended at its start, not at the clock."""
    later = (utcnow() + timedelta(days=30)).replace(microsecond=0)
    add_notes(app, {"id": "a", "content": "Prefers green tea.", "valid_from": later.isoformat()},
              {"id": "b", "content": "Prefers green tea in the morning."})
    before = utcnow()
    fuse(app, ["a", "b"], "Prefers green tea in the morning.")
    assert _window(app, "a") == (later, later)
    began, ended = _window(app, "b")
    assert began is not None and ended is not None and began <= ended and ended >= before


def test_an_erasure_does_not_end_a_note_before_its_validity_began(
        app: App, llm_stub: LLMStub) -> None:
    """Light (day 50, valid from day 10) is retired into the fuller dark note, ended at that
    note's date then (day 3). Erasing day 3's conversation ends it at the date left, day 40,
    which is before day 10: it ends at day 10."""
    _history(app, light_days=50)
    with app.engine.begin() as conn:
        conn.execute(update(NoteRow).where(NoteRow.id == "light")
                     .values(valid_from=_at(days_ago(10))))
    with_stub(app, llm_stub, modes)
    run_phase(app)
    assert _window(app, "light") == (_at(days_ago(10)), _at(days_ago(3)))
    result = erase(app, conversation_id="c3")
    assert (result.redated_ids, result.held_ids) == (["full"], [])
    assert _window(app, "light") == (_at(days_ago(10)), _at(days_ago(10)))


def test_an_older_store_s_inverted_window_exports_ended_at_its_start(
        app: App, tmp_path: Path) -> None:
    """A retired note an older worker ended before it began: the export writes its end at its
    start, the import takes it, and the copy exports the same lines (nothing else moves)."""
    add_notes(app, {"id": "k", "content": "Prefers green tea."},
              {"id": "r", "content": "Prefers black tea.", "status": "revoked",
               "consolidated_into_id": "k", "created_at": days_ago(20),
               "valid_from": days_ago(3)})
    with app.engine.begin() as conn:  # as an older worker's conflict left it
        conn.execute(update(NoteRow).where(NoteRow.id == "r")
                     .values(valid_to=_at(days_ago(6))))
    lines = list(export_notes(app))
    exported: dict[str, Any] = {json.loads(x)["id"]: json.loads(x) for x in lines}
    assert exported["r"]["valid_to"] == exported["r"]["valid_from"]
    assert _at(exported["r"]["valid_from"]) == _at(days_ago(3))
    copy = make_sqlite_app(tmp_path / "copy")
    try:
        assert import_notes(copy, lines).inserted == 2
        assert list(export_notes(copy)) == lines
    finally:
        copy.dispose()
