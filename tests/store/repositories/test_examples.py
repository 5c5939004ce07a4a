"""The archive phase's read of examples, on SQLite and PostgreSQL: the scope's active ones in
id order, with the fields retention decides on (aware UTC times)."""

from __future__ import annotations

from datetime import UTC, timedelta

from tests.support.factories import NOW
from worker.app import App
from worker.domain.types import Scope

A = Scope("a", "u")


def _example(i: str, scope: Scope, status: str = "active") -> dict[str, object]:
    return {"id": i, "scope_key": scope.key, "agent_id": scope.agent_id, "user_id": scope.user_id,
            "input": f"in {i}", "output": f"out {i}", "success_score": 0.5, "status": status,
            "is_auto_generated": i != "e2", "created_at": NOW - timedelta(days=3),
            "last_accessed_at": None, "expires_at": NOW, "version": 2}


def test_active_reads_the_scope_s_active_examples_in_id_order(app: App) -> None:
    """Archived examples and another scope's are left out; booleans and times read typed."""
    with app.uow() as uow:
        uow.examples.insert_many([_example("e3", A), _example("e1", A), _example("e2", A),
                                  _example("e4", A, "archived"), _example("e5", Scope("b", "u"))])
        uow.commit()
    with app.uow() as uow:
        found = uow.examples.active(A)
    assert [e.id for e in found] == ["e1", "e2", "e3"]
    first, second = found[0], found[1]
    assert first.is_auto_generated is True and second.is_auto_generated is False
    assert first.success_score == 0.5 and first.version == 2 and first.last_accessed_at is None
    assert first.created_at == NOW - timedelta(days=3) and first.created_at.tzinfo == UTC
    assert first.expires_at == NOW
