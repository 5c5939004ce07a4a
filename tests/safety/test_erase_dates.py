"""An erasure takes the date an erased note gave the note kept for it.

The contradictions phase retires a later restatement into the fuller, older note and dates that
note at the restatement (``Change.restate``). Before, erasing the restatement's conversation
left the kept note at the erased statement's date: the erased conversation still made its value
the newest, and a later judge retired the value said in between. The erasure now dates the kept
note back to the latest statement of its fact the store still holds. SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import make_sqlite_app
from tests.phases.contradictions.test_restate import DARK, DARK_FULL, LIGHT, modes
from tests.phases.contradictions.test_service import rows, run_phase, with_stub
from tests.support.factories import NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub
from tests.support.safety import note_states
from worker.app import App
from worker.cli import main
from worker.domain.types import Scope
from worker.export import export_notes
from worker.host.remember import remember
from worker.ingest import import_notes
from worker.safety.erase import REVIEW_KIND, erase
from worker.safety.undo import UndoRefused, undo_run
from worker.store.models import OperationLogRow, ReviewRow

SCOPE_U = Scope("agent-1", "u1")


def _at(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _said(app: App, note_id: str) -> tuple[datetime | None, int | None]:
    note = rows(app)[note_id]
    return _at(note.created_at), note.write_seq


def _fuller(a: str, b: str) -> tuple[str, float]:
    """A scripted model: of two notes of the editor's dark mode the longer holds the shorter;
    anything else stands apart."""
    if not (a.startswith(DARK) and b.startswith(DARK)):
        return ("independent", 0.9)
    return ("a_subsumes_b" if len(a) > len(b) else "b_subsumes_a", 0.95)


def _history(app: App, *more: dict[str, object],
             light_days: int = 20) -> tuple[datetime | None, int | None]:
    """The fuller dark note (c1, 40 days ago), the short restatement (c3, 3 days ago) and
    ``more``; one contradictions run, a model's (the rule judge keeps no older text over a
    later statement), retires the short note into the fuller one, which takes its date. Then
    light (c2, 20 days ago), left open as the rule judge leaves it. The fuller note's own
    statement."""
    add_notes(app, {"id": "full", "content": DARK_FULL, "created_at": days_ago(40),
                    "source_conversation_id": "c1"},
              {"id": "short", "content": DARK, "created_at": days_ago(3),
               "source_conversation_id": "c3"}, *more)
    own = _said(app, "full")
    stub = LLMStub().start()
    try:
        with_stub(app, stub, _fuller)
        run_phase(app)
    finally:
        app.llm = None
        stub.stop()
    add_notes(app, {"id": "light", "content": LIGHT, "created_at": days_ago(light_days),
                    "source_conversation_id": "c2"})
    notes = rows(app)
    assert (notes["short"].status, notes["short"].consolidated_into_id) == ("revoked", "full")
    assert _said(app, "full") == _said(app, "short") != own
    return own


def test_erasing_the_restatement_dates_the_kept_note_back_to_its_own(app: App) -> None:
    """The short note's conversation erased: the fuller note is dated at its own first
    statement again, one version up, logged under the erasure's id; light, said between, is
    the later statement again. Undoing the erasure gives the erased date back with the rest."""
    own = _history(app)
    version = rows(app)["full"].version
    result = erase(app, conversation_id="c3")
    assert result.note_ids == ["short"]
    assert result.redated_ids == ["full"]
    assert result.erase_id is not None
    full = rows(app)["full"]
    assert _said(app, "full") == own
    assert full.status == "active" and full.version == version + 1
    assert _at(full.created_at) < _at(rows(app)["light"].created_at)  # type: ignore[operator]
    with app.uow() as uow:
        (entry,) = uow.session.query(OperationLogRow).filter_by(entity_id="full",
                                                                  run_id=result.erase_id).all()
    assert entry.reason == ("erase of conversation: the later statement it was dated at was "
                            "erased")
    assert entry.after is not None and entry.after["created_at"] == days_ago(40)
    undo_run(app, result.erase_id)
    assert _at(rows(app)["full"].created_at) == _at(datetime.fromisoformat(days_ago(3)))


def test_a_later_statement_still_held_dates_it_instead(app: App) -> None:
    """Said a third time (c4, 10 days ago) and retired into the fuller note in the same run:
    erasing c3 dates the fuller note at c4's statement, the latest one left, not at its own."""
    _history(app, {"id": "again", "content": DARK, "created_at": days_ago(10),
                   "source_conversation_id": "c4"})
    assert rows(app)["again"].consolidated_into_id == "full"
    erase(app, conversation_id="c3")
    assert _said(app, "full") == _said(app, "again")


def test_erasing_an_earlier_restatement_changes_no_date(app: App) -> None:
    """The erased statement is not the one the kept note is dated at (c4, the latest, stays):
    nothing is dated back, and no erase id is handed out for it."""
    _history(app, {"id": "again", "content": DARK, "created_at": days_ago(10),
                   "source_conversation_id": "c4"})
    before = _said(app, "full")
    result = erase(app, conversation_id="c4")
    assert (result.note_ids, result.redated_ids, result.erase_id) == (["again"], [], None)
    assert _said(app, "full") == before


def test_a_note_sharing_the_erased_date_by_chance_keeps_it(app: App) -> None:
    """Two notes stated at one same time, neither retired into the other: erasing one leaves
    the other's date (it was never moved)."""
    add_notes(app, {"id": "a", "content": "User keeps a cat", "created_at": days_ago(5),
                    "source_conversation_id": "c1"},
              {"id": "b", "content": "The office moved to Leeds", "created_at": days_ago(5),
               "source_conversation_id": "c2"})
    before = _said(app, "b")
    result = erase(app, conversation_id="c1")
    assert (result.redated_ids, _said(app, "b")) == ([], before)
    assert set(note_states(app)) == {"b"}


def test_a_value_retired_on_the_erased_date_is_held_for_review(app: App,
                                                               llm_stub: LLMStub) -> None:
    """A model run then retires light (day 20) as older than the fuller dark note (dated day
    3). Erasing day 3's conversation dates dark back to day 40: light is the later value now.
    It stays retired, as when the newer note itself is erased, and a review names it."""
    _history(app)
    with_stub(app, llm_stub, modes)
    run_phase(app)
    assert rows(app)["light"].consolidated_into_id == "full"
    result = erase(app, conversation_id="c3")
    assert (result.redated_ids, result.held_ids) == (["full"], ["light"])
    light = rows(app)["light"]
    assert (light.status, light.consolidated_into_id) == ("revoked", "full")
    assert light.valid_to is None  # it was ended at the erased date; the date left is earlier
    with app.uow() as uow:
        (review,) = uow.session.query(ReviewRow).filter_by(kind=REVIEW_KIND).all()
    assert (review.note_ids, review.run_id) == (["light"], result.erase_id)
    assert "dated at an erased statement" in (review.reason or "")


def test_an_older_value_ended_at_the_erased_date_ends_at_the_date_left(
        app: App, llm_stub: LLMStub) -> None:
    """Light said on day 50, before either dark note: the model run retires it into the
    fuller dark note, ended at that note's date then (day 3, the short note's). Erasing day 3's
    conversation ends it at day 40, the dark note's own date; nothing is held for review."""
    _history(app, light_days=50)
    with_stub(app, llm_stub, modes)
    run_phase(app)
    assert _at(rows(app)["light"].valid_to) == _at(datetime.fromisoformat(days_ago(3)))
    result = erase(app, conversation_id="c3")
    assert (result.redated_ids, result.held_ids) == (["full"], [])
    light = rows(app)["light"]
    assert (light.status, light.consolidated_into_id) == ("revoked", "full")
    assert _at(light.valid_to) == _at(datetime.fromisoformat(days_ago(40)))


def test_a_value_the_erased_note_superseded_is_ended_at_no_known_time(
        app: App, llm_stub: LLMStub) -> None:
    """The note that superseded light is erased itself: light is held for review, as before,
    and no longer ended at the erased note's date."""
    add_notes(app, {"id": "light", "content": LIGHT, "created_at": days_ago(20),
                    "source_conversation_id": "c2"},
              {"id": "dark", "content": DARK_FULL, "created_at": days_ago(3),
               "source_conversation_id": "c3"})
    with_stub(app, llm_stub, modes)
    run_phase(app)
    assert rows(app)["light"].consolidated_into_id == "dark"
    result = erase(app, conversation_id="c3")
    assert result.held_ids == ["light"]
    light = rows(app)["light"]
    assert (light.status, light.consolidated_into_id, light.valid_to) == ("revoked", None, None)


def test_undoing_the_dream_after_the_erase_is_refused_then_cascades(app: App) -> None:
    """The erasure changed the kept note after the run: undoing the run names the erasure;
    with --force-cascade the erasure's dating is undone first, then the run's, and the note
    holds its own first date."""
    own = _history(app)
    (run_id,) = {str(r.run_id) for r in _log(app, "full")}
    erase(app, conversation_id="c3")
    with pytest.raises(UndoRefused, match="note full was changed since by run erase-"):
        undo_run(app, run_id)
    undo_run(app, run_id, force_cascade=True)
    assert _said(app, "full") == own
    assert rows(app)["full"].status == "active"


def _log(app: App, note_id: str) -> list[OperationLogRow]:
    with app.uow() as uow:
        return list(uow.session.query(OperationLogRow).filter_by(entity_id=note_id).all())


def test_a_fact_remembered_again_in_an_erased_conversation_loses_that_date(app: App) -> None:
    """Remembered with no conversation named, said again word for word in c2 (a NOOP that
    dates the note at c2's statement; no note records c2). Erasing c2 dates it back and the
    log names c2 no more; the note stays."""
    first = remember(app, SCOPE_U, "User drinks green tea every morning")
    own = _said(app, first.id)
    again = remember(app, SCOPE_U, "User drinks green tea every morning", conversation_id="c2")
    assert again.action == "NOOP" and _said(app, first.id) != own
    result = erase(app, conversation_id="c2")
    assert (result.note_ids, result.redated_ids) == ([], [first.id])
    assert _said(app, first.id) == own
    assert "c2" not in json.dumps([r.after for r in _log(app, first.id)])
    assert rows(app)[first.id].status == "active"


@pytest.mark.parametrize("erased", ["c1", "c2"])
def test_a_fact_imported_from_two_conversations_outlives_either(app: App, erased: str) -> None:
    """The same words imported from c1, then from c2 (a later import, a line of its own id or
    none). Before, the c2 line was "already present": it only dated c1's note, and erasing c1
    took the fact c2 had said too. Now it is c2's own note; a dream keeps one, dated at the
    later statement, and erasing either conversation leaves the fact active."""
    text = "User drinks green tea"
    add_notes(app, {"id": "tea", "content": text, "created_at": days_ago(30),
                    "source_conversation_id": "c1"})
    add_notes(app, {"content": text, "created_at": days_ago(2),
                    "source_conversation_id": "c2"})
    notes = rows(app)
    assert sorted(n.source_conversation_id or "" for n in notes.values()) == ["c1", "c2"]
    assert _said(app, "tea")[0] == _at(datetime.fromisoformat(days_ago(30)))  # not c2's date
    run_phase(app)
    assert [n.status for n in rows(app).values()].count("active") == 1
    erase(app, conversation_id=erased)
    (left,) = [n for n in rows(app).values() if n.status == "active"]
    assert (left.content, left.source_conversation_id) == (text, {"c1": "c2", "c2": "c1"}[erased])


def test_an_erased_statement_no_note_held_never_dates_a_note_again(app: App) -> None:
    """Remembered with no conversation named, again in c2, again in c3; c2 erased first (the
    note keeps c3's date), then c3: the note goes back to its own date, not to c2's erased
    one."""
    text = "User drinks green tea every morning"
    first = remember(app, SCOPE_U, text)
    own = _said(app, first.id)
    remember(app, SCOPE_U, text, conversation_id="c2")
    remember(app, SCOPE_U, text, conversation_id="c3")
    third = _said(app, first.id)
    assert erase(app, conversation_id="c2").redated_ids == []  # c3's statement is the latest
    assert _said(app, first.id) == third
    assert erase(app, conversation_id="c3").redated_ids == [first.id]
    assert _said(app, first.id) == own


def test_dream_erase_says_which_notes_it_dated_back(app: App,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the CLI: the conversation held no note of its own, only a statement that dated
    one; the erasure says it dated that note back and how to revert it."""
    text = "User drinks green tea every morning"
    first = remember(app, SCOPE_U, text)
    remember(app, SCOPE_U, text, conversation_id="c2")
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    out = CliRunner().invoke(main, ["erase", "--conversation", "c2", "--yes"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "erased conversation c2: 0 notes, 0 derived notes"
    assert lines[1] == (f"  dated note {first.id} back to the latest statement of its fact "
                        "left (the later one it was dated at was erased)")
    assert lines[2].startswith("  to revert the restorations, holds and datings above: "
                               "dream undo erase-")


def test_a_line_said_again_in_an_erased_conversation_loses_that_date(app: App) -> None:
    """A stored note of no conversation, said again by a later import's line from c2: the line
    dates it (no note of its own: a note of no conversation stands in for it). Erasing c2
    dates it back to its own."""
    add_notes(app, {"id": "tea", "content": "User drinks green tea", "created_at": days_ago(30)})
    own = _said(app, "tea")
    add_notes(app, {"content": "User drinks green tea", "created_at": days_ago(2),
                    "source_conversation_id": "c2"})
    assert set(rows(app)) == {"tea"} and _said(app, "tea") != own
    result = erase(app, conversation_id="c2")
    assert (result.note_ids, result.redated_ids) == ([], ["tea"])
    assert _said(app, "tea") == own


def test_a_line_below_in_the_same_file_said_in_an_erased_conversation_loses_that_date(
        app: App) -> None:
    """The same two statements in one file: the line of c2 below adds no note (the note of no
    conversation above stands in for it) and dates that note, logged with c2 as a stored note's
    is. Before, the note was inserted at c2's date with no record of it, and erasing c2 left
    the date behind."""
    add_notes(app, {"id": "tea", "content": "User drinks green tea", "created_at": days_ago(30)},
              {"content": "User drinks green tea", "created_at": days_ago(2),
               "source_conversation_id": "c2"})
    assert set(rows(app)) == {"tea"}
    dated = _said(app, "tea")[0]
    assert dated is not None and dated == _at(datetime.fromisoformat(days_ago(2)))
    result = erase(app, conversation_id="c2")
    assert (result.note_ids, result.redated_ids) == ([], ["tea"])
    back = _said(app, "tea")[0]
    assert back is not None and back == _at(datetime.fromisoformat(days_ago(30)))


def _copy(app: App, tmp_path: Path) -> App:
    """A store of another machine, holding ``app``'s notes as ``dream notes export`` wrote them
    and ``dream notes import`` read them."""
    copy = make_sqlite_app(tmp_path / "copy")
    exported = list(export_notes(app))
    assert import_notes(copy, exported).inserted == len(exported)
    return copy


def test_an_imported_export_dates_a_note_back_as_its_first_store_would(
        app: App, tmp_path: Path) -> None:
    """A note dated at a later line of c2 (no note of its own), exported and imported into
    another store: the line's statement comes with it (``statements``), so erasing c2 there
    dates the note back to its own date. Before, the other store had no record of c2's
    statement: "nothing to erase", and the note kept c2's date."""
    add_notes(app, {"id": "tea", "content": "User drinks green tea", "created_at": days_ago(30)},
              {"content": "User drinks green tea", "created_at": days_ago(2),
               "source_conversation_id": "c2"})
    (line,) = (json.loads(x) for x in export_notes(app))
    assert line["statements"]["first"]["created_at"] == days_ago(30)
    assert [(s["created_at"], s["source_conversation_id"]) for s in
            line["statements"]["again"]] == [(days_ago(2), "c2")]
    copy = _copy(app, tmp_path)
    try:
        assert [json.loads(x)["statements"] for x in export_notes(copy)] == [line["statements"]]
        result = erase(copy, conversation_id="c2")
        assert (result.note_ids, result.redated_ids) == ([], ["tea"])
        assert _said(copy, "tea")[0] == _at(datetime.fromisoformat(days_ago(30)))
    finally:
        copy.dispose()


def test_an_imported_export_of_a_dream_restated_note_dates_it_back_too(
        app: App, tmp_path: Path) -> None:
    """The fuller note a contradictions run dated at the short note's statement (c3), exported
    and imported elsewhere: erasing c3 there dates it back to its own first date (which the
    export records; the run's log rows stay behind). A note never re-dated exports none."""
    own = _history(app)
    copy = _copy(app, tmp_path)
    try:
        lines = {json.loads(x)["id"]: json.loads(x) for x in export_notes(copy)}
        assert "statements" in lines["full"] and "statements" not in lines["light"]
        assert lines["full"]["statements"]["again"] == []
        result = erase(copy, conversation_id="c3")
        assert (result.note_ids, result.redated_ids) == (["short"], ["full"])
        assert _said(copy, "full")[0] == own[0]
    finally:
        copy.dispose()


def test_an_export_leaves_out_a_statement_dated_after_its_note(app: App, tmp_path: Path) -> None:
    """A log row saying the fact later than the note's own date (no path writes one today;
    an older store's might): no erasure dates a note forward, and import refuses such a
    statement, so the export leaves it out and its file still imports."""
    add_notes(app, {"id": "tea", "content": "User drinks green tea", "created_at": days_ago(30)},
              {"content": "User drinks green tea", "created_at": days_ago(9),
               "source_conversation_id": "c2"})
    with app.uow() as uow:
        uow.writes.add_log([{
            "run_id": None, "scope_key": Scope("agent-1").key, "entity": "note",
            "entity_id": "tea", "op": "update", "reason": "remember: stated again",
            "before": {"created_at": days_ago(9), "write_seq": 1},
            "after": {"created_at": days_ago(1), "write_seq": 2}, "created_at": NOW}])
        uow.commit()
    (line,) = (json.loads(x) for x in export_notes(app))
    assert [s["created_at"] for s in line["statements"]["again"]] == [days_ago(9)]
    _copy(app, tmp_path).dispose()
