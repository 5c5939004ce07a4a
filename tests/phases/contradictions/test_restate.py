"""A note kept for a later statement of its own fact is dated at that statement.

When the contradictions phase retires a duplicate or a note another one holds word for word,
the note kept may be the older one (the fuller text). Before, it kept its first date, and a
value stated between the two statements then read as newer: the next judge retired the
current value. The kept note now takes the later statement's ``created_at`` and
``write_seq``, at its version, logged, and undone with the run.
"""

from __future__ import annotations

from datetime import UTC, datetime

from tests.phases.contradictions.test_service import rows, run_phase, with_stub
from tests.support.factories import add_notes, days_ago
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.phases.kit.changes import Change, ChangeKind, Member
from worker.phases.kit.evaluate import restate
from worker.safety.undo import undo_run
from worker.store.models import OperationLogRow

DARK_FULL = "User prefers dark mode in the editor and the terminal"
DARK = "User prefers dark mode in the editor"
LIGHT = "User prefers light mode in the editor and the terminal"


def modes(a: str, b: str) -> tuple[str, float]:
    """Dark against light is one attribute's two values; anything else stands apart."""
    if ("dark" in a) != ("dark" in b) and "mode" in a and "mode" in b:
        return ("conflicting", 0.95)
    return ("independent", 0.9)


def _history(app: App) -> None:
    add_notes(app, {"id": "full", "content": DARK_FULL, "created_at": days_ago(40)},
              {"id": "light", "content": LIGHT, "created_at": days_ago(20)},
              {"id": "short", "content": DARK, "created_at": days_ago(3)})


def _at(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def test_the_fuller_note_kept_takes_the_later_statements_date(app: App,
                                                             llm_stub: LLMStub) -> None:
    """The model retires the short restatement into the fuller, older note: that note is
    dated at the restatement, at its version, and the log says why."""
    _history(app)
    with_stub(app, llm_stub, fuller)
    run_id = run_phase(app)
    notes = rows(app)
    assert (notes["short"].status, notes["short"].consolidated_into_id) == ("revoked", "full")
    full = notes["full"]
    assert full.status == "active" and full.version == 1
    assert _at(full.created_at) == _at(notes["short"].created_at)
    assert full.write_seq == notes["short"].write_seq
    with app.uow() as uow:
        (entry,) = uow.session.query(OperationLogRow).filter_by(entity_id="full",
                                                                  run_id=run_id).all()
    assert (entry.reason or "").endswith(": restated")
    assert entry.before is not None and entry.after is not None
    assert entry.before["created_at"] == days_ago(40)
    assert entry.after["created_at"] == days_ago(3)


def test_the_value_restated_last_wins_a_later_model_run(app: App, llm_stub: LLMStub) -> None:
    """Dark (day 40), light (day 20), dark again in fewer words (day 3). A rule run keeps no
    older text over a newer one: both dark notes stay. A model run then retires light, not
    dark. Before, the rule run kept the fuller dark note at day 40 and the model run retired
    the current value; then it kept it at day 3, the newer statement retired into the older
    text (which a dropped "former" or "no longer" would have made wrong)."""
    _history(app)
    run_phase(app)
    assert {n.id for n in rows(app).values() if n.status == "active"} == {"full", "light", "short"}
    with_stub(app, llm_stub, modes)
    run_phase(app)
    notes = rows(app)
    assert notes["short"].status == "active"
    assert notes["light"].status == "revoked"


def test_undoing_the_run_gives_the_note_its_first_date_back(app: App,
                                                           llm_stub: LLMStub) -> None:
    _history(app)
    with_stub(app, llm_stub, fuller)
    before = rows(app)["full"]
    run_id = run_phase(app)
    undo_run(app, run_id)
    notes = rows(app)
    assert notes["short"].status == notes["full"].status == "active"
    assert _at(notes["full"].created_at) == _at(before.created_at)
    assert notes["full"].write_seq == before.write_seq


def test_an_earlier_statement_or_an_immutable_note_keeps_its_date() -> None:
    when = datetime(2026, 1, 5, tzinfo=UTC)
    later = {"created_at": datetime(2026, 3, 1, tzinfo=UTC), "write_seq": 9}
    earlier = {"created_at": datetime(2025, 12, 1, tzinfo=UTC), "write_seq": 1}
    kept = {"created_at": when, "write_seq": 5, "protection": "standard"}
    restate(kept, [earlier])
    assert (kept["created_at"], kept["write_seq"]) == (when, 5)
    restate(kept, [earlier, later])
    assert (kept["created_at"], kept["write_seq"]) == (later["created_at"], 9)
    pinned = {"created_at": when, "write_seq": 5, "protection": "immutable"}
    restate(pinned, [later])
    assert (pinned["created_at"], pinned["write_seq"]) == (when, 5)
    # One same time: the order the store recorded them in decides.
    tied = {"created_at": when, "write_seq": 5, "protection": "standard"}
    restate(tied, [{"created_at": when, "write_seq": 7}])
    assert tied["write_seq"] == 7


def test_a_stored_proposal_keeps_its_restate() -> None:
    change = Change(kind=ChangeKind.SUPERSEDE, name="short->full", members=(Member("short", 1),),
                    keep=(Member("full", 1),), into_id="full", relation="subsumed",
                    restate=True)
    assert Change.from_json(change.to_json()).restate is True
    assert Change.from_json({**change.to_json(), "restate": None}).restate is False


def fuller(a: str, b: str) -> tuple[str, float]:
    """The full dark note holds the short one; dark against light is one attribute."""
    if "dark" in a and "dark" in b:
        return ("a_subsumes_b" if len(a) > len(b) else "b_subsumes_a", 0.95)
    return modes(a, b)


def test_a_note_restated_and_retired_in_one_write(app: App, llm_stub: LLMStub) -> None:
    """The model's fullest dark note takes the short one's date and then loses to light,
    stated later still, in the same write: the new date is written before the retirement
    (its UPDATE guards the version the retirement moves)."""
    add_notes(app, {"id": "full", "content": DARK_FULL, "created_at": days_ago(40)},
              {"id": "short", "content": DARK, "created_at": days_ago(30)},
              {"id": "light", "content": LIGHT, "created_at": days_ago(3)})
    with_stub(app, llm_stub, fuller)
    run_id = run_phase(app)
    notes = rows(app)
    assert notes["light"].status == "active"
    assert (notes["short"].consolidated_into_id, notes["full"].consolidated_into_id) == (
        "full", "light")
    assert _at(notes["full"].created_at) == _at(notes["short"].created_at)
    with app.uow() as uow:
        reasons = [r.reason for r in uow.session.query(OperationLogRow).filter_by(
            entity_id="full", run_id=run_id).order_by(OperationLogRow.id)]
    assert reasons[0] is not None and reasons[0].endswith(": restated")
    assert len(reasons) == 2
