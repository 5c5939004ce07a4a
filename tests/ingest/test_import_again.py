"""An import that says a fact again dates the note holding it at the later statement.

An id-less line whose text its scope already holds adds no note. Before, its date was dropped
too: "tea" (January), "coffee" (February), "tea" again (March) left the tea note dated January,
and every judge then kept coffee as the newer value.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.conftest import make_sqlite_app
from worker.app import App
from worker.ingest import import_notes
from worker.store.models import NoteRow, OperationLogRow

TEA = "The user prefers tea in the morning"
COFFEE = "The user prefers coffee in the morning"


def _line(text: str, month: int, day: int = 1) -> str:
    return json.dumps({"agent_id": "agent-1", "content": text,
                       "created_at": datetime(2025, month, day, tzinfo=UTC).isoformat()})


def _by_text(app: App) -> dict[str, NoteRow]:
    with app.uow() as uow:
        return {r.content: r for r in uow.session.query(NoteRow).all()}


def _month(row: NoteRow) -> int:
    assert row.created_at is not None
    return row.created_at.month


def test_a_line_below_that_says_it_again_dates_the_note(app: App) -> None:
    result = import_notes(app, [_line(TEA, 1), _line(COFFEE, 2), _line(TEA, 3)])
    assert (result.inserted, result.duplicates) == (2, 1)
    notes = _by_text(app)
    assert (_month(notes[TEA]), _month(notes[COFFEE])) == (3, 2)
    assert (notes[TEA].write_seq or 0) > (notes[COFFEE].write_seq or 0)


def test_a_line_below_without_a_date_dates_nothing(app: App) -> None:
    """An undated line is stamped with the import's time, which is no statement's date: the
    note above keeps its own, as a stored note does (below)."""
    undated = json.dumps({"agent_id": "agent-1", "content": TEA})
    result = import_notes(app, [_line(TEA, 1), _line(COFFEE, 2), undated])
    assert (result.inserted, result.duplicates) == (2, 1)
    notes = _by_text(app)
    assert (_month(notes[TEA]), notes[TEA].created_at.year) == (1, 2025)


def test_a_later_import_that_says_it_again_dates_the_stored_note(app: App) -> None:
    import_notes(app, [_line(TEA, 1), _line(COFFEE, 2)])
    result = import_notes(app, [_line(TEA, 3)])
    assert (result.inserted, result.duplicates, result.restated) == (0, 1, 1)
    tea = _by_text(app)[TEA]
    assert (_month(tea), tea.version) == (3, 2)
    with app.uow() as uow:
        (entry,) = uow.session.query(OperationLogRow).filter_by(entity_id=tea.id).all()
    assert entry.reason == "import: stated again"
    assert entry.before is not None and entry.before["created_at"].startswith("2025-01-01")
    # The same file again, an older statement of the fact, or a line with no date of its own
    # (the import's time), changes nothing.
    import_notes(app, [_line(TEA, 3)])
    import_notes(app, [_line(TEA, 2, 15)])
    assert import_notes(app, [json.dumps({"agent_id": "agent-1", "content": TEA})]).restated == 0
    again = _by_text(app)[TEA]
    assert (_month(again), again.version) == (3, 2)


def test_a_line_under_a_new_id_that_says_it_again_dates_the_stored_note(app: App) -> None:
    """A history imported day by day with ids: the repeat has an id of its own, its text is
    already stored, so it adds no note and dates the one that holds it."""
    import_notes(app, [json.dumps({"id": "tea-1", **json.loads(_line(TEA, 1))}),
                       json.dumps({"id": "coffee-1", **json.loads(_line(COFFEE, 2))})])
    result = import_notes(app, [json.dumps({"id": "tea-2", **json.loads(_line(TEA, 3))})])
    assert result.inserted == 0
    notes = _by_text(app)
    assert (notes[TEA].id, _month(notes[TEA]), notes[TEA].version) == ("tea-1", 3, 2)
    # Re-importing the first file (its ids stored) moves nothing back.
    import_notes(app, [json.dumps({"id": "tea-1", **json.loads(_line(TEA, 1))})])
    assert _month(_by_text(app)[TEA]) == 3


def test_the_cli_says_how_many_stored_notes_were_said_again(app: App) -> None:
    from tests.cli.test_commands import dream, url_of

    import_notes(app, [_line(TEA, 1)])
    out = dream(url_of(app), "notes", "import", "-", input=_line(TEA, 3) + "\n")
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == ("read 1 notes: 0 added, 1 already present (1 stored note said "
                                  "again later: dated at the later statement)")


def test_redating_thirty_stored_notes_takes_as_many_statements_as_three(app: App) -> None:
    """The stored notes an import says again are dated in one locked read, one UPDATE batch and
    one log insert for their scope, not three statements each."""
    from tests.support.sql import recorded_statements

    counts = []
    for n in (3, 30):
        facts = [f"The user keeps fact number {k} of batch {n} in mind" for k in range(n)]
        import_notes(app, [_line(f, 1) for f in facts])
        with recorded_statements(app) as statements:
            assert import_notes(app, [_line(f, 3) for f in facts]).restated == n
        counts.append(len(statements))
        with app.uow() as uow:
            logged = uow.session.query(OperationLogRow).filter_by(
                reason="import: stated again").count()
        assert logged == (3 if n == 3 else 33)
    assert counts[0] == counts[1], counts


def test_the_same_words_from_another_conversation_are_their_own_note(app: App) -> None:
    """Two lines of one file, no ids, the same text said in c1 and in c2: two notes (before,
    the second was "already present", and erasing c1 took the fact c2 said too). Imported
    again, nothing is added; a third line of c2 is c2's note said again."""
    lines = [json.dumps({"agent_id": "agent-1", "content": "Standup moved to 9:30",
                         "created_at": f"2026-05-0{day}T09:00:00Z",
                         "source_conversation_id": conversation})
             for day, conversation in ((1, "c1"), (2, "c2"))]
    first = import_notes(app, lines)
    assert (first.inserted, first.duplicates) == (2, 0)
    again = import_notes(app, [*lines, json.dumps({
        "agent_id": "agent-1", "content": "Standup moved to 9:30",
        "created_at": "2026-05-03T09:00:00Z", "source_conversation_id": "c2"})])
    assert (again.inserted, again.duplicates, again.restated) == (0, 3, 1)
    with app.uow() as uow:
        dated = {r.source_conversation_id: r.created_at.day
                 for r in uow.session.query(NoteRow).all()}
    assert dated == {"c1": 1, "c2": 3}


def _end_state(app: App) -> list[tuple[str, str, str, str, int | None]]:
    with app.uow() as uow:
        return sorted((r.content, r.source_conversation_id or "", r.status,
                       r.created_at.isoformat() if r.created_at else "", r.write_seq)
                      for r in uow.session.query(NoteRow).all())


def test_one_file_imported_in_one_go_or_in_parts_ends_the_same(tmp_path: Path) -> None:
    """A history of one fact said in and out of conversations, at rising dates: imported as
    one file, or as its first half and then its second, the notes end with the same texts,
    conversations, statuses, dates and recorded order. Before, a line below in the same file
    dated only the first note above it, and with no record; a later file dated every note
    that stands in for it, logged."""
    said = [(TEA, "c1", 1), (TEA, None, 2), (COFFEE, "c1", 3), (TEA, "c1", 4),
            (COFFEE, None, 5), (COFFEE, "c2", 6), (TEA, "c2", 7)]
    lines = [json.dumps({"agent_id": "agent-1", "content": text, "write_seq": month,
                         "created_at": datetime(2025, month, 1, tzinfo=UTC).isoformat(),
                         "source_conversation_id": conversation})
             for text, conversation, month in said]
    for cut in (3, 4, 6):
        whole = make_sqlite_app(tmp_path / f"whole-{cut}")
        parts = make_sqlite_app(tmp_path / f"parts-{cut}")
        try:
            import_notes(whole, lines)
            import_notes(parts, lines[:cut])
            import_notes(parts, lines[cut:])
            assert _end_state(whole) == _end_state(parts), cut
        finally:
            whole.dispose()
            parts.dispose()
    # A line of no conversation is its own note beside c1's (erasing c1 must leave it); a line
    # of c1 says again both notes, one of c2 only the one of no conversation. Before, the April
    # line dated only the first note above it.
    assert {(text, c): when[:7] for text, c, _, when, _ in _end_state(parts)} == {
        (TEA, "c1"): "2025-04", (TEA, ""): "2025-07",
        (COFFEE, "c1"): "2025-03", (COFFEE, ""): "2025-06"}


def test_any_history_imported_in_one_go_or_in_parts_ends_the_same(tmp_path: Path) -> None:
    """The same, for any history of two texts said in no conversation, c1 or c2, in order, cut
    anywhere: the whole file in one scope, its two parts in another, of one store."""
    app = make_sqlite_app(tmp_path)
    histories = itertools.count()

    @settings(max_examples=150, deadline=None)
    @given(said=st.lists(st.tuples(st.sampled_from([TEA, COFFEE]),
                                   st.sampled_from([None, "c1", "c2"])), min_size=1, max_size=8),
           cut=st.integers(0, 8))
    @example(said=[(TEA, "c1"), (TEA, "c2"), (TEA, None)], cut=2)  # before: only c1 dated
    def ends_the_same(said: list[tuple[str, str | None]], cut: int) -> None:
        n, cut = next(histories), cut % (len(said) + 1)

        def lines(agent: str) -> list[str]:
            return [json.dumps({"agent_id": agent, "content": text, "write_seq": k,
                                "created_at": datetime(2025, 1, 1 + k, tzinfo=UTC).isoformat(),
                                "source_conversation_id": conversation})
                    for k, (text, conversation) in enumerate(said)]

        import_notes(app, lines(f"whole-{n}"))
        import_notes(app, lines(f"parts-{n}")[:cut])
        import_notes(app, lines(f"parts-{n}")[cut:])
        with app.uow() as uow:
            ends = {agent: sorted((r.content, r.source_conversation_id or "", r.status,
                                   r.created_at, r.write_seq) for r in uow.session.query(NoteRow)
                                  .filter_by(agent_id=agent).all())
                    for agent in (f"whole-{n}", f"parts-{n}")}
        assert ends[f"whole-{n}"] == ends[f"parts-{n}"]

    try:
        ends_the_same()
    finally:
        app.dispose()
