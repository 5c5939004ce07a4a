"""A dream that could not do its work says so (R27) and the guard tells evidence from accidents
(R20): blocked runs in `dream runs list --json`, /metrics and the dashboard; a disabled agent's
scope pruned by the normal daily run; a host table that suddenly lacks everything trips the guard
(black box through the CLI where it applies; SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient
from sqlalchemy import text

from tests.support.factories import DARK_MODE_NOTES, NOW, add_notes
from tests.support.llm_stub import LLMStub, StubRequest, StubResponse
from tests.support.topic_judge import topic_reply
from worker.api import create_api
from worker.app import App, build_app
from worker.cli import main
from worker.config import Settings
from worker.domain.types import Scope
from worker.llm.fake import FakeLLM
from worker.runs import service

ADMIN = "admin-token-0123456789abcdef"
SCOPE = Scope("agent-1", "u1")


def dream(app: App, *args: str, stdin: str | None = None, code: int = 0, **env: str) -> Result:
    environ = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING",
               "DREAM_BROKER_URL": None, "DREAM_LLM_PROVIDER": "none", **env}
    result = CliRunner().invoke(main, list(args), input=stdin, env=environ,
                                catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


BLOCKED = 10  # `dream run`'s exit code for a run that ended blocked (worker.cli.runs)


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture
def api(app: App) -> Iterator[TestClient]:
    """The HTTP API over the same database, with an admin token."""
    other = build_app(Settings(database_url=app.settings.database_url, llm_provider="none",
                               api_tokens=json.dumps({ADMIN: {"role": "admin"}})))
    with TestClient(create_api(other)) as client:
        yield client
    other.dispose()


def _metrics(api: TestClient) -> str:
    r = api.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200
    return r.text


ORPHAN_HEAVY = [
    *({"agent_id": "agent-1", "user_id": "u1", "content": f"Order {i} came up in a deleted chat",
       "source_conversation_id": "gone"} for i in range(8)),
    *({"agent_id": "agent-1", "user_id": "u1", "content": f"Durable fact number {i} about u1"}
      for i in range(4)),
]
ENTITIES = [{"kind": "agent", "id": "agent-1"}, {"kind": "user", "id": "u1"},
            {"kind": "conversation", "id": "gone", "status": "deleted"}]


def test_r27_guard_trip_is_blocked_in_runs_list_metrics_and_dashboard(
    app: App, api: TestClient
) -> None:
    """Prune would archive 8 of 12 notes: `dream run --force` (the gate skipped) archives
    nothing, says blocked with the count to allow, `dream runs list --json` shows status
    blocked with the reason, /metrics counts it in dream_runs_blocked_total, the dashboard
    shows it; `--allow-retire 8` then archives the 8 and succeeds."""
    dream(app, "entities", "import", "-", stdin=jsonl(ENTITIES))
    dream(app, "notes", "import", "-", stdin=jsonl(ORPHAN_HEAVY))
    ran = dream(app, "run", "--agent", "agent-1", "--user", "u1", "--force", "--phase", "prune",
                code=BLOCKED)
    first = ran.stdout.splitlines()
    run_id = first[0].split()[1]
    assert first[0].startswith(f"run {run_id} blocked")
    assert first[1].strip().startswith("blocked: blast-radius guard: would retire 8 of 12")
    assert "re-run with --allow-retire 8" in first[1]

    [listed] = json.loads(dream(app, "runs", "list", "--json").stdout)
    assert listed["id"] == run_id and listed["status"] == "blocked"
    assert "would retire 8 of 12" in listed["status_reason"]
    assert listed["totals"]["flags"] == ["guard"]
    assert listed["totals"]["notes_after"] == {"active": 12}
    assert "blocked" in dream(app, "runs", "list").stdout
    shown = dream(app, "runs", "show", run_id).stdout  # which notes the guard held back
    held = next(line for line in shown.splitlines() if "; held: " in line)
    with app.uow() as uow:
        orphans = {n.id for n in uow.notes.load_scope(SCOPE).notes
                   if n.source_conversation_id == "gone"}
    assert set(held.split("; held: ")[1].split(", ")) == orphans and len(orphans) == 8

    body = _metrics(api)
    assert "# TYPE dream_runs_blocked_total counter" in body
    assert "dream_runs_blocked_total 1" in body.splitlines()
    assert 'dream_runs{status="blocked"} 1' in body
    page = api.get("/dashboard", params={"token": ADMIN}).text
    assert 'class="status blocked"' in page and "would retire 8 of 12" in page

    allowed = dream(app, "run", "--agent", "agent-1", "--user", "u1", "--force", "--phase",
                    "prune", "--allow-retire", "8")
    assert " succeeded " in allowed.stdout.splitlines()[0] + " "
    with app.uow() as uow:
        assert uow.notes.count_by_status(SCOPE) == {"active": 4, "archived": 8}
    assert "dream_runs_blocked_total 1" in _metrics(api).splitlines()


def test_r20_disabled_agent_scope_is_pruned_by_the_normal_daily_run(app: App) -> None:
    """A scope whose agent is recorded disabled (12 of 12 notes orphaned) is archived whole by
    the ordinary gate-driven run, which succeeds: explicit recorded evidence about the scope's
    owner is not a blast-radius accident (and is not retried, blocked, every day)."""
    dream(app, "entities", "import", "-",
          stdin=jsonl([{"kind": "agent", "id": "agent-1", "status": "disabled"}]))
    dream(app, "notes", "import", "-", stdin=jsonl(
        [{"agent_id": "agent-1", "user_id": "u1", "content": f"Fact {i} the agent knew"}
         for i in range(12)]))
    for _ in range(5):
        dream(app, "sessions", "add", "--agent", "agent-1", "--user", "u1")
    ran = dream(app, "run", "--due")
    assert " succeeded " in ran.stdout.splitlines()[0] + " ", ran.stdout
    with app.uow() as uow:
        assert uow.notes.count_by_status(SCOPE) == {"archived": 12}
    exported = [json.loads(line) for line in dream(app, "notes", "export").stdout.splitlines()]
    assert all(n["comments"].endswith("referenced agent is disabled") for n in exported)


def test_r20_host_table_that_suddenly_lacks_everything_trips_the_guard(app: App) -> None:
    """A host checker declared "absence means deleted" and its table is now empty (truncated by
    accident): every note looks orphaned by absence, which is not a recorded decision, so the
    guard stops the run (blocked) and nothing is archived."""
    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE host_agents (id VARCHAR(64) PRIMARY KEY, "
                          "state VARCHAR(16))"))
    dream(app, "notes", "import", "-", stdin=jsonl(
        [{"agent_id": "agent-1", "user_id": "u1", "content": f"Fact {i} the agent knew"}
         for i in range(12)]))
    env = {"DREAM_PRUNE__CHECKER": "sql", "DREAM_PRUNE__SQL_AGENTS": "host_agents.id.state",
           "DREAM_PRUNE__ABSENCE_MEANS_DELETED": "true"}
    ran = dream(app, "run", "--agent", "agent-1", "--user", "u1", "--force", code=BLOCKED, **env)
    assert " blocked " in ran.stdout.splitlines()[0] + " ", ran.stdout
    assert "would retire 12 of 12" in ran.stdout
    with app.uow() as uow:
        assert uow.notes.count_by_status(SCOPE) == {"active": 12}


def test_r27_exhausted_budget_blocks_the_run(app: App) -> None:
    """R15 + R27: no model calls left, the cluster is deferred; the run ends blocked naming the
    budget, never plain succeeded."""
    app.settings.budget.max_calls_per_run = 0
    add_notes(app, *({"user_id": "u1", "content": c} for c in DARK_MODE_NOTES))
    app.llm = FakeLLM(default={"should_consolidate": False, "content": "", "type": "Preference",
                               "source_ids": [], "reason": "unused"})
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW)
    assert run_id is not None
    assert service.execute_run(app, run_id) == "blocked"
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        assert "model budget exhausted (0 of 0 model calls)" in (run.status_reason or "")
        assert (run.totals or {})["flags"] == ["budget"]


GROWING = [
    ["User prefers dark mode in the code editor at night",
     "User likes dark mode for the code editor",
     "User wants the code editor in dark mode always"],
    ["User drinks green tea every morning before work", "Every morning the user has green tea",
     "User usually drinks green tea in the mornings"],
    ["User plays chess online every weekend evening", "User plays online chess on weekend evenings",
     "On weekend evenings the user plays chess online"],
]


def test_r27_open_candidates_growing_run_after_run_block_and_are_gauged(
    app: App, api: TestClient
) -> None:
    """With nothing to judge them (rule judge, no host fusing), open candidates that grow over
    3 runs in a row make the third run blocked; /metrics shows the scope's open-candidate gauge;
    a later run with no new candidates (no growth) succeeds again."""
    scope = Scope("a1")
    counts: list[int] = []
    statuses: list[str] = []
    for k, cluster in enumerate(GROWING):
        add_notes(app, *({"agent_id": "a1", "id": f"g{k}{i}", "content": c}
                         for i, c in enumerate(cluster)))
        run_id = service.create_run(app, scope, force=True, clock=NOW)
        assert run_id is not None
        statuses.append(service.execute_run(app, run_id))
        with app.uow() as uow:
            run = uow.runs.get(run_id)
            assert run is not None
            counts.append((run.totals or {})["open_candidates"])
    assert counts[0] < counts[1] < counts[2], counts
    assert statuses == ["succeeded", "succeeded", "blocked"]
    with app.uow() as uow:
        [latest] = uow.runs.list(scope, limit=1)
        assert "open candidates grew 3 runs in a row" in (latest.status_reason or "")
    assert f'dream_open_candidates{{scope="[\\"a1\\",null,null]"}} {counts[2]}' in _metrics(api)
    again = service.create_run(app, scope, force=True, clock=NOW)
    assert again is not None and service.execute_run(app, again) == "succeeded"


def test_r27_a_phase_out_of_its_own_budget_blocks_the_run(app: App) -> None:
    """The contradictions phase's own call limit (DREAM_CONTRADICTIONS__MAX_CALLS_PER_RUN=0)
    leaves the pair for later: the run is blocked naming that phase, not plain succeeded."""
    app.settings.contradictions.max_calls_per_run = 0
    add_notes(app, {"user_id": "u1", "content": "Customer uses metric units for all reports",
                    "created_at": "2026-05-12T12:00:00+00:00"},
              {"user_id": "u1", "content": "Customer uses imperial units for all reports",
               "created_at": "2026-05-31T12:00:00+00:00"})
    app.llm = FakeLLM(default={"topics": []})
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW, phases=["contradictions"])
    assert run_id is not None
    assert service.execute_run(app, run_id) == "blocked"
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        assert "model budget exhausted (the contradictions phase's limit" in (
            run.status_reason or "")


def test_r27_a_phase_out_of_model_time_blocks_the_run(app: App) -> None:
    """DREAM_LLM_PHASE_SECONDS spent before the cluster was asked: it is deferred to the next
    run, and the run is blocked for its budget, naming the phase and the setting (before:
    plain `succeeded`, no flag, and the gate counted it as the scope's dream)."""
    app.settings.llm_phase_seconds = 1e-9
    add_notes(app, *({"user_id": "u1", "content": c} for c in DARK_MODE_NOTES))
    app.llm = FakeLLM(default={"should_consolidate": False, "content": "", "type": "Preference",
                               "source_ids": [], "reason": "unused"})
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW, phases=["consolidate"])
    assert run_id is not None
    assert service.execute_run(app, run_id) == "blocked"
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        assert "the consolidate phase's model time, DREAM_LLM_PHASE_SECONDS" in (
            run.status_reason or "")
        assert (run.totals or {})["flags"] == ["budget"]


@pytest.mark.parametrize("reply", ["Sure! Here is my answer: keep them.", "{\"topics\": ",
                                   [1, 2, 3]], ids=["prose", "broken_json", "other_shape"])
def test_r27_a_model_answering_garbage_all_run_blocks_the_run(app: App, llm_stub: LLMStub,
                                                              reply: object) -> None:
    """An endpoint that answers every call, through the real openai client, but never with
    JSON of the asked schema: the run was `succeeded` (exit 0) with only clusters_invalid and
    topics_dropped counters; now it is blocked with one reason naming the count and the model
    setting, nothing changed, and the next run with a model that answers is not blocked."""
    llm_stub.set_handler(lambda req: reply)
    env = {"DREAM_LLM_PROVIDER": "openai", "DREAM_LLM_BASE_URL": llm_stub.url,
           "DREAM_LLM_API_KEY": "k", "DREAM_LLM_MODEL": "stub-model"}
    ran = _blocked_dark_mode_run(app, env)
    assert ran.stdout.splitlines()[0].split()[2] == "blocked", ran.stdout

    [listed] = json.loads(dream(app, "runs", "list", "--json").stdout)
    assert listed["totals"]["flags"] == ["model_unusable"]
    reason = listed["status_reason"]
    replies = len(llm_stub.chat_requests())
    assert reason.startswith(f"model answers unusable: {replies} of {replies} replies were not "
                             "JSON of the asked schema; check that DREAM_LLM_MODEL"), reason
    with app.uow() as uow:
        assert uow.notes.count_by_status(SCOPE) == {"active": len(DARK_MODE_NOTES)}

    llm_stub.set_handler(answering_model)
    dream(app, "run", "--agent", "agent-1", "--user", "u1", "--force", code=0, **env)
    latest = json.loads(dream(app, "runs", "list", "--json").stdout)[0]
    assert "model_unusable" not in latest["totals"]["flags"], latest


def answering_model(req: StubRequest) -> dict[str, Any]:
    """A model that answers each question usably: it keeps the cluster apart and answers every
    topic it is asked (an empty ``topics`` leaves them unanswered: a reply its checks reject,
    so the phase could use none of its replies and the run is partial)."""
    if req.prompt_name == "contradictions":
        return topic_reply(req.user, lambda a, b: "independent")
    return {"should_consolidate": False, "content": "", "type": "Preference", "source_ids": [],
            "reason": "keep apart"}


def _blocked_dark_mode_run(app: App, env: dict[str, str]) -> Any:
    """The dark-mode preferences of agent-1/u1 imported through the CLI and dreamed with the
    model ``env`` names, a run expected to end blocked; the finished ``dream run``."""
    notes = [{"agent_id": "agent-1", "user_id": "u1", "content": t, "type": "Preference"}
             for t in DARK_MODE_NOTES]
    dream(app, "entities", "import", "-",
          stdin=jsonl([{"kind": "agent", "id": "agent-1"}, {"kind": "user", "id": "u1"}]))
    dream(app, "notes", "import", "-", stdin=jsonl(notes))
    return dream(app, "run", "--agent", "agent-1", "--user", "u1", "--force", code=BLOCKED, **env)


def _closed_port_url() -> str:
    """A local URL nothing listens on: every connection is refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize("failure", ["server_error", "connection_refused"])
def test_r27_a_model_down_all_run_blocks_the_run(app: App, llm_stub: LLMStub,
                                                 failure: str) -> None:
    """An endpoint answering 500 to every call, or refusing every connection, through the real
    openai client: every cluster is deferred, nothing changes, and the run is blocked (not
    succeeded) with "model unavailable: N of N model calls failed (...)" in `dream runs list
    --json`, naming the client's error and no note text. When the endpoint answers again, the
    next run is not blocked for it."""
    llm_stub.set_handler(lambda req: StubResponse.error(500))
    url = llm_stub.url if failure == "server_error" else _closed_port_url()
    env = {"DREAM_LLM_PROVIDER": "openai", "DREAM_LLM_BASE_URL": url, "DREAM_LLM_API_KEY": "k",
           "DREAM_LLM_MODEL": "stub-model", "DREAM_LLM_MAX_RETRIES": "0",
           "DREAM_LLM_TIMEOUT": "2"}
    ran = _blocked_dark_mode_run(app, env)
    assert ran.stdout.splitlines()[0].split()[2] == "blocked", ran.stdout

    [listed] = json.loads(dream(app, "runs", "list", "--json").stdout)
    assert listed["status"] == "blocked"
    assert listed["totals"]["flags"] == ["model_unavailable"]
    reason = listed["status_reason"]
    assert reason.startswith("model unavailable: "), reason
    counted = reason.split(": ", 1)[1].split(" model calls failed")[0]
    failed, of_total = counted.split(" of ")
    assert failed == of_total and int(failed) >= 1, reason
    cause = "HTTP 500" if failure == "server_error" else "APIConnectionError"
    assert f"model endpoint failed after 1 attempt ({cause})" in reason
    assert not any(word in reason for word in ("dark", "editor", "theme"))
    with app.uow() as uow:
        assert uow.notes.count_by_status(SCOPE) == {"active": len(DARK_MODE_NOTES)}

    if failure == "server_error":
        # The endpoint answers again (a model that declines to fuse, and finds no topic to
        # settle): work was judged.
        llm_stub.set_handler(answering_model)
        dream(app, "run", "--agent", "agent-1", "--user", "u1", "--force", code=0, **env)
        latest = json.loads(dream(app, "runs", "list", "--json").stdout)[0]
        assert "model_unavailable" not in latest["totals"]["flags"], latest


def test_undoing_a_blocked_run_never_makes_the_blocked_counter_go_back(
    app: App, api: TestClient
) -> None:
    """`dream_runs_blocked_total` is a Prometheus counter, but it counted the runs whose status
    is blocked *now*: undoing a blocked run took it from 1 to 0, which Prometheus reads as a
    counter reset (``increase()`` then reports the whole count again, and a "runs blocked"
    alert fires). It counts the runs that ended blocked, an undone one included."""
    dream(app, "entities", "import", "-", stdin=jsonl(ENTITIES))
    dream(app, "notes", "import", "-", stdin=jsonl(ORPHAN_HEAVY))
    ran = dream(app, "run", "--agent", "agent-1", "--user", "u1", "--force", "--phase", "prune",
                code=BLOCKED)
    run_id = ran.stdout.split()[1]
    assert "dream_runs_blocked_total 1" in _metrics(api).splitlines()
    dream(app, "undo", run_id)
    body = _metrics(api).splitlines()
    assert 'dream_runs{status="undone"} 1' in body
    assert "dream_runs_blocked_total 1" in body
