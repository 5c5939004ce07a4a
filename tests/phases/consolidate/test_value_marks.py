"""A dream with the rule judge keeps two notes that differ by a mark carrying a value. An audit
found ".5 mg" and "5 mg" fused as "identical" (a tenfold dose), and of two lines of one import
dated alike the earlier line's text kept and the later-recorded one retired (the id broke the
tie); notes that differ only in case and punctuation still fuse, the later statement's text
kept."""

from __future__ import annotations

from typing import Any

from tests.support.factories import NOW, add_notes
from worker.app import App
from worker.domain.types import Note, Scope
from worker.runs import service

SCOPE = Scope("agent-1")
SAME_TIME = "2026-03-10T10:00:00Z"


def _dream(app: App) -> dict[str, Note]:
    run_id = service.create_run(app, SCOPE, force=True, phases=["consolidate", "contradictions"],
                                clock=NOW)
    assert run_id is not None
    service.execute_run(app, run_id)
    with app.uow() as uow:
        return uow.notes.load_scope(SCOPE, statuses=("active", "revoked")).by_id()


def _line(nid: str, content: str, at: str, **extra: Any) -> dict[str, Any]:
    return {"id": nid, "content": content, "created_at": at, **extra}


def test_a_dose_differing_by_a_decimal_point_stays_two_notes(sqlite_app: App) -> None:
    add_notes(sqlite_app,
              _line("n2", "User takes 5 mg of melatonin at night", SAME_TIME),
              _line("n1", "User takes .5 mg of melatonin at night", SAME_TIME))
    notes = _dream(sqlite_app)
    assert {n.id: n.status for n in notes.values()} == {"n1": "active", "n2": "active"}


def test_a_protected_notes_newer_correction_is_not_retired_into_it(sqlite_app: App) -> None:
    add_notes(sqlite_app,
              _line("old", "Laptop budget: < $1500", "2026-01-10T10:00:00Z",
                    protection="protected"),
              _line("new", "Laptop budget: > $1500", SAME_TIME),
              _line("m-old", "Nutzer trinkt Alkohol in Maßen", "2026-01-10T10:00:00Z",
                    is_auto_generated=False),
              _line("m-new", "Nutzer trinkt Alkohol in Massen", SAME_TIME))
    notes = _dream(sqlite_app)
    assert {n.id: n.status for n in notes.values()} == {
        "old": "active", "new": "active", "m-old": "active", "m-new": "active"}


def test_the_same_words_said_twice_keep_the_later_recorded_text(sqlite_app: App) -> None:
    add_notes(sqlite_app, _line("n2", "User prefers tea.", SAME_TIME),
              _line("n1", "user prefers tea", SAME_TIME))
    notes = _dream(sqlite_app)
    active = [n for n in notes.values() if n.status == "active"]
    assert [n.content for n in active] == ["user prefers tea"]
    assert active[0].write_seq == notes["n1"].write_seq
