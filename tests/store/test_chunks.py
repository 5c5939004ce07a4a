"""``chunked``: the pieces a look-up binds one statement each; and ``rows_by_id`` and the note
look-ups built on them returning every row of more ids than one chunk holds, each id asked once,
on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.bind_limits import bind_limit
from tests.support.factories import NOW, add_notes
from tests.support.sql import recorded_statements
from worker.app import App
from worker.domain.types import Scope
from worker.store.chunks import IN_CHUNK, chunked, rows_by_id
from worker.store.models import NoteRow
from worker.store.repositories.retention import ArchiveItem
from worker.store.uow import UnitOfWork


@pytest.mark.parametrize(("values", "size", "pieces"), [
    # Nothing to look up: no piece, so no statement with an empty IN list.
    ([], 3, []),
    # Fewer values than a piece holds: one short piece.
    ([1, 2], 3, [[1, 2]]),
    # An exact multiple: full pieces only, no empty one at the end.
    ([1, 2, 3, 4, 5, 6], 3, [[1, 2, 3], [4, 5, 6]]),
    # A remainder: the last piece is the short one, and the order is the input's.
    ([5, 4, 3, 2, 1], 2, [[5, 4], [3, 2], [1]]),
    # A piece of one: every value alone.
    (["a", "b"], 1, [["a"], ["b"]]),
])
def test_pieces_keep_the_values_in_order(values: list[Any], size: int,
                                         pieces: list[list[Any]]) -> None:
    """Consecutive slices of ``size``, the last one shorter, never an empty one."""
    assert list(chunked(values, size)) == pieces


def test_the_default_piece_is_the_store_s_in_chunk_and_a_list_gives_lists() -> None:
    """``IN_CHUNK`` values a piece unless told; a list's pieces are lists, a tuple's tuples."""
    pieces = list(chunked(list(range(2 * IN_CHUNK + 1))))
    assert [len(p) for p in pieces] == [IN_CHUNK, IN_CHUNK, 1]
    assert all(type(p) is list for p in pieces)
    assert list(chunked((1, 2, 3), 2)) == [(1, 2), (3,)]


@pytest.mark.parametrize("size", [0, -1])
def test_a_size_below_one_is_refused_at_the_call(size: int) -> None:
    """A size that would loop forever or take nothing raises before any piece is asked for."""
    with pytest.raises(ValueError, match="at least 1"):
        chunked([1, 2], size)


# Look-ups by note id, each answering with a mapping or set keyed by the ids it found.
LOOKUPS: dict[str, Callable[[UnitOfWork, list[str]], Any]] = {
    "rows_by_id": lambda uow, ids: rows_by_id(uow.session, NoteRow.id, (NoteRow.scope_key,), ids),
    "notes.identities": lambda uow, ids: uow.notes.identities(ids),
    "writes.lock_state": lambda uow, ids: uow.writes.lock_state(ids),
    "safety.note_state": lambda uow, ids: uow.safety.note_state(ids),
    "safety.contents": lambda uow, ids: uow.safety.contents(ids),
    "notes.get_many": lambda uow, ids: {n.id for n in uow.notes.get_many(ids)},
    "notes.versions": lambda uow, ids: uow.notes.versions(ids),
    "notes.review_state": lambda uow, ids: uow.notes.review_state(ids),
    "notes.comments_of": lambda uow, ids: uow.notes.comments_of(ids),
}


def test_a_look_up_of_more_ids_than_one_chunk_finds_every_row(app: App) -> None:
    """Two full chunks and a remainder of stored notes, each asked twice and with unknown ids
    among them: every stored id is found, no unknown one, in one SELECT per chunk of the
    distinct ids (three; five if the repeats were asked again)."""
    stored = [f"n{k:05d}" for k in range(2 * IN_CHUNK + 1)]
    add_notes(app, *({"id": i, "content": f"fact number {i}"} for i in stored))
    asked = [*stored, "unknown-1", *reversed(stored), "unknown-2"]
    for name, look_up in LOOKUPS.items():
        with app.uow() as uow, recorded_statements(app) as seen:
            found = look_up(uow, asked)
        assert set(found) == set(stored), name
        selects = [s for s in seen if s.startswith("SELECT")]
        assert len(selects) == 3, (name, len(selects))
    with app.uow() as uow:
        row = rows_by_id(uow.session, NoteRow.id, (NoteRow.scope_key,), ["n00007"])["n00007"]
        assert tuple(row) == ("n00007", uow.notes.identities(["n00007"])["n00007"][0])


# The look-ups that once bound every id in one IN list, each answering with what it found of
# the three stored notes (none of whose hashes, lineage or agents are among the ids asked).
UNBOUNDED_ONCE: dict[str, Callable[[UnitOfWork, list[str]], Any]] = {
    "notes.get_many": LOOKUPS["notes.get_many"],
    "notes.versions": LOOKUPS["notes.versions"],
    "notes.review_state": LOOKUPS["notes.review_state"],
    "notes.comments_of": LOOKUPS["notes.comments_of"],
    "notes.statuses_by_hash": lambda uow, ids: uow.notes.statuses_by_hash(Scope("agent-1"), ids),
    "notes.lineage_edges": lambda uow, ids: uow.notes.lineage_edges(ids),
    "entities.fetch": lambda uow, ids: uow.entities.fetch("agent", ids),
}
FOUND_OF_STORED: dict[str, set[str]] = {"notes.statuses_by_hash": set(), "notes.lineage_edges": set(),
                   "entities.fetch": set()}


def _more_ids_than_a_statement_binds(app: App, limit: int) -> list[str]:
    stored = ["n1", "n2", "n3"]
    add_notes(app, *({"id": i, "content": f"fact number {i}"} for i in stored))
    return ["n3", *(f"unknown-{k:05d}" for k in range(limit + 1 - len(stored))), "n1", "n2"]


def test_a_look_up_of_more_ids_than_a_statement_binds_answers(app: App) -> None:
    """One id more than the backend binds in a statement (SQLite at the smallest limit its
    builds ship, PostgreSQL at psycopg's 65,535), three of them stored: every look-up finds
    what it did of those alone (before: "too many SQL variables", or psycopg refusing the
    parameters)."""
    with bind_limit(app) as limit:
        asked = _more_ids_than_a_statement_binds(app, limit)
        with app.uow() as uow:
            for name, look_up in UNBOUNDED_ONCE.items():
                expected = FOUND_OF_STORED.get(name, {"n1", "n2", "n3"})
                assert set(look_up(uow, asked)) == expected, name


def test_an_undo_whose_writes_fell_short_on_more_rows_than_a_statement_binds(
        sqlite_app: App) -> None:
    """Restoring more notes than SQLite binds in a statement, none at the version the undo
    read: the re-read of what moved names every id, so the undo is refused and rolled back
    (before: "too many SQL variables"). On SQLite only: PostgreSQL would write 65,536 rows
    (2.5 s) to reach the same ``rows_by_id`` look-up the test above runs there."""
    with bind_limit(sqlite_app) as limit:
        asked = _more_ids_than_a_statement_binds(sqlite_app, limit)
        with sqlite_app.uow() as uow:
            moved = uow.safety.restore_notes([(i, 7, {"status": "active"}) for i in asked], {})
    assert moved == sorted(asked)


def test_writes_by_more_ids_than_a_statement_binds_reach_their_rows(app: App) -> None:
    """Prune's checked marks, a run's stale review items and the archive of examples, each
    over one id more than the backend binds in a statement: the stored rows are written, no
    other (before: "too many SQL variables", or psycopg refusing the parameters)."""
    scope = Scope("agent-1")
    with bind_limit(app) as limit:
        asked = _more_ids_than_a_statement_binds(app, limit)
        with app.uow() as uow:
            uow.examples.insert_many([{
                "id": i, "scope_key": scope.key, "agent_id": scope.agent_id, "input": f"in {i}",
                "output": f"out {i}", "status": "active", "is_auto_generated": True,
                "created_at": NOW, "version": 2} for i in ("e1", "e2")])
            uow.notes.mark_checked(asked, NOW)
            uow.review.mark_stale(list(range(limit + 1)), NOW, "changed")
            archived = uow.examples.archive(
                scope, [ArchiveItem(i, 2, "expired") for i in ["e2", *asked, "e1"]],
                run_id=None, reason="archived", now=NOW)
            uow.commit()
        with app.uow() as uow:
            checked = uow.notes.load_scope(scope, vectors=False).checked
    assert checked == dict.fromkeys(["n1", "n2", "n3"], NOW)
    assert archived == ["e1", "e2"]
