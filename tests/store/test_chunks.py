"""``chunked``: the pieces a look-up binds one statement each; and ``rows_by_id`` and the note
look-ups built on them returning every row of more ids than one chunk holds, each id asked once,
on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.factories import add_notes
from tests.support.sql import recorded_statements
from worker.app import App
from worker.store.chunks import IN_CHUNK, chunked, rows_by_id
from worker.store.models import NoteRow
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
