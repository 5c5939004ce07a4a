"""The provider batches of runs stopped for good (cancelled, failed, given up, their scope
erased): each still at the provider is cancelled if it works (it bills every request it
answers) and its files deleted (they hold note text), recorded on its batch step. After the
stop's own commit, with no transaction open during the provider's calls."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import structlog

from worker.app import App
from worker.llm.base import BatchLLM, BatchRelease
from worker.llm.ledger import release_record
from worker.runs.run_usage import charge_late
from worker.store.repositories.batches import GIVEN_UP_KEY, RELEASE_KEY, SUBMISSION_KEY

log = structlog.get_logger(__name__)

# A gate check's second tries at releases left incomplete: a few provider calls each, so a
# bounded number per check (oldest first); after a day of them the batch is given up, recorded
# on its release (`dream runs cancel` still tries it). A cancel takes minutes, a provider's
# outage hours: a day covers both without a beat calling a dead endpoint for ever.
RETRIES_PER_CHECK = 20
RETRY_FOR = timedelta(days=1)
# Batches submitted longer ago are left to `dream runs cancel` (the check reads recent ones).
RETRY_HORIZON = timedelta(days=7)


@dataclass(frozen=True)
class RunBatchRelease:
    run_id: str
    release: BatchRelease
    # A submission whose batch a look could not find or rule out (``release.problem`` says
    # why): the provider may run a batch made with this key.
    submission: str | None = None

    def line(self) -> str:
        """What was done, or what failed and what the operator can do: one line of ids."""
        r, bid = self.release, self.release.batch_id
        if self.submission is not None:
            return (f"batch submission {self.submission} of run {self.run_id} not settled: "
                    f"{r.problem}; a batch made with it may bill and hold note text: `dream "
                    f"runs cancel {self.run_id}` looks again, or cancel the batch with metadata "
                    f"submission={self.submission} at the provider and delete its files")
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
    unsettled = look_up_open_submissions(app, run_ids, shown=shown)
    with app.uow() as uow:
        steps = [(s.run_id, str((s.input or {})["batch_id"]))
                 for s in uow.batches.unreleased(list(run_ids))]
    if not steps:
        return unsettled
    done = [RunBatchRelease(run_id, _release(app, batch_id)) for run_id, batch_id in steps]
    _record(app, done)
    for d in done:
        r = d.release
        if r.complete:
            log.info("run.batch_released", run_id=d.run_id, batch_id=r.batch_id,
                     status=r.status, cancelled=r.cancelled, files_deleted=len(r.deleted))
        else:
            (log.info if shown else log.warning)(
                "run.batch_release_incomplete", run_id=d.run_id, batch_id=r.batch_id,
                status=r.status, cancelled=r.cancelled, problem=r.problem)
    return unsettled + done


def _record(app: App, done: list[RunBatchRelease],
            more: Sequence[tuple[str, str, dict[str, Any]]] = ()) -> None:
    """What each release did (and ``more``: records given as they are), on the batch steps, in
    one transaction after the provider's calls; what the provider billed for a batch that its
    phase never charged is charged to the run that sent it (``run_usage.charge_late``: a
    finished run's totals read again)."""
    with app.uow() as uow:
        for d in done:
            uow.batches.record_release(d.run_id, d.release.batch_id, release_record(d.release))
        for run_id, batch_id, record in more:
            uow.batches.record_release(run_id, batch_id, record)
        charge_late(uow, [d.run_id for d in done] + [run_id for run_id, _, _ in more])
        uow.commit()


def look_up_open_submissions(app: App, run_ids: Sequence[str], *,
                             shown: bool = True) -> list[RunBatchRelease]:
    """The submissions of ``run_ids`` whose batch is unknown (its create's answer was lost and
    the look failed, or the process died before recording it), looked up by their key before
    the runs' batches are released: a batch found becomes its step's and is released with the
    others (it would bill, and holds note text); without one, the files uploaded under its
    name are deleted and the submission closed. A look that settles nothing leaves it open:
    each such submission, for its line (before, only logged: `dream runs cancel` said
    nothing of it). ``shown`` as ``release_run_batches``'."""
    if not getattr(app.llm, "supports_batch", False):
        return []
    with app.uow() as uow:
        steps = _keys(uow.batches.open_submissions(list(run_ids)))
    _, unsettled = _look_up(app, steps, shown=shown)
    return unsettled


def look_up_ended_submissions(app: App, now: datetime, limit: int = RETRIES_PER_CHECK) -> int:
    """The gate check's look for the open submissions of runs that ended (at most ``limit``,
    written within ``RETRY_HORIZON``): a run whose look failed went on without those questions
    and ended, and no attempt of it looks again, while a batch made with the key may be running
    (and billing) at the provider for answers nobody will read. A batch found is released at
    once (cancelled, its files deleted, what it billed charged to its run late); without one
    the submission is closed. How many were found."""
    if not getattr(app.llm, "supports_batch", False):
        return 0
    with app.uow() as uow:
        steps = _keys(uow.batches.ended_open_submissions(limit, now - RETRY_HORIZON))
    adopted, _ = _look_up(app, steps, shown=False)
    done = [RunBatchRelease(run_id, _release(app, batch_id)) for run_id, batch_id in adopted]
    if done:
        _record(app, done)
        log.warning("gate.batch_submissions_found", found=len(done),
                    released=sum(d.release.complete for d in done))
    return len(done)


def _keys(rows: Sequence[Any]) -> list[tuple[str, str, str, list[str]]]:
    """(step id, run id, submission key, custom ids) of each open submission step."""
    return [(s.id, s.run_id, str((s.input or {})[SUBMISSION_KEY]),
             list((s.input or {}).get("custom_ids") or ())) for s in rows]


def _look_up(app: App, steps: list[tuple[str, str, str, list[str]]], *,
             shown: bool) -> tuple[list[tuple[str, str]], list[RunBatchRelease]]:
    """Each open submission of ``steps`` (``_keys``) looked up by its key, with no transaction
    open during the provider's calls: a batch found becomes its step's, none closes it, a look
    that settles nothing leaves it open (logged, as a warning unless ``shown``). The (run id,
    batch id) of those found, and a line's record for each left open."""
    if not steps:
        return [], []
    found = [(step_id, run_id, ids, cast(BatchLLM, app.llm).find_submission(key))
             for step_id, run_id, key, ids in steps]
    adopted, unsettled = [], []
    with app.uow() as uow:
        for step_id, run_id, ids, f in found:
            if f.batch_id is not None:
                uow.batches.adopt(step_id, f.batch_id, ids)
                adopted.append((run_id, f.batch_id))
            elif f.problem is None:
                uow.batches.close_submission(step_id, {
                    "why": "no batch with its key among the provider's most recent; "
                           f"{len(f.deleted)} file(s) of its name deleted",
                    "at": datetime.now(UTC).isoformat()})
            else:
                unsettled.append(RunBatchRelease(run_id, BatchRelease("", problem=f.problem),
                                                 submission=f.submission))
            (log.info if f.problem is None or shown else log.warning)(
                "run.batch_submission_looked_up", run_id=run_id, submission=f.submission,
                batch_id=f.batch_id, files_deleted=len(f.deleted), problem=f.problem)
        uow.commit()
    return adopted, unsettled


def _release(app: App, batch_id: str) -> BatchRelease:
    llm = app.llm
    if llm is None or not getattr(llm, "supports_batch", False):
        return BatchRelease(batch_id, problem="this process has no batch model client (run it "
                                              "with DREAM_LLM_PROVIDER=openai and the run's "
                                              "DREAM_LLM_* settings)")
    return cast(BatchLLM, llm).release_batch(batch_id)


@dataclass(frozen=True)
class ReleaseRetries:
    """What a gate check's second tries did: batches tried, now released, still incomplete,
    and given up (their first release a day old)."""

    tried: int = 0
    released: int = 0
    incomplete: int = 0
    given_up: int = 0


def retry_incomplete_releases(app: App, now: datetime,
                              limit: int = RETRIES_PER_CHECK) -> ReleaseRetries:
    """Release again the batches whose recorded release left something at the provider (an
    error, a file it kept, a cancel still in progress whose output file appears only later):
    at most ``limit``, oldest first; one first released ``RETRY_FOR`` before ``now`` is given
    up instead, recorded. A process without a batch model client leaves them all alone (its
    own problem line would replace the provider's). No transaction open during the calls."""
    if not getattr(app.llm, "supports_batch", False):
        return ReleaseRetries()
    with app.uow() as uow:
        steps = [(s.run_id, str((s.input or {})["batch_id"]), dict((s.output or {})[RELEASE_KEY]))
                 for s in uow.batches.incomplete_releases(limit, now - RETRY_HORIZON)]
    if not steps:
        return ReleaseRetries()
    old = [s for s in steps if _first_release(s[2], now) <= now - RETRY_FOR]
    given_up = {batch_id for _, batch_id, _ in old}
    done = [RunBatchRelease(run_id, _release(app, batch_id))
            for run_id, batch_id, _ in steps if batch_id not in given_up]
    _record(app, done, [(run_id, batch_id, {**record, GIVEN_UP_KEY: now.isoformat()})
                        for run_id, batch_id, record in old])
    released = sum(d.release.complete for d in done)
    out = ReleaseRetries(len(done), released, len(done) - released, len(old))
    # Counts only: which batch is left, and why, is on its step (`dream runs show`).
    (log.warning if out.incomplete or out.given_up else log.info)(
        "gate.batch_releases_retried", **asdict(out))
    return out


def _first_release(record: dict[str, Any], now: datetime) -> datetime:
    """When the batch was first released (``now`` when the record does not say), in
    ``now``'s kind (a ``--clock`` may be naive UTC)."""
    try:
        first = datetime.fromisoformat(str(record.get("first_at") or record["at"]))
    except (KeyError, ValueError):
        return now
    return first.astimezone(UTC).replace(tzinfo=now.tzinfo and UTC)
