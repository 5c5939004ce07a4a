"""The batches a phase of a run submitted, recorded as child steps of its parent step: a retried
or re-scheduled phase finds them and never submits the same questions twice."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from worker.clock import utcnow
from worker.domain.types import StepStatus
from worker.llm.base import BatchRelease
from worker.store.repositories.batches import BATCH_STEP_PREFIX, settled

STEP_PREFIX = BATCH_STEP_PREFIX


class StepLedger:
    """``BatchLedger`` on the run's steps (one short transaction per read or record; never
    while a model call is in flight)."""

    def __init__(self, ctx: Any, phase: str) -> None:
        self.ctx = ctx
        self.phase = phase

    def recorded(self) -> list[tuple[str, set[str]]]:
        with self.ctx.uow() as uow:
            steps = uow.runs.steps(self.ctx.run_id)
        return [(str(s.input["batch_id"]), set(s.input.get("custom_ids") or ()))
                for s in steps
                if s.parent_id is not None and s.phase == self.phase
                and s.name.startswith(STEP_PREFIX) and "batch_id" in (s.input or {})]

    def submitted(self) -> dict[str, datetime]:
        with self.ctx.uow() as uow:
            steps = uow.runs.steps(self.ctx.run_id)
        return {str(s.input["batch_id"]): s.started_at for s in steps
                if s.parent_id is not None and s.phase == self.phase and s.started_at is not None
                and s.name.startswith(STEP_PREFIX) and "batch_id" in (s.input or {})}

    def record(self, batch_id: str, custom_ids: Sequence[str]) -> None:
        ctx = self.ctx
        with ctx.uow() as uow:
            uow.check_lease(ctx.run_id, ctx.epoch)
            parents = [s for s in uow.runs.steps(ctx.run_id) if s.parent_id is None
                       and s.phase == self.phase and s.status == StepStatus.RUNNING.value]
            if not parents:
                raise RuntimeError(f"no running {self.phase} step of run {ctx.run_id} to "
                                   f"record batch {batch_id} on")
            now = utcnow()
            # Ids only: a custom id is a salted digest of the question, never its text (R21).
            uow.runs.add_step({
                "run_id": ctx.run_id, "parent_id": parents[-1].id, "scope_key": ctx.scope.key,
                "phase": self.phase, "name": f"{STEP_PREFIX}{batch_id}", "seq": 0,
                "status": StepStatus.SUCCEEDED.value,
                "input": {"batch_id": batch_id, "custom_ids": list(custom_ids)},
                "output": {"submitted": len(custom_ids)}, "error": None, "prompt_name": None,
                "template_hash": None, "model": None, "tokens_in": 0, "tokens_out": 0,
                "started_at": now, "finished_at": now, "duration_ms": None,
            })
            uow.commit()

    def read(self, batch_id: str, status: str) -> None:
        """The finished batch was read (``output.read``: its status): its step stays
        ``succeeded``, and it is never released as obsolete."""
        with self.ctx.uow() as uow:
            uow.batches.record_read(self.ctx.run_id, batch_id, status)
            uow.commit()

    def unread(self) -> dict[str, bool]:
        with self.ctx.uow() as uow:
            steps = uow.runs.steps(self.ctx.run_id)
        running = {s.id for s in steps if s.parent_id is None and s.phase == self.phase
                   and s.status == StepStatus.RUNNING.value}
        return {str(s.input["batch_id"]): s.parent_id in running for s in steps
                if s.parent_id is not None and s.phase == self.phase
                and s.name.startswith(STEP_PREFIX) and "batch_id" in (s.input or {})
                and not settled(s.output)}

    def recorded_here(self) -> set[str]:
        with self.ctx.uow() as uow:
            steps = uow.runs.steps(self.ctx.run_id)
        running = {s.id for s in steps if s.parent_id is None and s.phase == self.phase
                   and s.status == StepStatus.RUNNING.value}
        return {str(s.input["batch_id"]) for s in steps
                if s.parent_id in running and s.name.startswith(STEP_PREFIX)
                and "batch_id" in (s.input or {})}

    def released(self, release: BatchRelease) -> None:
        """What releasing the batch did, on its step's output (``release``). Not fenced: it
        records what the provider was told, whoever holds the run now."""
        with self.ctx.uow() as uow:
            # Its phase charges what the release found billed (``batch.release_recorded``).
            uow.batches.record_release(self.ctx.run_id, release.batch_id, release_record(release),
                                       charged=True)
            uow.commit()


def release_record(release: BatchRelease) -> dict[str, object]:
    """A release as a batch step records it (ids, statuses, the problem line: no note text)."""
    return {**release.as_dict(), "at": utcnow().isoformat()}
