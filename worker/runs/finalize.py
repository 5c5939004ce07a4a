"""The run's end: its final status and totals from what its phases recorded, the lease released.

``finalize`` takes the executor's snapshot (in-process: the one the run started with; under
Celery: the one the last phase's task read, or a fresh one), reads the run's steps once unless
the executor wrote them all, and decides with ``decide_outcome``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import structlog

from worker.app import App
from worker.clock import utcnow
from worker.domain.run_usage import batch_calls, step_usages
from worker.domain.types import JUDGING_PHASES, PHASES, REVIEW_TRIGGER, RunStatus
from worker.domain.usage import StepUsage
from worker.llm.ask import BATCH_WAIT_OUT, OUT_OF_TIME_REASON
from worker.llm.batch_ends import end_of
from worker.runs.batches import release_run_batches
from worker.runs.outcome import PhaseOutcome, RunFacts, decide_outcome
from worker.runs.phase_run import left_for_later
from worker.runs.snapshot import TERMINAL_STEP, RunSnapshot, read_snapshot
from worker.safety.crashpoints import crashpoint
from worker.safety.guard import GUARD_STEP
from worker.store.models import RunStepRow
from worker.store.uow import UnitOfWork

log = structlog.get_logger(__name__)


def finalize_run(app: App, run_id: str) -> str:
    """Finalize from a fresh read (after an executor stopped, or a ``dream.finalize`` task an
    earlier version chained)."""
    return finalize(app, read_snapshot(app, run_id))


def finalize(app: App, snap: RunSnapshot, written: list[dict[str, Any]] | None = None) -> str:
    """The run's final status; a run not running (or with a phase still open) is left as is.

    ``written``: every step row of the run, as the in-process executor that wrote them all
    holds them (no read of the steps); None reads them."""
    crashpoint("run.before_finalize")
    if snap.epoch is None:
        return snap.status
    with app.uow() as uow:
        steps = (uow.runs.steps(snap.run_id) if written is None
                 else [_row(r) for r in written])
        parents = [s for s in steps if s.parent_id is None and s.status in TERMINAL_STEP]
        if not {s.phase for s in parents} >= set(PHASES):
            return snap.status  # a phase is running elsewhere, or was lost (the lease recovers it)
        # Each phase step's spending, each call once (``domain.usage``), summed over every
        # attempt (R15): what the limit check and the totals both read.
        spent = sum(step_usages(steps).values(), StepUsage())
        facts = _facts(app, uow, snap, steps, parents, spent)
        outcome = decide_outcome(facts)
        totals = _totals(snap, parents, facts, outcome.flags, spent, batch_calls(steps))
        done = uow.runs.finish_fenced(snap.run_id, snap.epoch, outcome.status, snap.scope,
                                      finished_at=utcnow(), totals=totals,
                                      lease_expires_at=None, status_reason=outcome.reason)
        if not done:  # cancelled, recovered or finalized by a twin meanwhile: it decided
            run = uow.runs.get(snap.run_id)
            return run.status if run is not None else snap.status
        uow.commit()
    log.info("run.finished", run_id=snap.run_id, status=outcome.status, flags=outcome.flags)
    if outcome.status == RunStatus.FAILED.value:  # a phase failed with its batch still out
        release_run_batches(app, [snap.run_id], shown=False)
    return outcome.status


_STEP_FIELDS = ("parent_id", "status", "output", "error", "model", "tokens_in", "tokens_out",
                "duration_ms")


def _row(values: dict[str, Any]) -> Any:
    """A step row as written, read like a ``RunStepRow`` (the columns finalize looks at)."""
    return SimpleNamespace(**{**dict.fromkeys(_STEP_FIELDS), **values})


def _facts(app: App, uow: UnitOfWork, snap: RunSnapshot, steps: list[RunStepRow],
           parents: list[RunStepRow], spent: StepUsage) -> RunFacts:
    """What decide_outcome needs, from the steps (the latest attempt of each phase decides;
    an interrupted attempt's step is history: what it handed over, the latest settled, so its
    words never state the run's cause)."""
    latest = _latest(steps, parents)
    left = {s.phase for s in latest if left_for_later(s.output or {})}
    phases = {s.phase: PhaseOutcome.of_report(s.status, s.phase in left) for s in parents}
    open_now = _open_candidates(latest)
    approval = snap.trigger == REVIEW_TRIGGER
    stale = _stale_items(steps, parents)
    # Counted only where it decides something: a run with nothing stale, or a dry run, applied
    # what it applied (one query saved per run).
    applied = (uow.run_history.changes_applied(snap.run_id)
               if approval or (stale and not snap.dry_run) else None)
    growth = app.settings.open_growth_runs
    # Growth needs `growth` strictly rising counts ending in this one, so at least growth - 1.
    history = (uow.run_history.open_candidates_before(snap.scope, snap.created_at, growth - 1)
               if open_now >= growth - 1 and not snap.dry_run else [])
    return RunFacts(
        phases=phases,
        guard_reasons=[str((s.output or {}).get("reason")) for s in latest
                       if s.parent_id is not None and s.name == GUARD_STEP],
        limit_reached=_limit_reached(app, spent, any(
            "model budget exhausted" in str((s.output or {}).get("reason") or "")
            for s in latest if s.parent_id is not None)),
        over_budget=_over_budget(app, spent, parents),
        phase_limits=[s.phase for s in parents
                      if "budget exhausted" in str((s.output or {}).get("reason") or "")],
        phase_out_of_time=_out_of_time(steps, parents),
        phases_unusable=[s.phase for s in parents if _unusable(s.output or {})],
        phases_rejected={s.phase: _rejected(s.output or {}) for s in parents
                         if _unusable(s.output or {}) and _rejected(s.output or {})[0]},
        phases_refused={s.phase: _refused(s.output or {}) for s in parents
                        if _unusable(s.output or {}) and _refused(s.output or {})[0]},
        phases_cooling={s.phase: n for s in parents if (n := _cooling(s.output or {}))},
        model_calls=sum(int((s.output or {}).get("model_calls_started") or 0) for s in parents),
        model_calls_failed=sum(int((s.output or {}).get("model_calls_failed") or 0)
                               for s in parents),
        model_replies_malformed=sum(int((s.output or {}).get("model_replies_malformed") or 0)
                                    for s in parents),
        model_failure=_model_failure(latest),
        batch_wait=_model_failure(latest, BATCH_WAIT_OUT),
        batch_end=_batch_end(steps, parents),
        open_candidates=open_now, open_history=history,
        growth_runs=growth, dry_run=snap.dry_run, items_stale=stale,
        changes_applied=applied, approval=approval,
        review_item=(snap.totals or {}).get("review_item"),
    )


def _latest(steps: list[RunStepRow], parents: list[RunStepRow]) -> list[RunStepRow]:
    """The phase steps of the latest attempts (``parents``) and their children: what states
    why the run ended as it did. An interrupted attempt's step (and what it recorded under it)
    is left out: the error it met and the work it left were taken up again by the attempt that
    resumed the run (its batch handed over and settled there)."""
    latest = {s.id for s in parents}
    return [s for s in steps if (s.id if s.parent_id is None else s.parent_id) in latest]


def _out_of_time(steps: list[RunStepRow], parents: list[RunStepRow]) -> list[str]:
    """The phases (latest attempts) a child step of which was deferred for the phase's model
    wall time (``OUT_OF_TIME_REASON``), in run order."""
    latest = {s.id: s.phase for s in parents}
    found = {latest[s.parent_id] for s in steps if s.parent_id in latest
             and OUT_OF_TIME_REASON in str((s.output or {}).get("reason") or "")}
    return [p for p in PHASES if p in found]


def _batch_end(steps: list[RunStepRow], parents: list[RunStepRow]) -> tuple[str, str] | None:
    """The first provider batch end a child step of the latest attempts was deferred for
    (``batch_ends``: what happened, what to do)."""
    latest = {s.id for s in parents}
    for step in steps:
        if step.parent_id in latest:
            found = end_of(str((step.output or {}).get("reason") or ""))
            if found:
                return found
    return None


def _rejected(output: dict[str, Any]) -> tuple[int, int]:
    """The phase's replies its validators rejected and the replies it got."""
    replies = int(output.get("model_calls_started") or 0) - int(
        output.get("model_calls_failed") or 0)
    return int(output.get("model_replies_rejected") or 0), replies


def _refused(output: dict[str, Any]) -> tuple[int, int]:
    """The phase's replies that were the model's refusal and the replies it got."""
    return int(output.get("model_replies_refused") or 0), _rejected(output)[1]


def _cooling(output: dict[str, Any]) -> int:
    """The questions the phase did not ask again (the model refused them, or answered them
    unusably, on a recent run), when it got no usable reply either; else 0."""
    cooling = int(output.get("model_questions_cooling") or 0)
    return cooling if _rejected(output)[1] == 0 or _unusable(output) else 0


def _unusable(output: dict[str, Any]) -> bool:
    """The phase got replies and not one was usable: each was no JSON of the asked schema, was
    rejected by the question's checks, or was a refusal (``outcome.model_unusable`` is the
    run-wide JSON case). Before, a rejected reply did not count: a model naming notes not in
    the question judged nothing and the run read `succeeded`; nor did a refusal."""
    rejected, replies = _rejected(output)
    bad = int(output.get("model_replies_malformed") or 0) + rejected + _refused(output)[0]
    return replies > 0 and bad >= replies


def _open_candidates(steps: list[RunStepRow]) -> int:
    """The clusters the latest attempts' steps (``_latest``) left open: an interrupted
    attempt's are judged again by the attempt that resumed the run (counted there)."""
    return sum(1 for s in steps
               if s.parent_id is not None and (s.output or {}).get("verdict") == "open")


# Parent-step counters of the changes a judging phase's write found stale.
_STALE_COUNTERS = ("clusters_skipped_stale", "pairs_skipped_stale")


def _stale_items(steps: list[RunStepRow], parents: list[RunStepRow]) -> int:
    """Changes the run's phases (the latest attempt of each) planned and found stale at the
    write: the judging phases count them on their parent step, prune and archive list them
    on their child steps (``output.stale``)."""
    latest = {s.id for s in parents}
    counted = sum(int((s.output or {}).get(k) or 0) for s in parents for k in _STALE_COUNTERS)
    listed = sum(len(stale) for s in steps if s.parent_id in latest
                 and isinstance(stale := (s.output or {}).get("stale"), list))
    return counted + listed


def _limit_reached(app: App, usage: StepUsage, refused: bool = False) -> str | None:
    """The run's own model limit, when its usage (every attempt, R15) reached it, or when a
    step was refused a call (``refused``) because the call's reservation (its prompt plus
    the reply cap) did not fit the tokens left: before, such a run read `succeeded`."""
    b = app.settings.budget
    calls = [c for c in (b.max_calls_per_run, b.max_calls_per_scope) if c is not None]
    tokens = [t for t in (b.max_tokens_per_run, b.max_tokens_per_scope) if t is not None]
    if calls and usage.calls >= min(calls):
        return f"{usage.calls} of {min(calls)} model calls"
    if tokens and usage.tokens >= min(tokens):
        return f"{usage.tokens} of {min(tokens)} tokens"
    if tokens and refused:
        return (f"{usage.tokens} of {min(tokens)} tokens, the next call's prompt and reply cap "
                "not fitting the rest")
    return None


def _over_budget(app: App, usage: StepUsage, parents: list[RunStepRow]) -> str | None:
    """What the run spent past a model limit, however it came to (a reply longer than its
    reservation, no ``DREAM_LLM_MAX_OUTPUT_TOKENS`` to bound one, a prompt that is more
    tokens than its estimate): before, a run that spent 823 tokens of 50 read `succeeded`."""
    b = app.settings.budget
    calls = [c for c in (b.max_calls_per_run, b.max_calls_per_scope) if c is not None]
    tokens = [t for t in (b.max_tokens_per_run, b.max_tokens_per_scope) if t is not None]
    if calls and usage.calls > min(calls):
        return f"{usage.calls} of {min(calls)} model calls"
    if tokens and usage.tokens > min(tokens):
        return f"{usage.tokens} of {min(tokens)} tokens"
    cap = app.settings.contradictions.max_tokens_per_run
    spent = sum((s.tokens_in or 0) + (s.tokens_out or 0) for s in parents
                if s.phase == "contradictions")
    if cap is not None and spent > cap:
        return f"{spent} of {cap} tokens in the contradictions phase"
    return None


def _model_failure(steps: list[RunStepRow], what: str = "model endpoint ") -> str | None:
    """The first endpoint failure a step recorded, as the client worded it ("model endpoint
    failed after 2 attempts (APIConnectionError)"): the client's own words, never note text.
    With ``what`` ``BATCH_WAIT_OUT``: the first batch out of its in-process wait ("provider
    batch not finished within DREAM_LLM_BATCH_WAIT (0.5s)")."""
    for step in steps:
        for said in (str((step.output or {}).get("reason") or ""), step.error or ""):
            at = said.find(what)
            if at >= 0:
                found = said[at:].split(";")[0][:160]
                return found if what != BATCH_WAIT_OUT else f"provider batch {found}"
    return None


def _totals(snap: RunSnapshot, parents: list[RunStepRow], facts: RunFacts, flags: list[str],
            spent: StepUsage, batches: dict[str, Any]) -> dict[str, Any]:
    totals: dict[str, Any] = {
        "notes_after": None,  # the scope's counts, taken by the final update (``finish_fenced``)
        # Every attempt's spending, a killed one's and a failed phase's included (R15).
        "tokens_in": spent.tokens_in,
        "tokens_out": spent.tokens_out,
        "model_calls": spent.calls,
        "model_tokens": spent.tokens,
        "phase_ms": {s.phase: round(s.duration_ms or 0.0, 1) for s in parents},
        "phases": {s.phase: s.status for s in parents},
        # Wall time of the run (first claim → finalize), including time between phases.
        "duration_ms": round((utcnow() - snap.started_at).total_seconds() * 1000, 1)
        if snap.started_at else None,
        # What the gauges and the growth check read (R27); none from a run that judged
        # nothing (``--phases prune``): it says nothing about the candidates left open.
        "open_candidates": facts.open_candidates
        if JUDGING_PHASES & set(snap.requested) else None,
        "flags": flags,
    }
    if snap.notes_before is not None:
        totals["notes_before"] = snap.notes_before
    # What became of the batch calls an interrupted attempt left waiting, and the tokens billed
    # for its batches after their phases (``domain.run_usage.batch_calls``; in the tokens above).
    totals.update(batches)
    return {**(snap.totals or {}), **totals}
