"""The provider batches of runs stopped for good (cancelled, failed, given up, their scope
erased): each still at the provider is cancelled if it works (it bills every request it
answers) and its files deleted (they hold note text), recorded on its batch step. After the
stop's own commit, with no transaction open during the provider's calls."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import structlog

from worker.app import App
from worker.llm.base import BatchLLM, BatchRelease
from worker.llm.ledger import release_record

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RunBatchRelease:
    run_id: str
    release: BatchRelease

    def line(self) -> str:
        """What was done, or what failed and what the operator can do: one line of ids."""
        r, bid = self.release, self.release.batch_id
        if r.complete:
            did = "cancelled" if r.cancelled else f"already {r.status}"
            return f"provider batch {bid}: {did}, {len(r.deleted)} file(s) deleted"
        return (f"provider batch {bid} of run {self.run_id} not released: {r.problem}; it may "
                f"still bill and holds note text: `dream runs cancel {self.run_id}` tries "
                "again, or cancel it and delete its files at the provider")


def release_run_batches(app: App, run_ids: Sequence[str], *,
                        shown: bool = True) -> list[RunBatchRelease]:
    """Release every batch of ``run_ids`` still at the provider (``BatchStepRepository.
    unreleased``); what each release did, recorded on its step. Never raises for the
    provider: a stop is never held back by its clean-up (``RunBatchRelease.line`` says what
    is left to do). ``shown``: the caller shows each line to the operator (a command's answer),
    so a release left incomplete is logged at info; else (the gate check) as a warning."""
    if not run_ids:
        return []
    with app.uow() as uow:
        steps = [(s.run_id, str((s.input or {})["batch_id"]))
                 for s in uow.batches.unreleased(list(run_ids))]
    if not steps:
        return []
    done = [RunBatchRelease(run_id, _release(app, batch_id)) for run_id, batch_id in steps]
    with app.uow() as uow:
        for d in done:
            uow.batches.record_release(d.run_id, d.release.batch_id, release_record(d.release))
        uow.commit()
    for d in done:
        r = d.release
        if r.complete:
            log.info("run.batch_released", run_id=d.run_id, batch_id=r.batch_id,
                     status=r.status, cancelled=r.cancelled, files_deleted=len(r.deleted))
        else:
            (log.info if shown else log.warning)(
                "run.batch_release_incomplete", run_id=d.run_id, batch_id=r.batch_id,
                status=r.status, cancelled=r.cancelled, problem=r.problem)
    return done


def _release(app: App, batch_id: str) -> BatchRelease:
    llm = app.llm
    if llm is None or not getattr(llm, "supports_batch", False):
        return BatchRelease(batch_id, problem="this process has no batch model client (run it "
                                              "with DREAM_LLM_PROVIDER=openai and the run's "
                                              "DREAM_LLM_* settings)")
    return cast(BatchLLM, llm).release_batch(batch_id)
