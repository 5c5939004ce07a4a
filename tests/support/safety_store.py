"""A small store that makes every phase do something, and the invariants every run must keep."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import select

from tests.support.factories import NOW, add_entities, add_notes, days_ago
from worker.app import App
from worker.domain.types import Scope
from worker.store.models import NoteLineageRow, NoteRow

SCOPE = Scope("agent-1", "u1")
OTHER = Scope("agent-1", "u2")
# The crash-safety stores retire more than half of SCOPE on purpose (every phase does
# something); runs over them allow that many retirements past the blast-radius guard
# (--allow-retire), which these tests are not about. More than any of them holds.
RETIRE_ALLOWANCE = 100


def mixed_store(app: App) -> None:
    """Duplicates to merge, a contradiction, an orphan, an expired note, protected/immutable ones,
    and the same duplicates in a second scope (which must never meet the first)."""
    add_entities(app, {"kind": "agent", "id": "agent-1"}, {"kind": "user", "id": "u1"},
                 {"kind": "user", "id": "u2"},
                 {"kind": "conversation", "id": "c-dead", "status": "deleted"})
    for scope in (SCOPE, OTHER):
        base = {"agent_id": scope.agent_id, "user_id": scope.user_id}
        add_notes(app,
                  {**base, "content": "User prefers dark mode", "created_at": days_ago(30)},
                  {**base, "content": "User prefers dark mode in the editor",
                   "created_at": days_ago(20)},
                  {**base, "content": "User prefers dark mode in the editor at night",
                   "created_at": days_ago(10)},
                  {**base, "content": "User drinks green tea every morning",
                   "created_at": days_ago(9)},
                  {**base, "content": "User drinks green tea every morning before work",
                   "created_at": days_ago(8)},
                  {**base, "content": "User lives in Berlin", "created_at": days_ago(200),
                   "importance": 0.3},
                  {**base, "content": "User no longer lives in Berlin", "created_at": days_ago(2),
                   "importance": 0.3},
                  {**base, "content": "Asked about invoice 4411 in a deleted chat",
                   "source_conversation_id": "c-dead", "created_at": days_ago(40)},
                  {**base, "content": "Trial ends soon", "expires_at": days_ago(3),
                   "created_at": days_ago(60)},
                  {**base, "content": "User prefers dark mode everywhere", "protection": "protected",
                   "created_at": days_ago(5), "last_accessed_at": days_ago(1)},
                  {**base, "content": "Invoices for the customer are sent in EUR every month",
                   "protection": "protected", "created_at": days_ago(50),
                   "last_accessed_at": days_ago(1)},
                  # said before the fuller protected note: the rules retire it into that
                  # (a later, shorter statement may have dropped what made the fuller one
                  # wrong, and stays open)
                  {**base, "content": "Invoices for the customer are sent in EUR",
                   "created_at": days_ago(55)},
                  {**base, "content": "User prefers dark mode at all times",
                   "protection": "immutable", "created_at": days_ago(5), "expires_at": days_ago(1)})


def canonical_state(app: App) -> Counter[tuple[Any, ...]]:
    """The store as a reader sees it, independent of generated ids: per note its scope, content,
    status, protection and the content of the note it was merged into."""
    with app.uow() as uow:
        rows = list(uow.session.scalars(select(NoteRow)))
    content = {r.id: r.content for r in rows}
    return Counter((r.scope_key, r.content, r.status, r.protection,
                    content.get(r.consolidated_into_id or "")) for r in rows)


def check_invariants(app: App) -> None:
    """R8/R9/R11 after any run, crash or not:
    * every note is active, or has a successor, or carries a recorded reason (comments);
    * no lineage edge and no consolidated_into pointer crosses a scope;
    * no supersession cycle;
    * a fused note (lineage child) is never visible while one of its parents is still active
      and merged into it — nor a revoked parent pointing at a note that does not exist (R9).
    """
    with app.uow() as uow:
        rows = {r.id: r for r in uow.session.scalars(select(NoteRow))}
        edges = list(uow.session.scalars(select(NoteLineageRow)))
    for r in rows.values():
        if r.status != "active":
            assert r.consolidated_into_id or r.comments, f"{r.id} retired without a reason"
        if r.consolidated_into_id:
            target = rows.get(r.consolidated_into_id)
            assert target is not None, f"{r.id} points at a missing note"
            assert target.scope_key == r.scope_key, "consolidated_into crosses a scope"
    for e in edges:
        assert rows[e.parent_id].scope_key == rows[e.child_id].scope_key == e.scope_key, \
            "lineage crosses a scope"
    for start in rows:
        seen: set[str] = set()
        cur: str | None = start
        while cur is not None:
            assert cur not in seen, f"supersession cycle through {cur}"
            seen.add(cur)
            cur = rows[cur].consolidated_into_id if cur in rows else None
    children: dict[str, list[str]] = {}
    for e in edges:
        children.setdefault(e.child_id, []).append(e.parent_id)
    for child, parents in children.items():
        if rows[child].status == "active":
            for p in parents:
                assert not (rows[p].status == "active" and rows[p].consolidated_into_id == child)


__all__ = ["NOW", "OTHER", "RETIRE_ALLOWANCE", "SCOPE", "canonical_state", "check_invariants",
           "mixed_store"]
