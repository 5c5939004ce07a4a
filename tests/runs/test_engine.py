"""The run engine with a registry of its caller's: a killed attempt's model usage survives into
the retry (R15), a partial model outage ends the run partial (R27), a phase waiting on a provider
batch is resumed on its own step, and the statements one run costs the engine (SQLite and
PostgreSQL)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tests.conftest import app_on
from tests.support.factories import DARK_MODE_NOTES, add_notes
from tests.support.llm_stub import LLMStub, StubResponse
from tests.support.sql import recorded_statements
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.domain.types import PHASES, PhaseReport, RunStatus, Scope, StepStatus
from worker.runs import engine, service
from worker.runs.context import PhaseContext, Registry
from worker.runs.outcome import PhaseOutcome
from worker.runs.steps import ChildStep

SCOPE = Scope("agent-1")


class Killed(BaseException):
    """What a SIGKILL looks like from inside: nothing after it runs, no handler catches it."""


def _nothing(name: str) -> Any:
    return lambda ctx, step_id: PhaseReport(phase=name, status=StepStatus.NO_ITEMS.value)


QUIET: Registry = {p: _nothing(p) for p in PHASES}


def _spend(ctx: PhaseContext, calls: int, tokens_each: int, out_each: int = 0) -> None:
    """What ``ask`` does around each model call: reserve, then charge the reply's tokens
    (``out_each`` of them out)."""
    for _ in range(calls):
        assert ctx.budget.try_reserve_call()
        ctx.budget.charge(tokens_each - out_each, out_each)


def _expire_and_retry(app: App, run_id: str, registry: Registry) -> str:
    later = utcnow() + timedelta(seconds=app.settings.lease_seconds + 1)
    assert service.gate_check(app, now=later).retried == [run_id]
    return engine.execute_run(app, run_id, registry)


def _totals(app: App, run_id: str) -> dict[str, Any]:
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        return dict(run.totals or {})


def test_a_killed_attempts_committed_usage_counts_in_the_retry(app: App) -> None:
    """R15: an attempt killed mid-phase after three answered model calls (committed with their
    child steps) leaves a retry whose budget starts at 3 calls / 300 tokens, and the run's
    totals count them; the limit of 4 leaves the retry one call."""
    add_notes(app, {"content": "a note"})
    app.settings.budget.max_calls_per_run = 4

    def killed(ctx: PhaseContext, step_id: str) -> PhaseReport:
        _spend(ctx, 3, 100)
        with ctx.uow() as uow:
            for k in range(3):
                ctx.steps.child(uow, step_id, "consolidate", ChildStep(
                    name=f"cluster {k + 1}", status="succeeded", model="m", tokens_in=90,
                    tokens_out=10))
            uow.commit()
        raise Killed

    seen: list[tuple[int, int, bool, bool]] = []

    def retried(ctx: PhaseContext, step_id: str) -> PhaseReport:
        calls, tokens = ctx.budget.spent_by_direction()[:2]
        fourth = ctx.budget.try_reserve_call()
        ctx.budget.charge(0)  # answered
        seen.append((calls, tokens, fourth, ctx.budget.try_reserve_call()))
        return PhaseReport(phase="consolidate", status=StepStatus.NO_ITEMS.value)

    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    with pytest.raises(Killed):
        engine.execute_run(app, run_id, {**QUIET, "consolidate": killed})
    status = _expire_and_retry(app, run_id, {**QUIET, "consolidate": retried})
    assert seen == [(3, 300, True, False)]
    totals = _totals(app, run_id)
    assert (totals["model_calls"], totals["model_tokens"]) == (4, 300)
    assert status == RunStatus.SUCCEEDED.value


@pytest.fixture(params=["sqlite", "postgres"])
def short_lease_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    """An App whose lease is the shortest allowed (10 s): the heartbeat beats every 3.3 s."""
    with app_on(request.param, tmp_path, lease_seconds=10) as a:
        yield a


def test_usage_spent_but_not_yet_written_survives_through_the_heartbeat(
    short_lease_app: App,
) -> None:
    """R15: model calls answered but not yet written (the phase was still judging) are
    recorded by the lease heartbeat; the attempt killed after a beat leaves them to the retry,
    and the run's totals and /metrics split them in and out as they were charged (before: the
    beat recorded the sum only, and the tokens in and out added up to none of the 500)."""
    app = short_lease_app
    add_notes(app, {"content": "a note"})

    def judging_then_killed(ctx: PhaseContext, step_id: str) -> PhaseReport:
        _spend(ctx, 2, 250, out_each=50)
        time.sleep(app.settings.lease_seconds / 3 + 1.5)  # one beat at least
        raise Killed

    seen: list[tuple[int, int]] = []

    def retried(ctx: PhaseContext, step_id: str) -> PhaseReport:
        seen.append(ctx.budget.spent_by_direction()[:2])
        return PhaseReport(phase="consolidate", status=StepStatus.NO_ITEMS.value)

    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    with pytest.raises(Killed):
        engine.execute_run(app, run_id, {**QUIET, "consolidate": judging_then_killed})
    assert _expire_and_retry(app, run_id, {**QUIET, "consolidate": retried}) == "succeeded"
    assert seen == [(2, 500)]
    totals = _totals(app, run_id)
    assert (totals["model_tokens"], totals["tokens_in"], totals["tokens_out"]) == (500, 400, 100)
    with app.uow() as uow:  # /metrics and the dashboard, read in SQL from the same steps
        metrics = uow.run_history.step_usage(SCOPE)["consolidate"]
    assert (metrics["tokens_in"], metrics["tokens_out"]) == (400, 100)


def test_a_beat_records_its_phase_s_usage_so_earlier_phases_count_once(
    short_lease_app: App,
) -> None:
    """R15: a beat during the second phase records that phase's own usage, not the run's
    running total: the retry's budget counts the first phase's 2 calls / 200 tokens once, so
    with a limit of 4 calls it still has one (before: the beat wrote 3 calls / 250 tokens on
    the second phase's step, the first phase's spending was counted again, 5 of 4 calls)."""
    app = short_lease_app
    add_notes(app, {"content": "a note"})
    app.settings.budget.max_calls_per_run = 4

    def asking(ctx: PhaseContext, step_id: str) -> PhaseReport:
        _spend(ctx, 2, 100)
        return PhaseReport(phase="consolidate", status=StepStatus.SUCCEEDED.value,
                           tokens_in=180, tokens_out=20)

    def judging_then_killed(ctx: PhaseContext, step_id: str) -> PhaseReport:
        _spend(ctx, 1, 50)
        time.sleep(app.settings.lease_seconds / 3 + 1.5)  # one beat at least
        raise Killed

    seen: list[tuple[int, int, bool]] = []

    def retried(ctx: PhaseContext, step_id: str) -> PhaseReport:
        calls, tokens = ctx.budget.spent_by_direction()[:2]
        seen.append((calls, tokens, ctx.budget.try_reserve_call()))
        ctx.budget.charge(0)
        return PhaseReport(phase="contradictions", status=StepStatus.NO_ITEMS.value)

    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    with pytest.raises(Killed):
        engine.execute_run(app, run_id, {**QUIET, "consolidate": asking,
                                         "contradictions": judging_then_killed})
    assert _expire_and_retry(app, run_id, {**QUIET, "contradictions": retried}) == "succeeded"
    assert seen == [(3, 250, True)]
    totals = _totals(app, run_id)
    assert (totals["model_calls"], totals["model_tokens"]) == (2 + 1 + 1, 250)


def test_a_waiting_phase_is_resumed_on_its_own_step_then_the_run_goes_on(app: App) -> None:
    """A phase that hands work to a provider batch returns WAITING: its parent step stays open
    (output.waiting), the in-process run polls, the phase resumes on the same step, and the
    run ends with one parent step per phase."""
    add_notes(app, {"content": "a note"})
    polls: list[str] = []

    def batched(ctx: PhaseContext, step_id: str) -> PhaseReport:
        polls.append(step_id)
        if len(polls) < 3:
            with ctx.uow() as uow:
                [parent] = [s for s in uow.runs.steps(ctx.run_id) if s.id == step_id]
                assert parent.status == "running"
            return PhaseReport(phase="consolidate", status=PhaseOutcome.WAITING.value,
                               counters={"retry_after": 0.05}, reason="batch b-1 in progress")
        return PhaseReport(phase="consolidate", status=StepStatus.SUCCEEDED.value)

    outcomes: list[tuple[str, PhaseOutcome]] = []
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    status = engine.execute_run(app, run_id, {**QUIET, "consolidate": batched},
                                on_phase=lambda p, o: outcomes.append((p, o)))
    assert status == RunStatus.SUCCEEDED.value
    assert len(polls) == 3 and len(set(polls)) == 1
    assert outcomes[0] == ("consolidate", PhaseOutcome.SUCCEEDED)
    with app.uow() as uow:
        parents = [s for s in uow.runs.steps(run_id) if s.parent_id is None]
    assert sorted(s.phase for s in parents) == sorted(PHASES)


def test_a_celery_phase_waiting_reports_when_to_look_again(app: App) -> None:
    """The Celery entry point hands WAITING back with the phase's retry_after (the task
    re-schedules itself with it); the next execution resumes the same step."""
    add_notes(app, {"content": "a note"})
    answers = iter([PhaseOutcome.WAITING.value, StepStatus.SUCCEEDED.value])

    def batched(ctx: PhaseContext, step_id: str) -> PhaseReport:
        return PhaseReport(phase="consolidate", status=next(answers),
                           counters={"retry_after": 42})

    registry = {**QUIET, "consolidate": batched}
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    first = engine.execute_phase(app, run_id, "consolidate", registry)
    assert (first.outcome, first.retry_after) == (PhaseOutcome.WAITING, 42.0)
    second = engine.execute_phase(app, run_id, "consolidate", registry)
    assert (second.outcome, second.retry_after) == (PhaseOutcome.SUCCEEDED, None)
    for phase in PHASES[1:]:
        assert engine.execute_phase(app, run_id, phase, registry).outcome is PhaseOutcome.NO_ITEMS
    assert service.finalize_run(app, run_id) == RunStatus.SUCCEEDED.value
    with app.uow() as uow:
        parents = [s for s in uow.runs.steps(run_id) if s.parent_id is None]
    assert len(parents) == len(PHASES)


def test_a_run_task_returns_at_a_waiting_phase_and_resumes_there(app: App) -> None:
    """One Celery task per run (``poll=False``): a WAITING phase ends the call with its
    retry_after, the run still running and unfinalized, the phases before it done once; the
    next call resumes that phase on its own step (the done ones are not run again) and goes on
    to finalize."""
    add_notes(app, {"content": "a note"})
    answers = iter([PhaseOutcome.WAITING.value, StepStatus.SUCCEEDED.value])
    calls: list[str] = []

    def counted(name: str, status: Any = None) -> Any:
        def phase(ctx: PhaseContext, step_id: str) -> PhaseReport:
            calls.append(step_id)
            return PhaseReport(phase=name, status=status() if status else "no_items",
                               counters={"retry_after": 42})
        return phase

    registry = {**{p: counted(p) for p in PHASES},
                "contradictions": counted("contradictions", lambda: next(answers))}
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    first = service.execute_run_task(app, run_id, registry)
    assert (first.status, first.retry_after) == (RunStatus.RUNNING.value, 42.0)
    assert [c.split(":")[1] for c in calls] == ["consolidate", "contradictions"]
    with app.uow() as uow:
        row = uow.runs.get(run_id)
        assert row is not None and row.finished_at is None
    second = service.execute_run_task(app, run_id, registry)
    assert (second.status, second.retry_after) == (RunStatus.SUCCEEDED.value, None)
    assert [c.split(":")[1] for c in calls] == ["consolidate", "contradictions",
                                                "contradictions", "prune", "archive"]
    assert calls[1] == calls[2]  # the same step, resumed
    with app.uow() as uow:
        parents = [s for s in uow.runs.steps(run_id) if s.parent_id is None]
    assert sorted(s.phase for s in parents) == sorted(PHASES)
    assert all(s.status in ("succeeded", "no_items") for s in parents)


def test_a_run_task_past_its_hand_off_time_goes_on_in_the_next_call(app: App) -> None:
    """``hand_off_after``: once a call has run a phase and that long has passed, it starts no
    further phase and says so (``hand_off``); each next call resumes at the first phase not
    done, runs at least one, and the last one finalizes. With 0, one phase per call."""
    add_notes(app, {"content": "a note"})
    ran: list[str] = []

    def counted(name: str) -> Any:
        def phase(ctx: PhaseContext, step_id: str) -> PhaseReport:
            ran.append(name)
            return PhaseReport(phase=name, status=StepStatus.NO_ITEMS.value)
        return phase

    registry = {p: counted(p) for p in PHASES}
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    results = []
    for _ in range(len(PHASES)):
        results.append(engine.execute_run_once(app, run_id, registry, poll=False,
                                               hand_off_after=0.0))
    assert [r.hand_off for r in results] == [True] * (len(PHASES) - 1) + [False]
    assert [r.status for r in results] == ["running"] * (len(PHASES) - 1) + ["succeeded"]
    assert ran == list(PHASES)
    # A generous hand-off time: the whole run in one call.
    add_notes(app, {"agent_id": "agent-2", "content": "a note"})
    run_id = service.create_run(app, Scope("agent-2"), force=True)
    assert run_id is not None
    whole = engine.execute_run_once(app, run_id, registry, poll=False, hand_off_after=3600.0)
    assert (whole.status, whole.hand_off) == ("succeeded", False)


def test_a_run_task_opens_each_next_phase_with_the_finish_before_it(app: App) -> None:
    """A Celery run task commits as often as an in-process run: its claim opens the first
    phase's step and each phase's finish the next one's, in the same transaction, instead of
    a transaction per phase start. Past its hand-off time it opens nothing ahead: the next
    call starts that phase itself (no step left open that it could not tell from a
    duplicate executor's, R4)."""
    from tests.support.sql import recorded_commits

    add_notes(app, {"content": "a note"}, {"agent_id": "agent-2", "content": "a note"},
              {"agent_id": "agent-3", "content": "a note"})
    in_process = service.create_run(app, SCOPE, force=True)
    as_task = service.create_run(app, Scope("agent-2"), force=True)
    assert in_process is not None and as_task is not None
    with recorded_commits(app) as by_engine:
        assert engine.execute_run(app, in_process, QUIET) == "succeeded"
    with recorded_commits(app) as by_task:
        assert service.execute_run_task(app, as_task, QUIET).status == "succeeded"
    assert sum(by_task) == sum(by_engine) == len(PHASES) + 2, (by_task, by_engine)
    # Handing off after each phase: nothing opened ahead, every call starts its own phase.
    handed = service.create_run(app, Scope("agent-3"), force=True)
    assert handed is not None
    results = [engine.execute_run_once(app, handed, QUIET, poll=False, hand_off_after=0.0)
               for _ in PHASES]
    assert [r.hand_off for r in results] == [True] * (len(PHASES) - 1) + [False]
    with app.uow() as uow:
        parents = [s for s in uow.runs.steps(handed) if s.parent_id is None]
    assert sorted(s.phase for s in parents) == sorted(PHASES)
    assert {s.status for s in parents} == {"no_items"}


@pytest.mark.parametrize(("provider", "limit", "model_seconds", "call", "hand_off"), [
    # 2,700 s soft limit less 900 s of model time, 30 s × 3 attempts + 10 s for the call in
    # flight when that time ends, and a minute for the writes
    ("openai", 3000, 900.0, 30.0, 1640.0),
    ("fake", 1000, 100.0, 30.0, 640.0),
    ("openai", 1000, 100.0, 5.0, 715.0),  # a shorter call deadline leaves more
    ("fake", 3000, 2540.0, 30.0, 0.0),  # exactly fits: each phase in a task of its own
    # no model: settings that could not hold a judging phase are accepted (none asks)
    ("none", 600, 900.0, 30.0, 0.0),
])
def test_a_run_task_hands_off_before_its_soft_limit_could_cut_a_phase(
        provider: str, limit: int, model_seconds: float, call: float, hand_off: float) -> None:
    """The soft limit (90 % of the hard one) less a phase's model time, the one call that may
    still be in flight when that time ends, and a minute for the writes."""
    from worker.config import Settings

    settings = Settings(llm_provider=provider, task_time_limit=limit,
                        llm_phase_seconds=model_seconds, llm_timeout=call)
    assert service.run_task_hand_off(settings) == pytest.approx(hand_off)


def test_a_waiting_phase_renews_the_lease_at_each_look(app: App) -> None:
    """Under Celery nothing beats between a waiting phase's looks: each look renews the run's
    lease, so a batch that takes longer than the lease does not get its run recovered as lost
    (the lease is set back below to stand for the time that passed since the claim)."""
    add_notes(app, {"content": "a note"})

    def batched(ctx: PhaseContext, step_id: str) -> PhaseReport:
        return PhaseReport(phase="consolidate", status=PhaseOutcome.WAITING.value,
                           counters={"retry_after": 42})

    registry = {**QUIET, "consolidate": batched}
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    assert engine.execute_phase(app, run_id, "consolidate", registry).outcome is (
        PhaseOutcome.WAITING)
    almost = utcnow() + timedelta(seconds=5)
    with app.uow() as uow:
        row = uow.runs.get(run_id)
        assert row is not None
        row.lease_expires_at = almost
        uow.commit()
    assert engine.execute_phase(app, run_id, "consolidate", registry).outcome is (
        PhaseOutcome.WAITING)
    later = almost + timedelta(seconds=60)
    assert service.gate_check(app, now=later).retried == []
    with app.uow() as uow:
        row = uow.runs.get(run_id)
        assert row is not None and row.status == RunStatus.RUNNING.value


def _statements(app: App, work: Any) -> tuple[Any, list[str]]:
    """What ``work()`` returned and the first word of each statement it sent (this thread's:
    a lease beat of the process is not the work's)."""
    with recorded_statements(app) as statements:
        result = work()
    return result, [s.split()[0] for s in statements]


def test_the_engine_reads_a_run_once_and_writes_one_statement_per_phase(app: App) -> None:
    """In-process, around phases that touch nothing: the claim (2 statements: the claim, which
    returns the notes-before counts too, and every phase's parent step opened in one
    executemany), 1 per phase (its parent step's finish), finalize (the fenced final update,
    which counts the notes after itself; the steps are the ones this process wrote, not read
    again): 7, whatever the number of notes (the phases' own load embeds what lacks a vector:
    the engine no longer looks)."""
    add_notes(app, *({"content": f"note {k}"} for k in range(30)))
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    status, statements = _statements(app, lambda: engine.execute_run(app, run_id, QUIET))
    assert status == RunStatus.SUCCEEDED.value
    assert len(statements) == 2 + len(PHASES) + 1, statements


def test_a_run_created_claimed_needs_no_claim(app: App) -> None:
    """``create_claimed_run`` inserts the run running under epoch 1 with its notes-before
    counts (taken by the insert) and opens its phases' parent steps (2 statements); executing
    it spends no claim: 1 per phase, finalize's 1. Its steps and totals are what a claimed run gets: one parent step
    per phase, started in phase order, each with its own start time."""
    add_notes(app, *({"content": f"note {k}"} for k in range(30)))
    snap, created = _statements(app, lambda: service.create_claimed_run(app, SCOPE, force=True))
    assert snap is not None and created == ["INSERT", "INSERT"]
    assert service.create_claimed_run(app, SCOPE, force=True) is None  # R1: one holds the scope
    with app.uow() as uow:
        row = uow.runs.active_for_scope(SCOPE)
        assert row is not None and row.id == snap.run_id
        assert (row.status, row.lease_epoch, row.attempts) == (RunStatus.RUNNING.value, 1, 1)
        assert row.totals == {"notes_before": {"active": 30}}
        opened = [(s.phase, s.status) for s in uow.runs.steps(snap.run_id)]
    assert opened == [(p, StepStatus.RUNNING.value) for p in PHASES]
    status, statements = _statements(app, lambda: engine.execute_run(app, snap, QUIET))
    assert status == RunStatus.SUCCEEDED.value
    assert len(statements) == len(PHASES) + 1, statements
    with app.uow() as uow:
        parents = uow.runs.steps(snap.run_id)
    assert [s.phase for s in parents] == list(PHASES)
    assert all(a.finished_at is not None and b.started_at is not None
               and a.finished_at <= b.started_at for a, b in itertools.pairwise(parents))
    with app.uow() as uow:
        run = uow.runs.get(snap.run_id)
        assert run is not None and run.totals is not None
        assert run.totals["notes_before"] == run.totals["notes_after"] == {"active": 30}
        assert run.totals["phases"] == dict.fromkeys(PHASES, StepStatus.NO_ITEMS.value)


# ---- a partial model outage, black box through the CLI and the real openai client ----------
GREEN_TEA = ["User drinks green tea every morning before work",
             "Every morning the user has green tea",
             "User usually drinks green tea in the mornings"]


def _dream(app: App, *args: str, code: int = 0, **env: str) -> Result:
    environ = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING",
               "DREAM_BROKER_URL": None, **env}
    result = CliRunner().invoke(main, list(args), env=environ, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


def test_r27_a_model_down_for_some_calls_ends_the_run_partial(app: App,
                                                             llm_stub: LLMStub) -> None:
    """Some model calls fail (HTTP 500 for one cluster), others are answered: the run is
    partial (not succeeded, not blocked) with "model partly unavailable: F of N model calls
    failed (P%)" naming the client's error and no note text; a total outage stays blocked."""
    def handler(req: Any) -> Any:
        if "green tea" in req.user:
            return StubResponse.error(500)
        return {"should_consolidate": False, "content": "", "type": "Preference",
                "source_ids": [], "reason": "keep apart", "verdicts": [], "topics": []}

    llm_stub.set_handler(handler)
    env = {"DREAM_LLM_PROVIDER": "openai", "DREAM_LLM_BASE_URL": llm_stub.url,
           "DREAM_LLM_API_KEY": "k", "DREAM_LLM_MODEL": "stub-model",
           "DREAM_LLM_MAX_RETRIES": "0", "DREAM_LLM_TIMEOUT": "2"}
    add_notes(app, *({"content": t, "type": "Preference"} for t in DARK_MODE_NOTES + GREEN_TEA))
    ran = _dream(app, "run", "--agent", "agent-1", "--force", code=11, **env)  # partial
    [listed] = json.loads(_dream(app, "runs", "list", "--json").stdout)
    assert listed["status"] == "partial", (ran.stdout, listed)
    assert "model_partial" in listed["totals"]["flags"]
    reason = listed["status_reason"]
    assert reason.startswith("model partly unavailable: "), reason
    failed, total = reason.split(": ", 1)[1].split(" model calls failed")[0].split(" of ")
    assert 0 < int(failed) < int(total), reason
    share = round(100 * int(failed) / int(total))
    assert f"failed ({share}%)" in reason and "(HTTP 500)" in reason
    assert not any(word in reason for word in ("tea", "dark", "editor", "morning"))


def test_a_celery_phase_task_reads_its_run_once(app: App) -> None:
    """Each phase task: one read of the run (row and steps), or for the first the claim alone
    (which returns the run and the notes-before counts), then the fenced parent step and its
    finish (the phases' own load embeds what lacks a vector: the engine no longer looks); the
    last one then finalizes from its snapshot: one read of the steps, the fenced final
    update."""
    add_notes(app, *({"content": f"note {k}"} for k in range(30)))
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    counted: dict[str, int] = {}
    statuses = []
    for phase in PHASES:  # this thread's statements (a lease beat of the process is not its)
        with recorded_statements(app) as seen:
            result = engine.execute_phase(app, run_id, phase, QUIET)
        assert result.outcome is PhaseOutcome.NO_ITEMS
        statuses.append(result.status)
        counted[phase] = len(seen)
    assert counted == {"consolidate": 1 + 2, "contradictions": 2 + 2,
                       "prune": 2 + 2, "archive": 2 + 2 + 2}
    assert statuses == [None, None, None, RunStatus.SUCCEEDED.value]
    assert service.finalize_run(app, run_id) == RunStatus.SUCCEEDED.value  # finished: as is
