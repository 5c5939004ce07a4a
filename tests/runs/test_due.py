"""`dream run --due` in this process (worker/runs/due.py) against a real store: two invocations
at the same time each execute and report only the runs they claimed or created themselves,
and a scope another executor dreamed meanwhile is not dreamed again."""

from __future__ import annotations

from datetime import timedelta
from itertools import zip_longest

from click.testing import CliRunner

from tests.support.factories import add_notes, add_sessions
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.domain.types import RunStatus, Scope
from worker.runs import service
from worker.runs.due import execute_due, find_due
from worker.store.models import DreamRunRow

AGENTS = [f"due-{i}" for i in range(4)]


def _due_scopes(app: App) -> None:
    for agent in AGENTS:
        add_notes(app, {"agent_id": agent, "content": f"{agent} prefers tea"})
        add_sessions(app, 5, agent_id=agent, start=utcnow() - timedelta(hours=1))


def _runs(app: App) -> dict[str, DreamRunRow]:
    with app.uow() as uow:
        return {r.id: r for r in uow.session.query(DreamRunRow)}


def test_two_invocations_at_once_report_only_their_own_runs(app: App) -> None:
    """Both check the gate before either runs anything (they see the same four due scopes and
    the same waiting run), then take turns: each run is executed once, by the invocation that
    claimed or created it, and reported by that one only. Before, the second invocation's
    sweep of waiting runs took the first one's queued runs, and both printed them."""
    _due_scopes(app)
    add_notes(app, {"agent_id": "waiting", "content": "a queued run from `dream gate`"})
    waiting = service.create_run(app, Scope("waiting"), force=True)
    assert waiting is not None
    first, second = find_due(app, None), find_due(app, None)
    assert len(first.check.due) == len(second.check.due) == len(AGENTS)
    assert first.waiting == second.waiting == [waiting]
    reported: dict[str, list[str]] = {"first": [], "second": []}
    turns = zip_longest(execute_due(app, first, None), execute_due(app, second, None))
    for mine, theirs in turns:
        for who, item in (("first", mine), ("second", theirs)):
            if item is not None:
                assert item[1] == RunStatus.SUCCEEDED.value
                reported[who].append(item[0])
    assert reported["first"] and reported["second"]
    assert not set(reported["first"]) & set(reported["second"])
    runs = _runs(app)
    assert sorted(reported["first"] + reported["second"]) == sorted(runs)
    assert {r.agent_id for r in runs.values()} == {*AGENTS, "waiting"}  # one run per scope
    assert all(r.attempts == 1 and r.status == RunStatus.SUCCEEDED.value
               for r in runs.values())


def test_a_scope_dreamed_meanwhile_is_not_dreamed_again(app: App) -> None:
    """A due scope that another executor dreamed after this invocation's gate check (its run
    finished, so nothing holds the scope any more) is asked again before its run is created,
    and left alone."""
    _due_scopes(app)
    work = find_due(app, None)
    other = service.create_claimed_run(app, Scope(AGENTS[0]), trigger="beat")
    assert other is not None
    assert service.execute_run(app, other) == RunStatus.SUCCEEDED.value
    executed = dict(execute_due(app, work, None))
    assert len(executed) == len(AGENTS) - 1
    assert other.run_id not in executed
    assert len(_runs(app)) == len(AGENTS)


def test_the_cli_reports_its_runs_and_says_when_others_took_them(app: App) -> None:
    """`dream run --due` prints a summary for each run it executed; with every due scope held
    by another executor's run, one line says so instead of printing that executor's runs."""
    _due_scopes(app)
    env = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING",
           "DREAM_BROKER_URL": None, "DREAM_LLM_PROVIDER": "none"}
    held = {agent: service.create_claimed_run(app, Scope(agent), trigger="cli")
            for agent in AGENTS}
    out = CliRunner().invoke(main, ["run", "--due"], env=env)
    assert out.exit_code == 0, out.output
    assert out.stdout.strip() == ("no run left to execute here: another executor took every due "
                                  "scope and waiting run")
    for snap in held.values():
        assert snap is not None and snap.run_id not in out.stdout
        service.cancel_run(app, snap.run_id)
    # A cancel holds its scope for the gate's hours (README, The gate): none here.
    ran = CliRunner().invoke(main, ["run", "--due"], env={**env, "DREAM_GATE_HOURS": "0"})
    assert ran.exit_code == 0, ran.output
    summaries = [line for line in ran.stdout.splitlines() if line.startswith("run ")]
    assert len(summaries) == len(AGENTS) and all(" succeeded " in s for s in summaries)


def test_runs_the_gate_creates_with_now_keep_that_clock(app: App) -> None:
    """`dream run --due --now T` and `dream gate --now T` ask the gate as of T, and the runs they
    create keep T for their archive rules, as `dream run --force --now T` does. Before, those
    runs read the real clock: a note that expires between T and today was archived by a run
    the operator had set to T (replaying a day, a store copied from a bench)."""
    clock = (utcnow() - timedelta(days=30)).replace(microsecond=0)
    env = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING",
           "DREAM_BROKER_URL": None, "DREAM_LLM_PROVIDER": "none"}
    for agent, command in (("due-run", ["run", "--due"]), ("due-gate", ["gate"])):
        add_notes(app, {"agent_id": agent, "id": f"{agent}-n", "content": f"{agent} holds a pass",
                        "expires_at": (clock + timedelta(days=10)).isoformat()})
        add_sessions(app, 5, agent_id=agent, start=clock - timedelta(hours=2))
        out = CliRunner().invoke(main, [*command, "--now", clock.isoformat()], env=env)
        assert out.exit_code == 0, out.output
        run = next(r for r in _runs(app).values() if r.agent_id == agent)
        assert run.clock == clock, (agent, run.clock)
        if agent == "due-gate":  # queued by the gate: run it as a worker would
            assert service.execute_run(app, run.id) == RunStatus.SUCCEEDED.value
        with app.uow() as uow:
            (note,) = uow.notes.get_many([f"{agent}-n"])
        assert note.status == "active", agent  # not expired as of the run's clock


def test_a_queued_run_a_gate_check_created_after_the_sweep_is_claimed_here(app: App) -> None:
    """A `dream gate` without a broker creates a due scope's queued run after this invocation's
    sweep of waiting runs: the run is claimed and executed here (before: skipped silently,
    exit 0, left for the next `--due`)."""
    _due_scopes(app)
    work = find_due(app, None)
    assert work.waiting == [] and len(work.check.due) == len(AGENTS)
    queued = service.gate_check(app).created
    assert len(queued) == len(AGENTS)
    executed = dict(execute_due(app, work, None))
    assert sorted(executed) == sorted(queued)
    assert set(executed.values()) == {RunStatus.SUCCEEDED.value}
    assert len(_runs(app)) == len(AGENTS)
