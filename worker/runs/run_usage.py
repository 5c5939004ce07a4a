"""A run's model usage charged again after it ended: ``charge_late``, when a release finds more
billed for its batches than its phases charged, so the run that sent a batch is charged what
its provider billed for it. How the usage is read from the steps: ``domain.run_usage``
(``finalize`` writes it as the run ends, a stop as it stops the run)."""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from worker.domain.run_usage import with_usage
from worker.store.uow import UnitOfWork

log = structlog.get_logger(__name__)


def charge_late(uow: UnitOfWork, run_ids: Iterable[str]) -> None:
    """Each finished run of ``run_ids`` with its usage totals read again from its steps (in
    ``uow``'s transaction, not committed): the tokens its batches' releases found billed
    since it ended are charged to it, each once (a step's ``billed_late`` is what its batch
    billed beyond what its phase charged, not a sum of what each release read). A run not
    finished yet takes them in its own totals when it ends."""
    for run_id in sorted(set(run_ids)):
        run = uow.runs.get(run_id)
        if run is None or run.finished_at is None:
            continue
        before = dict(run.totals or {})
        totals = with_usage(before, uow.runs.steps(run_id))
        if totals != before:
            uow.batches.set_run_totals(run_id, totals)
            log.info("run.usage_updated", run_id=run_id, tokens_in=totals["tokens_in"],
                     tokens_out=totals["tokens_out"],
                     billed_late=totals.get("tokens_billed_late"))
