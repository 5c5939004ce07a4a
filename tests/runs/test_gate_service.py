"""The gate against a real store (SQLite and PostgreSQL): per-agent overrides from the agents
table, the idle wait, the volume trigger counted in the database, every decision on the
gate_check result, and `dream gate --explain` through the CLI."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import update

from tests.support.bind_limits import bind_limit
from tests.support.factories import (
    DARK_MODE_NOTES,
    NOW,
    add_entities,
    add_notes,
    add_sessions,
    approve_a_merge,
    days_ago,
)
from tests.support.sql import recorded_commits, recorded_statements
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.errors import NotFound
from worker.host import remember
from worker.ingest import import_sessions
from worker.runs import service
from worker.runs.gate import GateDecision, GateRule
from worker.runs.scheduling import GateResult
from worker.safety.undo import undo_run
from worker.store.models import DreamRunRow


def test_gate_check_decides_each_scope_by_its_agents_gate(app: App) -> None:
    """Three agents, three gates: a busy one waits for quiet, a quiet one with many notes is due
    by volume, a default one lacks sessions. Only the due scope gets a run, and the result carries
    every scope's rule and reason."""
    add_entities(app, {"kind": "agent", "id": "busy", "gate_idle_minutes": 30,
                       "gate_max_stale_hours": 72},
                 {"kind": "agent", "id": "quiet", "gate_notes": 3})
    add_sessions(app, 5, agent_id="busy", start=NOW - timedelta(minutes=2))
    add_notes(app, *({"agent_id": "quiet", "content": f"Fact number {i} about the project",
                      "created_at": days_ago(1)} for i in range(3)))
    add_sessions(app, 4, agent_id="plain")
    result = service.gate_check(app, now=NOW)
    rules = {k: d.rule for k, d in result.decisions.items()}
    assert rules == {Scope("busy").key: GateRule.WAITING_FOR_IDLE,
                     Scope("quiet").key: GateRule.DUE,
                     Scope("plain").key: GateRule.TOO_LITTLE_ACTIVITY}
    with app.uow() as uow:
        assert [r.id for r in uow.runs.list(Scope("quiet"))] == result.created
        assert not uow.runs.list(Scope("busy")) and not uow.runs.list(Scope("plain"))
    assert "3 of 3 changed notes" in result.decisions[Scope("quiet").key].reason
    assert "last session 2.0 min ago" in result.skipped[Scope("busy").key]
    # A second tick: the quiet scope is due but already has its queued run, and says so.
    again = service.gate_check(app, now=NOW)
    assert again.created == []
    assert again.decisions[Scope("quiet").key].rule is GateRule.ALREADY_ACTIVE


def test_busy_scope_runs_once_it_is_stale(app: App) -> None:
    """The idle wait holds a busy scope back only until the maximum staleness: 72 h after its
    earliest pending session it runs although the user is still active."""
    add_entities(app, {"kind": "agent", "id": "busy", "gate_idle_minutes": 30,
                       "gate_max_stale_hours": 72})
    add_sessions(app, 1, agent_id="busy", start=NOW - timedelta(hours=73))
    add_sessions(app, 4, agent_id="busy", start=NOW - timedelta(hours=2, minutes=1))
    add_sessions(app, 1, agent_id="busy", start=NOW - timedelta(minutes=1))
    decision = service.scope_gate(app, Scope("busy"), now=NOW)
    assert decision.rule is GateRule.DUE_STALE and decision.due
    # Two hours earlier: five sessions had started, the last a minute before, 71 h of waiting.
    early = service.scope_gate(app, Scope("busy"), now=NOW - timedelta(hours=2))
    assert early.rule is GateRule.WAITING_FOR_IDLE, early.reason


def test_volume_counts_host_writes_not_the_dreams_own_changes(app: App) -> None:
    """The volume trigger counts notes created or changed after the last successful dream ended:
    the three notes the dream itself archived do not make the scope due again; three notes the
    host remembers afterwards do."""
    add_entities(app, {"kind": "agent", "id": "vol", "gate_notes": 3, "gate_hours": 0})
    add_notes(app, *({"agent_id": "vol", "content": f"Offer number {i} ends in January",
                      "expires_at": "2026-01-31T00:00:00+00:00"} for i in range(3)))
    run_id = service.create_run(app, Scope("vol"), force=True)
    assert run_id is not None
    assert service.execute_run(app, run_id) == "succeeded"
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.totals is not None
        assert run.totals["notes_after"] == {"archived": 3}  # the dream did change notes
    after = service.scope_gate(app, Scope("vol"), now=utcnow() + timedelta(seconds=1))
    assert after.rule is GateRule.TOO_LITTLE_ACTIVITY
    assert "0 of 3 changed notes" in after.reason
    for text in ("User likes green tea", "User works from Lisbon", "User owns a red bicycle"):
        remember(app, Scope("vol"), text)
    later = service.scope_gate(app, Scope("vol"), now=utcnow() + timedelta(seconds=1))
    assert later.rule is GateRule.DUE and "3 of 3 changed notes" in later.reason


def _dream(app: App, *args: str) -> Result:
    env = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING",
           "DREAM_BROKER_URL": None, "DREAM_LLM_PROVIDER": "none"}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_cli_gate_explain_creates_nothing(app: App) -> None:
    """`dream gate --explain` prints one line per scope with its decision, rule and reason, and
    queues no run; `--json` gives the same as data, `--agent` one scope; misuse is one error line."""
    add_sessions(app, 5, agent_id="due-agent", start=NOW)
    add_sessions(app, 2, agent_id="short-agent", start=NOW)
    result = _dream(app, "gate", "--explain", "--now", NOW.isoformat())
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("due ") and '["due-agent",null,null]' in lines[0]
    assert "first dream" in lines[0]
    assert lines[1].startswith("not due") and "2 of 5 sessions" in lines[1]
    with app.uow() as uow:
        assert not uow.runs.list(Scope("due-agent"))
    data = json.loads(_dream(app, "gate", "--explain", "--json", "--now",
                             NOW.isoformat()).output)
    assert {s["scope"]: s["rule"] for s in data["scopes"]} == {
        Scope("due-agent").key: "due", Scope("short-agent").key: "too_little_activity"}
    one = _dream(app, "gate", "--explain", "--agent", "short-agent", "--now", NOW.isoformat())
    assert one.exit_code == 0 and len(one.output.strip().splitlines()) == 1
    assert '["short-agent",null,null]' in one.output
    for args, message in ((["--json"], "--json goes with --explain"),
                          (["--agent", "a"], "--agent goes with --explain"),
                          (["--explain", "--user", "u"], "--user and --company need --agent"),
                          (["--explain", "--agent", "nobody"],
                           'unknown scope ["nobody",null,null]: it has no notes, sessions or runs; '
                           "check agent/user/company (null is a value, not a wildcard)")):
        bad = _dream(app, "gate", *args)
        unknown = message.startswith("unknown scope")
        assert bad.exit_code == (NotFound.exit_code if unknown else 2), bad.output
        (line,) = bad.stderr.strip().splitlines()
        assert line.startswith("error: ") and message in line


def test_bad_agent_gate_value_is_refused_and_writes_nothing(app: App) -> None:
    """An agent line with gate_notes 0 is one error naming the line and field; nothing written."""
    from worker.ingest import InputError

    with pytest.raises(InputError, match=r"line 2: gate_notes must be a whole number at least 1"):
        add_entities(app, {"kind": "agent", "id": "ok"}, {"kind": "agent", "id": "x",
                                                         "gate_notes": 0})
    with app.uow() as uow:
        assert uow.entities.agent("ok") is None


def _due(app: App, *agents: str, sessions: int = 5) -> None:
    """``sessions`` sessions for each agent's scope, in one import."""
    import_sessions(app, [json.dumps({"agent_id": agent, "user_id": None, "company_id": None,
                                      "started_at": (NOW - timedelta(minutes=i)).isoformat()})
                          for agent in agents for i in range(sessions)])


def test_gate_check_result_with_due_idle_and_busy_scopes(app: App) -> None:
    """Two due scopes get a run each, in scope order; a scope short of sessions is skipped with
    its reason; a due scope whose queued run is still there keeps it and is recorded as
    already active, its due reason kept in front. Nothing recovered, retried or failed."""
    _due(app, "due-1", "due-2", "held")
    _due(app, "short", sessions=2)
    held = service.create_run(app, Scope("held"), force=True)
    assert held is not None
    result = service.gate_check(app, now=NOW)
    with app.uow() as uow:
        created = [r.id for agent in ("due-1", "due-2") for r in uow.runs.list(Scope(agent))]
        assert [r.id for r in uow.runs.list(Scope("held"))] == [held]
    first = "due: 5 of 5 sessions since the scope began (first dream)"
    busy = "a run is already queued or running"
    assert len(created) == 2
    assert result == GateResult(
        created=created,
        skipped={Scope("held").key: busy,
                 Scope("short").key: "2 of 5 sessions since the scope began (no dream yet)"},
        retried=[], failed=[], requeued=[], backlog=None,
        decisions={
            Scope("due-1").key: GateDecision(True, first, GateRule.DUE),
            Scope("due-2").key: GateDecision(True, first, GateRule.DUE),
            Scope("held").key: GateDecision(False, f"{first}; {busy}", GateRule.ALREADY_ACTIVE),
            Scope("short").key: GateDecision(
                False, "2 of 5 sessions since the scope began (no dream yet)",
                GateRule.TOO_LITTLE_ACTIVITY),
        })


def test_gate_check_statements_do_not_grow_with_the_due_scopes(app: App) -> None:
    """One INSERT of runs in one transaction for all due scopes: a check that creates 50 runs
    (and finds 5 scopes holding one) runs as many statements and commits as one that creates 5."""
    _due(app, *(f"few-{i}" for i in range(5)))
    with recorded_statements(app) as few, recorded_commits(app) as few_commits:
        assert len(service.gate_check(app, now=NOW).created) == 5
    _due(app, *(f"many-{i:02d}" for i in range(50)))
    with recorded_statements(app) as many, recorded_commits(app) as many_commits:
        result = service.gate_check(app, now=NOW)
    assert len(result.created) == 50
    assert sum(d.rule is GateRule.ALREADY_ACTIVE for d in result.decisions.values()) == 5
    assert len(many) == len(few)
    inserts = [s for s in many if s.startswith("INSERT")]
    assert len(inserts) == 1 and inserts[0].startswith("INSERT INTO dream_runs")
    assert many_commits == few_commits  # the same transactions, whatever the count of scopes


def test_a_blocked_dream_counts_as_the_last_dream_for_sessions_too(app: App) -> None:
    """A blocked run counts as a dream for the gate (README "Run steps"): its sessions are spent.
    The gate counted them again from the last *succeeded* run, so a scope whose dream the
    blast-radius guard stopped was due again 24 h later with no new session ("5 of 5 sessions
    since last dream"), and every day after. Now it waits for 5 sessions after the blocked run,
    as the volume trigger already did."""
    add_notes(app, *({"agent_id": "guarded", "content": f"Coupon code {i} for the spring sale",
                      "expires_at": "2026-01-01T00:00:00+00:00"} for i in range(12)))
    add_sessions(app, 5, agent_id="guarded", start=utcnow() - timedelta(hours=1))
    run_id = service.create_run(app, Scope("guarded"))
    assert run_id is not None and service.execute_run(app, run_id) == "blocked"
    later = utcnow() + timedelta(hours=25)
    quiet = service.scope_gate(app, Scope("guarded"), now=later)
    assert (quiet.rule, quiet.reason) == (GateRule.TOO_LITTLE_ACTIVITY,
                                         "0 of 5 sessions since last dream")
    add_sessions(app, 5, agent_id="guarded", start=later - timedelta(hours=1))
    again = service.scope_gate(app, Scope("guarded"), now=later)
    assert again.rule is GateRule.DUE and again.reason.startswith("due: 5 of 5 sessions and 25")


def test_approving_a_review_item_is_not_the_scopes_last_dream(app: App) -> None:
    """A review approval applies its item in a run of its own (trigger ``review``), and the
    gate took that run for the scope's last dream: the sessions the host recorded after the
    dream stopped counting and the 24 h started over from the approval. Now only dreams count:
    five sessions after the dream and 24 h since it make the scope due, approval or not."""
    add_notes(app, {"agent_id": "rev", "content": "Works from Lisbon."})
    dream = service.create_run(app, Scope("rev"), force=True)
    assert dream is not None and service.execute_run(app, dream) == "succeeded"
    hour = timedelta(hours=1)
    with app.uow() as uow:  # the dream ran an hour ago; five sessions since, then the approval
        run = uow.runs.get(dream)
        assert run is not None and run.started_at and run.finished_at
        dreamt = run.started_at - hour
        uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == dream).values(
            started_at=dreamt, finished_at=run.finished_at - hour))
        uow.commit()
    add_sessions(app, 5, agent_id="rev", start=utcnow() - timedelta(minutes=1))
    approve_a_merge(app, Scope("rev"), dream)
    decision = service.scope_gate(app, Scope("rev"), now=dreamt + timedelta(hours=24, minutes=1))
    assert decision.rule is GateRule.DUE, decision.reason
    assert decision.reason.startswith("due: 5 of 5 sessions and 24.02 h")


def test_a_session_stamped_in_the_future_counts_once_it_has_started(app: App) -> None:
    """Sessions are counted 'since the last dream' by their start; five stamped years ahead (a
    host's wrong year, milliseconds read as seconds) started after every dream, so the scope
    was due every 24 h forever with no activity ("5 of 5 sessions since last dream"). The gate
    counts the sessions that have started by its clock: none yet, then all five when they do."""
    future = utcnow().replace(year=utcnow().year + 5)
    add_notes(app, {"agent_id": "ahead", "content": "Works from Lisbon."})
    add_sessions(app, 5, agent_id="ahead", start=future)
    first = service.scope_gate(app, Scope("ahead"))
    assert (first.rule, first.reason) == (
        GateRule.TOO_LITTLE_ACTIVITY, "0 of 5 sessions since the scope began (no dream yet)")
    run_id = service.create_run(app, Scope("ahead"), force=True)
    assert run_id is not None and service.execute_run(app, run_id) == "succeeded"
    later = service.scope_gate(app, Scope("ahead"), now=utcnow() + timedelta(hours=25))
    assert (later.rule, later.reason) == (GateRule.TOO_LITTLE_ACTIVITY,
                                         "0 of 5 sessions since last dream")
    then = service.scope_gate(app, Scope("ahead"), now=future)
    assert then.rule is GateRule.DUE and then.reason.startswith("due: 5 of 5 sessions")


def test_a_session_stamped_years_ahead_holds_no_idle_wait(app: App) -> None:
    """A session ended (or started) years ahead of the gate's clock, a host's wrong year, was
    the scope's latest activity "0.0 min ago" at every gate check: with an idle wait and no
    maximum staleness the scope waited until 2099. A stamp up to an hour ahead (clock skew)
    still counts as activity now; one further ahead has not happened."""
    add_entities(app, {"kind": "agent", "id": "busy", "gate_idle_minutes": 30})
    add_sessions(app, 5, agent_id="busy", start=NOW - timedelta(hours=3))
    import_sessions(app, [json.dumps({"agent_id": "busy", "id": "late",
                                      "started_at": (NOW - timedelta(hours=2)).isoformat(),
                                      "ended_at": "2099-01-01T00:00:00+00:00"})])
    decision = service.scope_gate(app, Scope("busy"), now=NOW)
    assert decision.rule is GateRule.DUE, decision.reason
    import_sessions(app, [json.dumps({"agent_id": "busy", "id": "skewed",
                                      "started_at": (NOW + timedelta(minutes=5)).isoformat()})])
    skewed = service.scope_gate(app, Scope("busy"), now=NOW)
    assert skewed.rule is GateRule.WAITING_FOR_IDLE, skewed.reason


def test_a_note_stamped_in_the_future_is_no_change_until_then(app: App) -> None:
    """The volume trigger's sibling: three notes imported with an ``updated_at`` years ahead
    changed after every dream, so a volume-gated scope was due every day with no new note."""
    add_entities(app, {"kind": "agent", "id": "vol", "gate_notes": 3})
    future = utcnow().replace(year=utcnow().year + 5)
    add_notes(app, *({"agent_id": "vol", "content": f"Fact number {i} about the project",
                      "updated_at": future.isoformat()} for i in range(3)))
    run_id = service.create_run(app, Scope("vol"), force=True)
    assert run_id is not None and service.execute_run(app, run_id) == "succeeded"
    later = service.scope_gate(app, Scope("vol"), now=utcnow() + timedelta(hours=25))
    assert later.rule is GateRule.TOO_LITTLE_ACTIVITY and "0 of 3 changed notes" in later.reason
    then = service.scope_gate(app, Scope("vol"), now=future)
    assert then.rule is GateRule.DUE and "3 of 3 changed notes" in then.reason


def test_dream_gate_counts_a_due_scope_holding_a_run_apart_from_the_undue(app: App) -> None:
    """`dream gate`'s summary counted a due scope that already has a queued run among the
    scopes "not due": an operator read that the gate had judged it idle. It is counted apart."""
    _due(app, "held", "idle")
    add_sessions(app, 2, agent_id="short")
    assert service.create_run(app, Scope("held"), force=True) is not None
    assert service.create_run(app, Scope("idle"), force=True) is not None
    result = _dream(app, "gate", "--now", NOW.isoformat())
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(
        "created 0 runs, 1 scope not due, 2 due scopes already have a run, 0 interrupted runs")


def test_gate_explain_says_a_due_scope_is_held_by_its_run(app: App) -> None:
    """`dream gate --explain` said "due" for a scope whose interrupted run still holds it, so an
    operator asking why the scope never dreams read that it would; the gate check itself skips
    it (already_active). Explain now says what the check would: already_active, and why."""
    _due(app, "held", "free")
    run_id = service.create_run(app, Scope("held"), force=True)
    assert run_id is not None
    data = json.loads(_dream(app, "gate", "--explain", "--json", "--now", NOW.isoformat()).output)
    rules = {s["scope"]: (s["due"], s["rule"], s["reason"]) for s in data["scopes"]}
    first = "due: 5 of 5 sessions since the scope began (first dream)"
    assert rules == {
        Scope("free").key: (True, "due", first),
        Scope("held").key: (False, "already_active",
                            f"{first}; a run is already queued or running")}
    assert service.gate_check(app, now=NOW).decisions[Scope("held").key] == GateDecision(
        False, f"{first}; a run is already queued or running", GateRule.ALREADY_ACTIVE)


def test_mcp_dream_status_says_a_due_scope_is_held_by_its_run(app: App) -> None:
    """The MCP ``dream_status`` tool's gate said "due" for a scope its queued run holds, as
    `dream gate --explain` did: it answers already_active, as the gate check decides."""
    from worker.mcp.tools import ScopedTools

    add_sessions(app, 5, agent_id="held", start=utcnow() - timedelta(hours=1))
    assert service.create_run(app, Scope("held"), force=True) is not None
    gate = ScopedTools(app, Scope("held")).dream_status()["gate"]
    assert (gate["due"], gate["rule"]) == (False, "already_active")
    assert gate["reason"].endswith("; a run is already queued or running")


def test_an_undone_dream_still_counts_as_the_last_dream(app: App) -> None:
    """Undoing a dream made the scope due again at the next beat (its sessions and hours counted
    from the dream before), which redid the merges the user had just undone, minutes later. An
    undone dream now counts as the last one: the scope waits for 24 h and 5 new sessions."""
    add_notes(app, *({"agent_id": "undid", "content": text} for text in DARK_MODE_NOTES))
    add_sessions(app, 5, agent_id="undid", start=utcnow() - timedelta(hours=30))
    before = utcnow() - timedelta(days=2)
    with app.uow() as uow:  # the scope's first dream, two days ago
        first = uow.runs.create_many([Scope("undid")], now=before, trigger="beat", phases=[])
        uow.session.execute(update(DreamRunRow).where(DreamRunRow.id == first[Scope("undid").key])
                            .values(status="succeeded", started_at=before, finished_at=before))
        uow.commit()
    run_id = service.create_run(app, Scope("undid"), force=True)
    assert run_id is not None and service.execute_run(app, run_id) == "succeeded"
    undo_run(app, run_id)
    soon = service.scope_gate(app, Scope("undid"), now=utcnow() + timedelta(minutes=15))
    assert (soon.rule, soon.reason) == (GateRule.TOO_LITTLE_ACTIVITY,
                                        "0 of 5 sessions since last dream")
    later = utcnow() + timedelta(hours=25)
    add_sessions(app, 5, agent_id="undid", start=later - timedelta(hours=1))
    assert service.scope_gate(app, Scope("undid"), now=later).rule is GateRule.DUE


def test_an_undone_cancelled_run_is_no_dream(app: App) -> None:
    """A run that started and was cancelled is no dream, but undone it counted as the scope's
    last one (the gate took every undone run for an undone dream): the five sessions were
    spent and the scope waited 24 h and five more. What the run ended as decides
    (``totals.undone_from``)."""
    add_sessions(app, 5, agent_id="stopped", start=utcnow() - timedelta(hours=1))
    run_id = service.create_run(app, Scope("stopped"), force=True)
    assert run_id is not None and service.claim_run(app, run_id) is not None
    service.cancel_run(app, run_id)
    undo_run(app, run_id)
    with app.uow() as uow:
        assert uow.runs.get(run_id).status == "undone"  # type: ignore[union-attr]
    decision = service.scope_gate(app, Scope("stopped"), now=utcnow() + timedelta(minutes=1))
    assert (decision.rule, decision.reason) == (
        GateRule.DUE, "due: 5 of 5 sessions since the scope began (first dream)")


def test_volume_counts_no_undo_of_a_dream(app: App) -> None:
    """With the volume trigger, undoing the dream made the scope due at once: the notes the
    undo gave back and the one it revoked were changed after the dream ended. The worker's
    own writes never count; notes the host remembers afterwards still do."""
    add_entities(app, {"kind": "agent", "id": "vol", "gate_notes": 3, "gate_hours": 0})
    add_notes(app, *({"agent_id": "vol", "content": text} for text in DARK_MODE_NOTES))
    run_id = service.create_run(app, Scope("vol"), force=True)
    assert run_id is not None and service.execute_run(app, run_id) == "succeeded"
    assert len(undo_run(app, run_id).restored) >= 2
    after = service.scope_gate(app, Scope("vol"), now=utcnow() + timedelta(seconds=1))
    assert (after.rule, after.reason) == (GateRule.TOO_LITTLE_ACTIVITY,
                                          "0 of 5 sessions or 0 of 3 changed notes since last dream")
    for text in ("User likes green tea", "User works from Lisbon", "User owns a red bicycle"):
        remember(app, Scope("vol"), text)
    later = service.scope_gate(app, Scope("vol"), now=utcnow() + timedelta(seconds=1))
    assert later.rule is GateRule.DUE and "3 of 3 changed notes" in later.reason


def test_volume_counts_the_hosts_notes_not_an_approvals_writes(app: App) -> None:
    """An approval leaves the gate where the dream left it, but with the volume trigger its
    writes counted: the merge's fused note made the host's two new notes three changed notes,
    and the scope was due. The two the host wrote count, though the approval changed them."""
    add_entities(app, {"kind": "agent", "id": "vol", "gate_notes": 3, "gate_hours": 0})
    add_notes(app, {"agent_id": "vol", "content": "Works from Lisbon."})
    dream = service.create_run(app, Scope("vol"), force=True)
    assert dream is not None and service.execute_run(app, dream) == "succeeded"
    approve_a_merge(app, Scope("vol"), dream)
    decision = service.scope_gate(app, Scope("vol"), now=utcnow() + timedelta(seconds=1))
    assert (decision.rule, decision.reason) == (
        GateRule.TOO_LITTLE_ACTIVITY, "0 of 5 sessions or 2 of 3 changed notes since last dream")


def test_the_gate_decides_more_scopes_than_a_statement_binds(app: App) -> None:
    """A store knowing more scopes than a statement binds (each gate read binds a key twice;
    SQLite at the smallest limit its builds ship, PostgreSQL at psycopg's 65,535): every scope
    is decided, the one due among them is due, and the look-up of runs holding them answers
    (before: "too many SQL variables", or psycopg refusing the parameters)."""
    add_sessions(app, 5, agent_id="agent-due", start=NOW - timedelta(hours=1))
    with bind_limit(app) as limit:
        scopes = [Scope("agent-due"), *(Scope(f"agent-{k:05d}") for k in range(limit // 2))]
        decisions = service.explain_scopes(app, NOW, scopes)
        with app.uow() as uow:
            held = uow.run_history.held_scopes([sc.key for sc in scopes] * 2)
    assert len(decisions) == len(scopes) and held == set()
    assert [sc for sc, d in decisions.items() if d.due] == [Scope("agent-due")]


@pytest.mark.parametrize("phases, counts", [(["prune"], False), (["consolidate", "archive"],
                                                                  False), (None, True)])
def test_a_run_of_some_phases_is_not_the_scopes_last_dream(
        app: App, phases: list[str] | None, counts: bool) -> None:
    """`dream run --phase prune` on a due scope ended `succeeded` and counted as its last
    dream: the sessions were spent and the 24 h started over, so the phases it did not run
    waited another day and five sessions, and nothing said so. Only a run of every phase is a
    dream for the gate; the scope stays due after a narrowed one."""
    add_notes(app, {"agent_id": "some", "content": "Works from Lisbon."})
    add_sessions(app, 5, agent_id="some", start=utcnow() - timedelta(hours=2))
    run_id = service.create_run(app, Scope("some"), force=True, phases=phases)
    assert run_id is not None and service.execute_run(app, run_id) == "succeeded"
    decision = service.scope_gate(app, Scope("some"), now=utcnow() + timedelta(minutes=1))
    if counts:
        assert (decision.rule, decision.reason) == (GateRule.TOO_LITTLE_ACTIVITY,
                                                    "0 of 5 sessions since last dream")
    else:
        assert decision.rule is GateRule.DUE, decision.reason
