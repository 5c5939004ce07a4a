"""A short erased note that is an identifier (found by the adversarial pass): a phone number or
a code of one or two words is scrubbed wherever a record repeats it, not only where it stands
alone. SQLite and PostgreSQL."""

from __future__ import annotations

from tests.support.factories import add_notes
from tests.support.safety import all_rows_text, run_row
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.safety.erase import erase

SCOPE = Scope("agent-1", "u1")
NUMBER = "555-0199"


def test_an_erased_phone_number_leaves_no_record_repeating_it(app: App) -> None:
    """The note "555-0199" (two words to the word count) was erased, yet a review reason and
    another note's comment that repeated it in a sentence kept it: only a record where it
    stood alone was scrubbed. Now neither keeps it; a record sharing a plain word still stays."""
    add_notes(app, {"id": "x", "user_id": "u1", "content": NUMBER},
              {"id": "w", "user_id": "u1", "content": "User changed phone provider"})
    run_id = run_row(app, SCOPE)
    now = utcnow()
    with app.uow() as uow:
        [w] = uow.notes.get_many(["w"])
        assert uow.notes.change(w, run_id=run_id, reason="noted", now=now,
                                comments=f"the old number {NUMBER} no longer works")
        uow.judgements.add_review(SCOPE, "other", ["w"], f"w replaces {NUMBER} for good",
                                  run_id, now)
        uow.judgements.add_review(SCOPE, "other", ["w"], "phone provider changed", run_id, now)
        uow.commit()
    erase(app, note_id="x")
    assert NUMBER not in all_rows_text(app)
    with app.uow() as uow:
        assert [r.reason for r in uow.judgements.reviews(SCOPE)] == ["phone provider changed"]


def test_erasing_a_conversation_takes_a_fused_note_that_records_it(app: App) -> None:
    """A fused note imported without its lineage edges (an export filtered by --status, whose
    parents the file lacks: the import says to drop the field) still records its sources'
    conversation in ``lineage_conversation_ids``, and prune archives it for that conversation;
    `dream erase --conversation` followed only the edges and left its text. Now the erasure
    takes it too; a note of another conversation stays."""
    from worker.ingest import import_notes

    import_notes(app, [
        '{"id": "f", "agent_id": "agent-1", "content": "' + f"Dials {NUMBER} for the gym" + '",'
        ' "lineage_conversation_ids": ["c1", "c2"], "consolidation_generation": 1}',
        '{"id": "k", "agent_id": "agent-1", "content": "Keeps a gym locker",'
        ' "lineage_conversation_ids": ["c2"], "consolidation_generation": 1}'])
    result = erase(app, conversation_id="c1")
    assert (result.note_ids, result.derived_ids) == ([], ["f"])
    assert NUMBER not in all_rows_text(app)
    assert "Keeps a gym locker" in all_rows_text(app)
