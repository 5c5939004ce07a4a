"""`remember` never drops a changed value, never retires another fact, and dates a fact said
again at its latest statement.

Before: a long note with one word changed ("flies business class …" after "flies economy
class …", 0.87 alike) was a NOOP, so the new value was lost at the write; a longer text that
only shared most words superseded the old fact (UPDATE); and a NOOP left the known note at its
first date, so a value stated in between read as newer to the next dream's judge.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from worker.app import App
from worker.domain.types import Note, Scope
from worker.host.remember import held_to_words, remember
from worker.store.models import NoteRow, OperationLogRow

SCOPE = Scope("agent-1")
ECONOMY = "The user always flies economy class on long flights to Europe for work trips"
BUSINESS = "The user always flies business class on long flights to Europe for work trips"


def _rows(app: App) -> dict[str, NoteRow]:
    with app.uow() as uow:
        return {r.id: r for r in uow.session.query(NoteRow).all()}


def _at(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def test_a_changed_value_is_added_beside_the_old_one(app: App) -> None:
    first = remember(app, SCOPE, ECONOMY)
    second = remember(app, SCOPE, BUSINESS)
    assert (first.action, second.action) == ("ADD", "ADD")
    assert second.similarity is not None and second.similarity >= 0.85
    assert "kept both" in second.reason
    notes = _rows(app)
    assert {notes[first.id].status, notes[second.id].status} == {"active"}


def test_a_longer_text_of_another_fact_retires_nothing(app: App) -> None:
    sister = remember(app, SCOPE, "The user's sister lives in Berlin near the park")
    brother = remember(app, SCOPE, "The user's brother lives in Berlin near the park with his wife")
    assert brother.action == "ADD" and brother.superseded_id is None
    assert _rows(app)[sister.id].status == "active"


def test_a_longer_text_that_only_adds_detail_still_updates(app: App) -> None:
    short = remember(app, SCOPE, "The user drinks green tea in the morning")
    longer = remember(app, SCOPE, "The user drinks green tea in the morning with a little honey")
    assert longer.action == "UPDATE" and longer.superseded_id == short.id


def test_a_fact_said_again_is_dated_at_its_latest_statement(app: App) -> None:
    """Economy, then business, then economy again: the economy note is the newest."""
    economy = remember(app, SCOPE, ECONOMY)
    business = remember(app, SCOPE, BUSINESS)
    again = remember(app, SCOPE, ECONOMY)
    assert again.action == "NOOP" and again.id == economy.id
    notes = _rows(app)
    assert (_at(notes[economy.id].created_at), notes[economy.id].write_seq) > (
        _at(notes[business.id].created_at), notes[business.id].write_seq)
    assert notes[economy.id].version == 2 and notes[economy.id].access_count == 0  # no read
    with app.uow() as uow:
        logged = uow.session.query(OperationLogRow).filter_by(entity_id=economy.id,
                                                              op="update").all()
    assert [r.reason for r in logged] == ["remember: stated again"]


@pytest.mark.parametrize(("action", "text", "old", "expected"), [
    ("NOOP", "User likes tea", "User likes tea a lot", "NOOP"),  # says nothing new
    ("NOOP", "User likes tea with lemon", "User likes tea", "UPDATE"),  # only adds: kept
    ("NOOP", "User likes lemon tea", "User likes tea", "ADD"),  # adds inside: another fact?
    ("NOOP", "User does not like tea", "User likes tea", "ADD"),  # a negation
    ("UPDATE", "User likes tea with milk", "User likes tea", "UPDATE"),
    ("UPDATE", "User likes coffee with milk", "User likes tea", "ADD"),  # drops "tea"
    ("UPDATE", "User has 3 cats and a dog", "User has 2 cats", "ADD"),  # a number
    ("ADD", "anything", "else", "ADD"),
])
def test_held_to_words(action: str, text: str, old: str, expected: str) -> None:
    note = Note(id="n1", scope=SCOPE, content=old)
    got, _ = held_to_words(action, "similar", text, note)  # type: ignore[arg-type]
    assert got == expected


def test_a_fact_said_again_is_no_read_that_makes_archive_retire_unread_facts(app: App) -> None:
    """A host that never reports reads: archive keeps its old facts (no read on record says
    nothing about use). One fact said again (a NOOP) counted an access, and the scope then
    read as one that records reads: every other old fact was archived as "not accessed",
    current ones too (found by the adversarial pass). A statement is no read."""
    from tests.support.factories import NOW, add_notes, days_ago
    from worker.runs import service

    add_notes(app, *({"id": f"old{i}", "content": text, "created_at": days_ago(280),
                      "is_auto_generated": True}
                     for i, text in enumerate(["User lives in Porto", "User works as a nurse",
                                               "User is allergic to penicillin"])))
    assert remember(app, SCOPE, "User lives in Porto").action == "NOOP"
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW, phases=["archive"],
                                allow_retire=10)
    assert run_id
    service.execute_run(app, run_id)
    assert {i: r.status for i, r in _rows(app).items()} == dict.fromkeys(
        ("old0", "old1", "old2"), "active")
