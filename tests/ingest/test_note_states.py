"""An imported note's state must be one the worker could have left (R8, R22): an active note
replaced by another, a source merged into a live note that does not point at it, a validity
that ends before the note was recorded, an edge given twice, a loop of pointers or of lineage. Each is
refused with one line naming the file line and the field and what to do, and nothing is
written (SQLite and PostgreSQL). Before, each was imported as given."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.factories import add_notes
from worker.app import App
from worker.ingest import InputError, import_notes

KEPT: dict[str, Any] = {"id": "k", "content": "User likes green tea"}
EDGE = {"parent_id": "k", "relation": "consolidated"}


@pytest.mark.parametrize(("lines", "expected"), [
    # An active or pending note is replaced by none: its pointer says it was retired.
    ([KEPT, {"id": "a", "content": "User likes tea", "consolidated_into_id": "k"}],
     "line 2: consolidated_into_id names the note that replaced this one, but status is active"),
    ([KEPT, {"id": "a", "content": "User likes tea", "status": "pending",
             "consolidated_into_id": "k"}],
     "line 2: consolidated_into_id names the note that replaced this one, but status is pending"),
    # R28: a source merged into a live note points at it, or erasing that note keeps it retired.
    ([{"id": "a", "content": "User likes tea", "status": "revoked", "comments": "merged"},
      {"id": "f", "content": "User likes tea and coffee",
       "lineage": [{"parent_id": "a", "relation": "consolidated"}]}],
     "line 1: status is revoked and note 'f' (line 2) was consolidated from it, but "
     "consolidated_into_id is empty: give consolidated_into_id 'f'"),
    # A validity never ends before the note was recorded.
    ([{"id": "a", "content": "User likes tea", "status": "revoked", "comments": "old",
       "created_at": "2026-01-02T00:00:00+00:00", "valid_to": "2026-01-01T00:00:00+00:00"}],
     "line 1: valid_to 2026-01-01T00:00:00+00:00 is before created_at"),
    # Nor before it began (valid_from later than created_at: a later start, or swapped dates).
    ([{"id": "a", "content": "User likes tea", "created_at": "2026-01-01T00:00:00+00:00",
       "valid_from": "2026-05-01T00:00:00+00:00", "valid_to": "2026-02-01T00:00:00+00:00"}],
     "line 1: valid_to 2026-02-01T00:00:00+00:00 is before valid_from "
     "2026-05-01T00:00:00+00:00; a note's validity cannot end before it begins"),
    ([{"id": "a", "content": "User likes tea", "status": "revoked", "comments": "old",
       "created_at": "2026-01-01T00:00:00+00:00", "valid_from": "2026-05-01T00:00:00+00:00",
       "valid_to": "2026-02-01T00:00:00+00:00"}],
     "line 1: valid_to 2026-02-01T00:00:00+00:00 is before valid_from"),
    # Nor does an expiry (two dates of the line that contradict each other).
    ([{"id": "a", "content": "User likes tea", "created_at": "2026-01-02T00:00:00+00:00",
       "expires_at": "2026-01-01T00:00:00+00:00"}],
     "line 1: expires_at 2026-01-01T00:00:00+00:00 is before created_at "
     "2026-01-02T00:00:00+00:00; a note cannot expire before it was written"),
    # One edge, once.
    ([KEPT, {"id": "a", "content": "User likes tea", "lineage": [EDGE, EDGE]}],
     "line 2: lineage names parent 'k' twice"),
    # Pointers that loop leave no note standing for either (the first line of the loop named).
    ([{"id": "k", "content": "User likes green tea", "status": "revoked",
       "consolidated_into_id": "a"},
      {"id": "a", "content": "User likes tea", "status": "revoked", "consolidated_into_id": "k"}],
     "line 1: consolidated_into_id makes a loop (k → a → k)"),
    # Lineage that loops makes each note derived from itself.
    ([{"id": "k", "content": "User likes green tea",
       "lineage": [{"parent_id": "a", "relation": "consolidated"}]},
      {"id": "a", "content": "User likes tea", "lineage": [EDGE]}],
     "line 1: lineage makes a loop (k → a → k)"),
])
def test_an_inconsistent_note_state_is_refused_and_nothing_written(
    app: App, lines: list[dict[str, object]], expected: str,
) -> None:
    with pytest.raises(InputError) as err:
        import_notes(app, [json.dumps({"agent_id": "ag", **line}) for line in lines])
    assert expected in str(err.value) and "\n" not in str(err.value), str(err.value)
    with app.uow() as uow:
        assert sum(uow.notes.count_by_status().values()) == 0


def test_what_the_worker_leaves_is_still_imported(app: App) -> None:
    """The states a dream, an undo, an erasure or a host leave pass: revoked into a note,
    revoked with a reason only (an undone run's note) or with none (a host retired it straight
    in the table), archived, a validity ending when it began, a loop-free chain of pointers
    into a stored note; and a note without created_at already expired (recorded at the
    import's time, for the next dream to archive), or edited before its created_at (a dream
    editing a note dated ahead of its clock stamps its clock)."""
    add_notes(app, {"id": "s", "agent_id": "ag", "content": "User likes black tea"})
    result = import_notes(app, [json.dumps({"agent_id": "ag", **line}) for line in [
        KEPT,
        {"id": "a", "content": "User likes tea", "status": "revoked", "consolidated_into_id": "k",
         "lineage": [EDGE]},
        {"id": "b", "content": "User likes tea a lot", "status": "revoked",
         "comments": "undone run r1"},
        {"id": "c", "content": "User liked tea once", "status": "archived"},
        {"id": "h", "content": "User liked tea twice", "status": "revoked"},
        {"id": "d", "content": "User drank tea", "status": "revoked", "consolidated_into_id": "a",
         "created_at": "2026-01-01T00:00:00+00:00", "valid_to": "2026-01-01T00:00:00+00:00"},
        {"id": "e", "content": "User drank black tea", "status": "revoked",
         "consolidated_into_id": "s"},
        # ended at its start, later than its date (a run's fusion retired before it began)
        {"id": "f", "content": "User drank oolong tea", "status": "revoked",
         "consolidated_into_id": "s", "created_at": "2026-01-01T00:00:00+00:00",
         "valid_from": "2026-03-01T00:00:00+00:00", "valid_to": "2026-03-01T00:00:00+00:00"},
        {"id": "x", "content": "User drank green tea", "expires_at": "2026-01-01T00:00:00+00:00"},
        {"id": "u", "content": "User drank white tea", "created_at": "2099-01-01T00:00:00+00:00",
         "updated_at": "2026-01-01T00:00:00+00:00"},
    ]])
    assert result.inserted == 10
