"""How a phase ended and what the whole run ends as (R27): a dream that could not do its work is
never plain ``succeeded``. Pure; the engine and ``finalize`` gather the facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from worker.domain.types import RunStatus, StepStatus
from worker.llm.base import CONTEXT_EXCEEDED
from worker.text.plural import counted

# What an in-process executor reports instead of a run status when it lost the run to another
# executor before the run ended (``engine.execute_run``): the run's status is that one's.
TAKEN_OVER = "taken_over"


class PhaseOutcome(StrEnum):
    """How one execution of one phase ended, for this executor.

    Recorded on the phase's parent step: SUCCEEDED, NO_ITEMS, SKIPPED, FAILED (the step status
    of the same name) and DEFERRED (status ``succeeded``; the phase or one of its child steps left
    work for later, e.g. for lack of model budget; read back by ``finalize``).

    WAITING: the phase handed work to a provider batch and has nothing to write yet. Its parent
    step stays ``running`` with ``output.waiting`` set, and the next execution of the phase under
    the same lease epoch resumes that step instead of starting a new one. A Celery task
    re-schedules itself (``self.retry(countdown=...)``) without holding a worker; an in-process
    run polls (``engine.execute_run``). A phase says so by returning
    ``PhaseReport(status=PhaseOutcome.WAITING, counters={"retry_after": seconds}, reason=...)``.

    The rest say why this executor did not run the phase; each stops an in-process run here
    (another executor holds the run and finalizes it, or it was cancelled).
    """

    SUCCEEDED = "succeeded"
    NO_ITEMS = "no_items"
    DEFERRED = "deferred"
    SKIPPED = "skipped"
    FAILED = "failed"
    WAITING = "waiting"
    ALREADY_DONE = "already_done"  # a terminal parent step exists (a re-delivered task, R4)
    EARLIER_PENDING = "earlier_pending"  # an earlier phase is running elsewhere, or was lost
    BUSY = "busy"  # another executor started this phase under the same lease epoch
    NOT_CLAIMED = "not_claimed"  # someone else claimed the run first
    NOT_RUNNING = "not_running"  # the run is finished or cancelled
    LEASE_LOST = "lease_lost"  # the gate check recovered the run, or it was cancelled

    @property
    def stops_run(self) -> bool:
        return self in _STOPS

    @property
    def step_status(self) -> str:
        """The parent step status this outcome is recorded as."""
        if self is PhaseOutcome.DEFERRED:
            return StepStatus.SUCCEEDED.value
        if self is PhaseOutcome.WAITING:
            return StepStatus.RUNNING.value
        return StepStatus(self.value).value

    @classmethod
    def of_report(cls, status: str, left_work: bool) -> PhaseOutcome:
        """A phase's reported status, DEFERRED when it (or a child step) left work for later."""
        outcome = cls(status)
        if left_work and outcome in (cls.SUCCEEDED, cls.NO_ITEMS):
            return cls.DEFERRED
        return outcome


_STOPS = frozenset({PhaseOutcome.EARLIER_PENDING, PhaseOutcome.BUSY, PhaseOutcome.NOT_CLAIMED,
                    PhaseOutcome.NOT_RUNNING, PhaseOutcome.LEASE_LOST})
# Outcomes a parent step records for good: the phase is done for this run.
RECORDED = frozenset({PhaseOutcome.SUCCEEDED, PhaseOutcome.NO_ITEMS, PhaseOutcome.DEFERRED,
                      PhaseOutcome.SKIPPED, PhaseOutcome.FAILED})


@dataclass(frozen=True)
class RunFacts:
    """What finalize read from the run's steps and its scope's earlier runs."""

    phases: dict[str, PhaseOutcome]
    guard_reasons: list[str] = field(default_factory=list)
    # The run's own model limit, when reached ("12 of 12 model calls"); it blocks the run only
    # when some phase left work for it (DEFERRED).
    limit_reached: str | None = None
    # What the run spent past a model limit ("823 of 50 tokens"): the cap did not hold, so the
    # run is blocked for it whether or not work was left.
    over_budget: str | None = None
    # Phases whose own model limit deferred work (their parent step says "budget exhausted").
    phase_limits: list[str] = field(default_factory=list)
    # Phases whose model wall-time budget ran out with work left (DREAM_LLM_PHASE_SECONDS).
    phase_out_of_time: list[str] = field(default_factory=list)
    # Phases that got replies and not one usable (each reply no JSON of the asked schema, or
    # rejected by the question's checks), and of those whose checks rejected some, how many
    # (rejected, replies).
    phases_unusable: list[str] = field(default_factory=list)
    phases_rejected: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Of those, the phases some of whose replies were the model's refusal: (refused, replies).
    phases_refused: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Phases that got no usable reply and left questions unasked, the model having refused
    # them (or answered unusably) on a recent run: how many (DREAM_LLM_UNANSWERED_HOURS).
    phases_cooling: dict[str, int] = field(default_factory=dict)
    open_candidates: int = 0
    # open_candidates of the scope's earlier finished runs, oldest first (dry runs left out).
    open_history: list[int] = field(default_factory=list)
    growth_runs: int = 3
    dry_run: bool = False
    # Model calls the run started and how many of them got no reply (the endpoint was down,
    # timed out, or answered something that is no chat completion), and the first such error.
    model_calls: int = 0
    model_calls_failed: int = 0
    model_failure: str | None = None
    # The first provider batch that outlived DREAM_LLM_BATCH_WAIT in-process, as its items say
    # ("provider batch not finished within DREAM_LLM_BATCH_WAIT (0.5s)"): calls failed for it
    # were not answered in time, the endpoint may be fine.
    batch_wait: str | None = None
    # The first provider batch that ended without answering (expired, failed, cancelled,
    # given up, garbled output), as its items say, and what to do: (cause, remedy). The
    # endpoint answered: its calls failed at the provider.
    batch_end: tuple[str, str] | None = None
    # Replies that were no JSON of the asked schema (not JSON at all, or another shape).
    model_replies_malformed: int = 0
    # Changes the run's phases planned that their write found stale (a note changed since the
    # plan read it), and the changes the run applied, every attempt's (its operation-log rows;
    # None: not counted, as when nothing went stale).
    items_stale: int = 0
    changes_applied: int | None = None
    # A review approval's run (trigger ``review``) reaching finalize: only the approval itself
    # ends one it is still applying, so its approval stopped (killed, or its lease lapsed); the
    # item it was applying (``review_item`` of its totals).
    approval: bool = False
    review_item: object = None


@dataclass(frozen=True)
class RunOutcome:
    status: str
    reason: str | None  # one line: ids, counts, phase names; never note text
    # guard | budget | over_budget | model_unavailable | model_unusable | open_growing |
    # model_partial | model_refused | model_cooling | phase_failed
    flags: list[str]


def open_growing(facts: RunFacts) -> list[int] | None:
    """The last ``growth_runs`` counts if they rose at every run, else None. A store nobody
    judges (no model, no host fusing) shows up here: the same open items come back, plus more."""
    if facts.dry_run:
        return None
    series = [*facts.open_history[-(facts.growth_runs - 1):], facts.open_candidates]
    if len(series) < facts.growth_runs:
        return None
    rising = all(a < b for a, b in zip(series, series[1:], strict=False))
    return series if rising else None


def model_unavailable(facts: RunFacts) -> bool:
    """Every model call of the run failed, and it made at least one: nothing the model was to
    judge was judged. A run that asked nothing is not blocked for it."""
    return facts.model_calls > 0 and facts.model_calls_failed >= facts.model_calls


def model_unusable(facts: RunFacts) -> bool:
    """The endpoint answered, but not one of its replies was JSON of the asked schema (prose,
    broken JSON, another shape), after the re-asks: nothing the model was to judge was judged.
    Some malformed replies among usable ones are only re-asked (R12)."""
    replies = facts.model_calls - facts.model_calls_failed
    return replies > 0 and facts.model_replies_malformed >= replies


def model_partly_unavailable(facts: RunFacts) -> bool:
    """Some model calls failed and some got a reply: the run did part of its work."""
    return 0 < facts.model_calls_failed < facts.model_calls


def budget_exhausted(facts: RunFacts) -> str | None:
    """What ran out, when work was left for lack of model budget, else None."""
    if facts.limit_reached and PhaseOutcome.DEFERRED in facts.phases.values():
        return facts.limit_reached
    if facts.phase_limits:
        return f"the {facts.phase_limits[0]} phase's limit, work deferred"
    if facts.phase_out_of_time:
        return (f"the {facts.phase_out_of_time[0]} phase's model time, "
                "DREAM_LLM_PHASE_SECONDS, work deferred")
    return None


def all_stale(facts: RunFacts) -> bool:
    """The run planned changes and applied none: every one went stale (the host changed those
    notes meanwhile). A dry run applies nothing by design."""
    return (not facts.dry_run and not facts.approval and facts.items_stale > 0
            and facts.changes_applied == 0)


def _said_only(facts: RunFacts) -> tuple[list[str], list[str]]:
    """What the run's reason says without changing its status. Every change going stale is
    R10 doing its job, not a dream that could not work: the host's edit may have taken the
    work away (a renewed note is no longer due), and the next run plans afresh. No status
    says "applied nothing" without claiming more (blocked: attention needed; cancelled:
    someone stopped it), so a succeeded run says it in its reason and ``all_stale``."""
    if not all_stale(facts):
        return [], []
    return ["all_stale"], [f"applied nothing: all {facts.items_stale} changes it planned went "
                           "stale (their notes changed while it ran); the next run plans "
                           "afresh from the notes as they are"]


def _blocking_reasons(facts: RunFacts) -> tuple[list[str], list[str]]:
    flags: list[str] = []
    reasons: list[str] = []
    if facts.guard_reasons:
        flags.append("guard")
        more = len(facts.guard_reasons) - 1
        reasons.append(facts.guard_reasons[0] + (f" (and {counted(more, 'more trip')})" if more else ""))
    spent = budget_exhausted(facts)
    if spent:
        flags.append("budget")
        reasons.append(f"model budget exhausted ({spent}): the rest waits for the next run or "
                       "a larger budget")
    if facts.over_budget:
        flags.append("over_budget")
        reasons.append(f"model budget overrun (spent {facts.over_budget}): a reply outgrew what "
                       "its call reserved; set DREAM_LLM_MAX_OUTPUT_TOKENS so each call "
                       "reserves its prompt plus that cap, or raise the limit")
    if model_unavailable(facts):
        flags.append("model_unavailable")
        reasons.append(f"model unavailable: {facts.model_calls_failed} of {facts.model_calls} "
                       f"model calls failed{_cause(facts)}; {_remedy(facts)}"
                       f"{_then(facts, 'the deferred work waits for the next run')}")
    if model_unusable(facts):
        flags.append("model_unusable")
        replies = facts.model_calls - facts.model_calls_failed
        reasons.append(f"model answers unusable: {facts.model_replies_malformed} of {replies} "
                       "replies were not JSON of the asked schema; check that DREAM_LLM_MODEL "
                       "answers in JSON (response_format), what it was to judge is left as it was")
    series = open_growing(facts)
    if series is not None:
        flags.append("open_growing")
        reasons.append(f"open candidates grew {len(series)} runs in a row "
                       f"({' → '.join(map(str, series))}): nothing judges them; configure a model "
                       "(DREAM_LLM_PROVIDER) or fuse them with `dream candidates` / `dream fuse`")
    return flags, reasons


def waited_only(facts: RunFacts) -> bool:
    """The failed calls are those of a provider batch that outlived DREAM_LLM_BATCH_WAIT
    in-process, and no endpoint error was recorded: the endpoint worked, the wait was short."""
    return facts.batch_wait is not None and facts.model_failure is None


def _cause(facts: RunFacts) -> str:
    """Why the run's model calls failed, in brackets after "N of M model calls failed"."""
    if waited_only(facts):
        return f" ({facts.batch_wait}: the endpoint answered, not in time)"
    if _ended_only(facts) and facts.batch_end is not None:
        return f" ({facts.batch_end[0]}: the endpoint answered, the batch did not)"
    return f" ({facts.model_failure})" if facts.model_failure else ""


def _ended_only(facts: RunFacts) -> bool:
    """The failed calls are those of provider batches that ended unanswered (expired, failed,
    given up ...), and no endpoint error or in-process wait was recorded: the endpoint worked,
    and the remedy says the next run asks again."""
    return (facts.batch_end is not None and facts.model_failure is None
            and facts.batch_wait is None)


def _then(facts: RunFacts, later: str) -> str:
    """What waits for the next run, unless the remedy said it (a batch that ended)."""
    return "" if _ended_only(facts) else f", {later}"


def _remedy(facts: RunFacts) -> str:
    if facts.model_failure and CONTEXT_EXCEEDED in facts.model_failure:  # no endpoint to fix
        return "use a DREAM_LLM_MODEL with a larger context, or shorter notes"
    if waited_only(facts):
        return ("set a longer DREAM_LLM_BATCH_WAIT or run under Celery, which re-schedules "
                "instead of waiting")
    if _ended_only(facts) and facts.batch_end is not None:
        return facts.batch_end[1]
    return "check DREAM_LLM_BASE_URL and the endpoint"


def _partial_reasons(facts: RunFacts, failed: list[str]) -> tuple[list[str], list[str]]:
    flags: list[str] = []
    reasons: list[str] = []
    if model_partly_unavailable(facts):
        share = round(100 * facts.model_calls_failed / facts.model_calls)
        flags.append("model_partial")
        judge = "what they were to judge waits for the next run"
        said = (facts.batch_end[1] if _ended_only(facts) and facts.batch_end is not None
                else f"{_remedy(facts)}, {judge}" if waited_only(facts) else judge)
        reasons.append(f"model partly unavailable: {facts.model_calls_failed} of "
                       f"{facts.model_calls} model calls failed ({share}%){_cause(facts)}; "
                       f"{said}")
    unusable = [] if model_unusable(facts) else facts.phases_unusable
    if unusable and "model_partial" not in flags:
        flags.append("model_partial")
    refused = [p for p in unusable if p in facts.phases_refused]
    if refused:
        flags.append("model_refused")
    if malformed := [p for p in unusable if p not in facts.phases_rejected and p not in refused]:
        reasons.append(f"model answers unusable in the {', '.join(malformed)} phase: not one "
                       "reply was JSON of the asked schema; what it was to judge is left as it "
                       "was (check that DREAM_LLM_MODEL answers in JSON)")
    reasons += [_rejected_reason(p, *facts.phases_rejected[p]) for p in unusable
                if p in facts.phases_rejected and p not in refused]
    reasons += [_refused_reason(p, facts.phases_refused[p][0],
                                facts.phases_rejected.get(p, (0, 0))[0],
                                facts.phases_refused[p][1]) for p in refused]
    if facts.phases_cooling:
        flags.append("model_cooling")
        reasons += [f"{counted(n, 'question')} of the {p} phase not asked again: the model "
                    "refused or answered unusably on a recent run; what it was to judge is left "
                    "as it was until DREAM_LLM_UNANSWERED_HOURS pass or a note changes"
                    for p, n in facts.phases_cooling.items()]
    if failed:
        flags.append("phase_failed")
        reasons.append(f"phase failed: {', '.join(failed)}")
    return flags, reasons


def _rejected_reason(phase: str, rejected: int, replies: int) -> str:
    """A phase none of whose replies was usable, some of them (or all) well-formed but
    rejected by the question's checks: a model that answers in shape but not to the point."""
    malformed = replies - rejected
    rest = f", {malformed} not JSON of the asked schema" if malformed > 0 else ""
    return (f"model answers unusable in the {phase} phase: its checks rejected {rejected} of "
            f"{replies} replies (notes not in the question, notes left out, or content the "
            f"notes do not state; its steps' errors say which){rest}; what it was to judge is "
            "left as it was (check that DREAM_LLM_MODEL can do the task)")


def _refused_reason(phase: str, refused: int, rejected: int, replies: int) -> str:
    """A phase none of whose replies was usable, some of them (or all) the model's refusal:
    no malformed reply (the model answers JSON), so no advice to change that, but no verdict
    either. Before, refusals were not counted and such a run read `succeeded`, exit 0."""
    malformed = replies - refused - rejected
    rest = "".join([f", {rejected} rejected by its checks" if rejected > 0 else "",
                    f", {malformed} not JSON of the asked schema" if malformed > 0 else ""])
    return (f"model refused in the {phase} phase: {refused} of {replies} replies were refusals "
            f"(a refusal is no verdict; its steps' errors say which){rest}; what it was to "
            "judge is left as it was (check what DREAM_LLM_MODEL declines to do, e.g. its "
            "content policy)")


def _approval_stopped(facts: RunFacts) -> str:
    return (f"the approval of review item {facts.review_item} stopped before it finished (its "
            "process ended or lost its lease); nothing was applied; the item keeps its status "
            "(open unless decided since): approve it again to apply it")


def decide_outcome(facts: RunFacts) -> RunOutcome:
    """cancelled if it is an approval's run whose approval stopped before applying anything (a
    recovered approval applied nothing: never plain succeeded); failed if every phase it ran
    failed; blocked if the guard stopped it, the budget ran out with work left, every model
    call failed, or its open candidates keep growing; partial if some phase failed or some
    model calls failed; else succeeded. Each reason is kept, so a blocked run with a failed
    phase says both; a run whose every planned change went stale says so whatever its status
    (``_said_only``)."""
    if facts.approval and facts.changes_applied == 0:
        return RunOutcome(RunStatus.CANCELLED.value, _approval_stopped(facts),
                          ["approval_stopped"])
    failed = [p for p, o in facts.phases.items() if o is PhaseOutcome.FAILED]
    # A skipped phase did not run (not asked for with --phase, or nothing it may do): it is no
    # "other phase" that worked beside a failed one.
    ran = [p for p, o in facts.phases.items() if o is not PhaseOutcome.SKIPPED]
    if not facts.phases or (failed and len(failed) == len(ran)):
        return RunOutcome(RunStatus.FAILED.value, None, ["phase_failed"] if failed else [])
    flags, reasons = _blocking_reasons(facts)
    blocked = bool(flags)
    more_flags, more_reasons = _partial_reasons(facts, failed)
    flags += more_flags
    reasons += more_reasons
    status = (RunStatus.BLOCKED if blocked else RunStatus.PARTIAL if flags
              else RunStatus.SUCCEEDED)
    said_flags, said = _said_only(facts)
    return RunOutcome(status.value, "; ".join(reasons + said) or None, flags + said_flags)
