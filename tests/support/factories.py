"""Small builders for notes and sessions used across tests (through the real import path)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from worker.app import App
from worker.ingest import import_entities, import_notes, import_sessions

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def days_ago(days: float, now: datetime = NOW) -> str:
    return (now - timedelta(days=days)).isoformat()


def add_notes(app: App, *notes: dict[str, Any]) -> None:
    lines = []
    for n in notes:
        n = dict(n)
        n.setdefault("agent_id", "agent-1")
        if "embedding" in n:  # a test's own vector: this store's model made it
            n.setdefault("embedding_model", app.embedder.model_name)
        lines.append(json.dumps(n))
    import_notes(app, lines)


def add_sessions(app: App, count: int, agent_id: str = "agent-1", user_id: str | None = None,
                 company_id: str | None = None, start: datetime = NOW) -> None:
    import_sessions(app, [json.dumps({"agent_id": agent_id, "user_id": user_id,
                                      "company_id": company_id,
                                      "started_at": (start - timedelta(minutes=i)).isoformat()})
                          for i in range(count)])


def add_entities(app: App, *entities: dict[str, Any]) -> None:
    import_entities(app, [json.dumps(e) for e in entities])


# Five paraphrases of one preference: the cluster the consolidation tests fuse.
DARK_MODE_NOTES = [
    "User prefers dark mode in the code editor",
    "User prefers dark mode in the editor at night",
    "User prefers dark mode in the code editor and terminal",
    "User prefers the dark mode theme in the code editor",
    "User likes dark mode in the code editor",
]


def claimed_phase_context(app: App, scope: Any, phase: str = "contradictions") -> tuple[Any, str]:
    """A forced run of ``scope`` created and claimed, its ``PhaseContext`` and ``phase``'s
    started parent step (what a phase function is handed)."""
    from worker.runs import service
    from worker.runs.context import PhaseContext
    from worker.runs.steps import StepRecorder

    run_id = service.create_run(app, scope, force=True, clock=NOW)
    assert run_id
    epoch = service.claim_run(app, run_id)
    assert epoch is not None
    ctx = PhaseContext(app=app, run_id=run_id, scope=scope, now=NOW, epoch=epoch,
                       steps=StepRecorder(app, run_id, scope), allow_retire=10**6)
    return ctx, ctx.steps.start_phase(phase)


def approve_a_merge(app: App, scope: Any, proposed_by: str | None) -> Any:
    """Two new notes of ``scope`` (``t1``, ``t2``) proposed as a merge by run ``proposed_by``
    and approved by ``ana``: the review approval's run, succeeded (its ``Decided``)."""
    from worker.clock import utcnow
    from worker.review.items import ChangeKind, ProposedChange
    from worker.review.service import Selector, approve

    add_notes(app, {"id": "t1", "agent_id": scope.agent_id, "user_id": scope.user_id,
                    "company_id": scope.company_id, "content": "Prefers green tea."},
              {"id": "t2", "agent_id": scope.agent_id, "user_id": scope.user_id,
               "company_id": scope.company_id, "content": "Prefers green tea at noon."})
    change = ProposedChange(phase="consolidate", kind=ChangeKind.MERGE,
                            versions={"t1": 1, "t2": 1}, reason="rule: contained",
                            content="Prefers green tea at noon.", source_ids=("t1", "t2"),
                            payload={"rule": "contained", "similarity": 0.9})
    with app.uow() as uow:
        uow.review.add_many(scope, proposed_by, [change.row()], utcnow())
        uow.commit()
        item = int(uow.review.list(scope)[-1].id)
    (decided,) = approve(app, scope, Selector(item_id=item), "ana")
    assert decided.status == "approved" and decided.run_id, decided.line
    return decided
