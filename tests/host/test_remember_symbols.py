"""Symbols that carry a value are part of a note's identity: "C#" is not "C++" nor "C", "100%"
is not "$100", "-5" is not "5". The identity hash folded them away, so each pair was one note:
`remember` answered NOOP for the new fact, an import skipped it as present, the rule judge
merged the two (worker.domain.types.normalise_text; migration 0015 rehashes stored notes)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text, update

from tests.store.test_migrate import _migrate
from worker.app import App
from worker.domain.types import Scope, content_hash, normalise_text
from worker.host.note_ids import derived_id, id_key, scope_salt
from worker.host.remember import remember
from worker.ingest import import_notes
from worker.store.models import NoteRow

SCOPE = Scope("agent-1")


@pytest.mark.parametrize(("a", "b", "same"), [
    ("User writes C++ at work", "User writes C# at work", False),
    ("User writes C++ at work", "User writes C at work", False),
    ("Budget is $100", "Budget is 100%", False),
    ("Temperature is -5 degrees", "Temperature is 5 degrees", False),
    ("Temperature is −5 degrees", "Temperature is 5 degrees", False),  # U+2212 minus sign
    # what the fold is for still folds: case, punctuation, spacing, hyphens between words
    ("User prefers tea.", "user  prefers TEA!!", True),
    ("state-of-the-art editor", "state of the art editor", True),
    # a dash between digits is part of the number ("10-12", "2026-03-10"); any dash reads as one
    ("Meeting moved to 10-12", "Meeting moved to 10 12", False),
    ("Meeting moved to 10–12", "Meeting moved to 10-12", True),
    # symbols alone: each its own identity (before: all of them the empty text)
    ("🙂", "!!!", False),
    ("🙂", "🙁", False),
    (" 🙂 ", "🙂", True),
])
def test_value_symbols_are_part_of_the_identity(a: str, b: str, same: bool) -> None:
    assert (normalise_text(a) == normalise_text(b)) is same
    assert (content_hash(a) == content_hash(b)) is same


def test_remember_keeps_a_fact_that_differs_by_a_symbol(app: App) -> None:
    """Before: NOOP, returning the C++ note; the C# fact was lost."""
    first = remember(app, SCOPE, "User writes C++ at work", note_type="Preference")
    second = remember(app, SCOPE, "User writes C# at work", note_type="Preference")
    assert first.action == "ADD" and second.action == "ADD" and second.id != first.id
    minus = remember(app, SCOPE, "Freezer is set to -18 degrees")
    plus = remember(app, SCOPE, "Freezer is set to 18 degrees")
    assert plus.action == "ADD" and plus.id != minus.id


def test_import_adds_a_line_that_differs_by_a_symbol(app: App) -> None:
    """An id-less line whose folded text a stored note held was skipped as already present."""
    lines = [json.dumps({"agent_id": "agent-1", "content": c})
             for c in ("Budget is $100", "Budget is 100%", "🙂", "👎")]
    assert import_notes(app, lines).inserted == 4
    assert import_notes(app, lines).inserted == 0  # still idempotent


def test_migration_0015_rehashes_notes_holding_a_value_symbol(app: App) -> None:
    """A store written before 0015 holds the folded hash: after the upgrade a re-import of its
    own lines adds nothing, and remember of the text without the symbol is a new note, not a
    NOOP on the old one (nor a clash with the id derived from the old fold)."""
    old_fold = hashlib_of("user writes c at work")
    taken = _derived(app, "user writes c at work")  # the scope's salt made, as a remember would
    lines = [json.dumps({"id": "n1", "agent_id": "agent-1", "content": "User writes C++ at work"}),
             json.dumps({"id": "n2", "agent_id": "agent-1", "content": "User likes tea"}),
             json.dumps({"id": "n3", "agent_id": "agent-1", "content": "👍"})]
    import_notes(app, lines)
    _migrate(app, "downgrade", "0014")
    with app.engine.begin() as conn:
        assert conn.execute(text("SELECT content_hash FROM notes WHERE id = 'n3'")).scalar() \
            == hashlib_of("")
        assert conn.execute(text("SELECT content_hash FROM notes WHERE id = 'n1'")).scalar() \
            == old_fold
        plain = conn.execute(text("SELECT content_hash FROM notes WHERE id = 'n2'")).scalar()
        # remember derived its ids from the old fold: the C++ note holds the id "C" derives now
        conn.execute(update(NoteRow).where(NoteRow.id == "n1").values(id=taken))
    _migrate(app, "upgrade", "head")
    with app.engine.begin() as conn:
        assert conn.execute(text("SELECT content_hash FROM notes WHERE id = :i"),
                            {"i": taken}).scalar() == content_hash("User writes C++ at work")
        assert conn.execute(text("SELECT content_hash FROM notes WHERE id = 'n2'")).scalar() \
            == plain == content_hash("User likes tea")
    assert import_notes(app, [json.dumps({"agent_id": "agent-1",
                                          "content": "User writes C++ at work"})]).inserted == 0
    assert import_notes(app, [json.dumps({"agent_id": "agent-1", "content": c})
                              for c in ("👍", "!!!")]).inserted == 1  # "!!!" is new
    c = remember(app, SCOPE, "User writes C at work")
    assert c.action == "ADD" and c.id not in {taken, "n2"}


def hashlib_of(folded: str) -> str:
    import hashlib

    return hashlib.sha256(folded.encode()).hexdigest()


def _derived(app: App, normalised: str) -> str:
    """The id remember derives for ``normalised`` in SCOPE now (its salt made if it has none)."""
    key = id_key(app)
    with app.uow() as uow:
        salt = scope_salt(uow, key, SCOPE)
    return derived_id(key, SCOPE, normalised, salt=salt)
