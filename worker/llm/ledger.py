"""The batches a phase of a run submitted, recorded as child steps of its parent step: a retried
or re-scheduled phase finds them and never submits the same questions twice."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from worker.clock import utcnow
from worker.domain.types import StepStatus
from worker.llm.base import BatchRelease
from worker.store.repositories.batches import (
    BATCH_STEP_PREFIX,
    SUBMISSION_KEY,
    open_submission,
    settled,
)

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

    def intend(self, submission: str, custom_ids: Sequence[str]) -> None:
        """Write ahead, before the provider is asked: the step of the batch about to be created
        with ``submission`` (its key; ``input.submission``, no batch id yet). A create whose
        answer is lost, or a process that dies before ``record``, leaves it open: the next look
        finds the batch by its key (``batch_submit.adopt_open``). Fenced like ``record``: a
        worker that lost the run submits nothing."""
        ctx = self.ctx
        with ctx.uow() as uow:
            uow.check_lease(ctx.run_id, ctx.epoch)
            parents = [s for s in uow.runs.steps(ctx.run_id) if s.parent_id is None
                       and s.phase == self.phase and s.status == StepStatus.RUNNING.value]
            if not parents:
                raise RuntimeError(f"no running {self.phase} step of run {ctx.run_id} to "
                                   f"record batch submission {submission} on")
            now = utcnow()
            # Ids only: a custom id is a salted digest of the question, never its text (R21).
            uow.runs.add_step({
                "run_id": ctx.run_id, "parent_id": parents[-1].id, "scope_key": ctx.scope.key,
                "phase": self.phase, "name": f"{STEP_PREFIX}{submission}", "seq": 0,
                "status": StepStatus.SUCCEEDED.value,
                "input": {SUBMISSION_KEY: submission, "custom_ids": list(custom_ids)},
                "output": {"submitting": len(custom_ids)}, "error": None, "prompt_name": None,
                "template_hash": None, "model": None, "tokens_in": 0, "tokens_out": 0,
                "started_at": now, "finished_at": now, "duration_ms": None,
            })
            uow.commit()

    def record(self, batch_id: str, custom_ids: Sequence[str], submission: str) -> None:
        """The batch made with ``submission`` (created, or found by its key): its written-ahead
        step becomes the batch's, under the parent that wrote it (the attempt that asked)."""
        ctx = self.ctx
        with ctx.uow() as uow:
            uow.check_lease(ctx.run_id, ctx.epoch)
            step = self._submission(uow, submission)
            if step is None:
                raise RuntimeError(f"no step of run {ctx.run_id} wrote batch submission "
                                   f"{submission} ahead")
            uow.batches.adopt(step.id, batch_id, list(custom_ids))
            uow.commit()

    def open_submissions(self) -> list[tuple[str, set[str]]]:
        """(submission key, custom ids) of this phase's submissions whose batch is unknown."""
        with self.ctx.uow() as uow:
            steps = uow.runs.steps(self.ctx.run_id)
        return [(str(s.input[SUBMISSION_KEY]), set(s.input.get("custom_ids") or ()))
                for s in steps if s.parent_id is not None and s.phase == self.phase
                and s.name.startswith(STEP_PREFIX) and open_submission(s.input, s.output)]

    def unsubmitted(self, submission: str, why: str) -> None:
        """No batch was made with ``submission`` (refused, or none found by a look): ``why``
        (one line, no note text) on its step, which ends ``skipped``; its questions are free
        to be asked again."""
        with self.ctx.uow() as uow:
            step = self._submission(uow, submission)
            if step is not None:
                uow.batches.close_submission(step.id, {"why": why[:300],
                                                       "at": utcnow().isoformat()})
                uow.commit()

    def _submission(self, uow: Any, submission: str) -> Any:
        return next((s for s in uow.runs.steps(self.ctx.run_id)
                     if s.name == f"{STEP_PREFIX}{submission}"), None)

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
