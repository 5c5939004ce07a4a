"""Content dedup on import: it keeps a re-import idempotent, and never lets a retired note stand
in for a live one, nor drops a note that has an id of its own (SQLite and PostgreSQL)."""

from __future__ import annotations

import json

import pytest

from tests.support.bind_limits import bind_limit
from worker.app import App
from worker.export import export_notes
from worker.ingest import import_notes

OLD = {"id": "old", "agent_id": "ag", "content": "Bob likes tea", "status": "revoked"}
NEW = {"id": "new", "agent_id": "ag", "content": "Bob likes tea"}


def _statuses(app: App) -> dict[str, str]:
    return {r["id"]: r["status"] for r in map(json.loads, export_notes(app))}


@pytest.mark.parametrize("order", [[OLD, NEW], [NEW, OLD]])
def test_distinct_ids_with_one_text_are_distinct_notes(app: App,
                                                      order: list[dict[str, str]]) -> None:
    """A revoked note and the active one with its text (a fusion that kept a source's words)
    both restore, in either order; the file imported again adds nothing."""
    lines = [json.dumps(n) for n in order]
    first = import_notes(app, lines)
    assert (first.inserted, first.duplicates) == (2, 0)
    assert _statuses(app) == {"old": "revoked", "new": "active"}
    second = import_notes(app, lines)
    assert (second.inserted, second.duplicates) == (0, 2)


def test_a_retired_note_does_not_stand_in_for_a_live_line(app: App) -> None:
    """A line without an id is "already present" by its content only when a live note holds
    it; a retired line is, by any note with its text. Each outcome repeats on re-import."""
    import_notes(app, [json.dumps(OLD)])
    lines = [json.dumps({"agent_id": "ag", "content": "bob likes TEA"}),
             json.dumps({"agent_id": "ag", "content": "Bob likes tea", "status": "archived"}),
             json.dumps({"agent_id": "ag", "content": "Bob likes tea."})]
    first = import_notes(app, lines)
    assert (first.inserted, first.duplicates) == (1, 2)
    assert sorted(_statuses(app).values()) == ["active", "revoked"]
    second = import_notes(app, lines)
    assert (second.inserted, second.duplicates) == (0, 3)


def test_a_line_without_id_and_a_stored_live_note(app: App) -> None:
    """The dedup's purpose: a line without an id gets a new one on every import, so its text
    held live in the scope (stored or earlier in the file) means it is already there."""
    import_notes(app, [json.dumps(NEW)])
    result = import_notes(app, [json.dumps({"agent_id": "ag", "content": "Bob likes tea!"}),
                                json.dumps({"agent_id": "ag", "content": "Bob likes coffee"}),
                                json.dumps({"agent_id": "ag", "content": "bob likes coffee"})])
    assert (result.inserted, result.duplicates) == (1, 2)


def test_a_new_id_for_a_stored_live_text_is_a_twin_unless_pointed_at(app: App) -> None:
    """A live line under a new id whose text a stored live note holds adds no live twin; a
    retired one is history and is kept; one another line points at is kept, so the pointer holds."""
    import_notes(app, [json.dumps(NEW)])
    twin = {"agent_id": "ag", "content": "Bob likes tea"}
    result = import_notes(app, [
        json.dumps({**twin, "id": "twin"}),
        json.dumps({**twin, "id": "history", "status": "archived"}),
        json.dumps({**twin, "id": "winner"}),
        json.dumps({"id": "loser", "agent_id": "ag", "content": "Bob hates tea",
                    "status": "revoked", "consolidated_into_id": "winner"})])
    assert (result.inserted, result.duplicates) == (3, 1)
    assert _statuses(app) == {"new": "active", "history": "archived", "winner": "active",
                              "loser": "revoked"}


def test_more_notes_than_one_statement_binds_import_and_export(sqlite_app: App) -> None:
    """One scope of more notes than SQLite binds in a statement (at the smallest limit its builds
    ship): the import's content look-up and the export's lineage look-up ask in pieces, so the
    file goes in and comes out whole, and imported again adds nothing (before: "too many SQL
    variables" from the import)."""
    with bind_limit(sqlite_app) as limit:
        lines = [json.dumps({"id": f"n{k}", "agent_id": "ag", "content": f"fact number {k}"})
                 for k in range(limit + 1)]
        first = import_notes(sqlite_app, lines)
        exported = [json.loads(line)["id"] for line in export_notes(sqlite_app)]
        second = import_notes(sqlite_app, lines)
    assert first.inserted == limit + 1
    assert sorted(exported) == sorted(f"n{k}" for k in range(limit + 1))
    assert (second.inserted, second.duplicates) == (0, limit + 1)
