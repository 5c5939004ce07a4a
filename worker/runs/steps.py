"""Run-step records: a parent step per phase and child steps per cluster or batch."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from worker.clock import utcnow
from worker.domain.types import Scope, StepStatus
from worker.store.uow import UnitOfWork


@dataclass
class ChildStep:
    """What one cluster or model batch records; written inside the transaction that applies it."""

    name: str
    status: str
    input: dict[str, Any] = field(default_factory=dict)
    output: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    prompt_name: str | None = None
    template_hash: str | None = None
    model: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    started_at: datetime | None = None
    duration_ms: float | None = None


class StepRecorder:
    """Writes steps for one run; the parent step is committed at once so dashboards see progress."""

    def __init__(self, app: Any, run_id: str, scope: Scope) -> None:
        self.app = app
        self.run_id = run_id
        self.scope = scope
        self._seq = 0
        # The child rows the phase kit committed (``committed``), and whether a child step was
        # written another way (``untracked``): what the engine's finalize may rely on.
        self.committed: list[dict[str, Any]] = []
        self.untracked = False

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def start_phase(self, phase: str, input: dict[str, Any] | None = None,
                    step_id: str | None = None) -> str:
        """Commit the parent step; a fixed ``step_id`` makes a duplicate start fail (IntegrityError)."""
        with self.app.uow() as uow:
            step_id = uow.runs.add_step({
                **({"id": step_id} if step_id else {}),
                "run_id": self.run_id, "parent_id": None, "scope_key": self.scope.key,
                "phase": phase, "name": phase, "seq": self._next_seq(),
                "status": StepStatus.RUNNING.value, "input": input or {},
                "started_at": utcnow(),
            })
            uow.commit()
        return step_id

    def finish_phase(
        self, step_id: str, *, status: str, output: dict[str, Any], started: float,
        error: str | None = None, tokens_in: int = 0, tokens_out: int = 0,
        model: str | None = None, prompt_name: str | None = None,
        template_hash: str | None = None,
    ) -> None:
        with self.app.uow() as uow:
            uow.runs.update_step(
                step_id, status=status, output=output, error=error, finished_at=utcnow(),
                duration_ms=(time.perf_counter() - started) * 1000, tokens_in=tokens_in,
                tokens_out=tokens_out, model=model, prompt_name=prompt_name,
                template_hash=template_hash,
            )
            uow.commit()

    def child(self, uow: UnitOfWork, parent_id: str, phase: str, step: ChildStep) -> str:
        """Add a child step inside the caller's transaction (it commits with the change it explains)."""
        self.untracked = True
        return uow.runs.add_step(self.child_row(parent_id, phase, step))

    def child_row(self, parent_id: str, phase: str, step: ChildStep) -> dict[str, Any]:
        """The row of a child step, for a write that inserts its steps in one statement."""
        now = utcnow()
        return {
            "id": str(uuid.uuid4()), "run_id": self.run_id, "parent_id": parent_id, "scope_key": self.scope.key,
            "phase": phase, "name": step.name, "seq": self._next_seq(), "status": step.status,
            "input": step.input, "output": step.output, "error": step.error,
            "prompt_name": step.prompt_name, "template_hash": step.template_hash,
            "model": step.model, "tokens_in": step.tokens_in, "tokens_out": step.tokens_out,
            "started_at": step.started_at or now, "finished_at": now,
            "duration_ms": step.duration_ms,
        }
