"""The undo's guarded restore (``SafetyRepository.restore_notes``) on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.support.factories import add_notes
from tests.support.host_writes import host_sets, note_rows
from worker.app import App


@pytest.mark.parametrize(("protection", "status", "written"), [
    ("immutable", "revoked", False),  # a pin that landed after the undo read: refused
    ("protected", "archived", False),  # archiving retires it too
    ("protected", "active", True),  # giving a pinned note back its active status is no retirement
    ("standard", "revoked", True),  # nothing pinned: the version alone decides
])
def test_restore_never_retires_an_active_pinned_note(app: App, protection: str, status: str,
                                                     written: bool) -> None:
    """A host's pin keeps the version, so the version guard alone would let an undo revoke a
    note pinned between its read and its write; the statement itself refuses it."""
    add_notes(app, {"id": "n1", "content": "User drinks green tea"})
    host_sets(app, "n1", protection=protection)
    with app.uow() as uow:
        assert uow.safety.restore_notes([("n1", 1, {"status": status})], {"n1": True}) == (
            [] if written else ["n1"])
        uow.commit()
    assert note_rows(app)["n1"].version == (2 if written else 1)

