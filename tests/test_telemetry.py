"""OpenTelemetry spans of a real run (the SDK's in-memory exporter; the real `openai` client
against the local stub model): one run span, a span per phase, a GenAI `chat` span per model
call, with ids, model names and token counts only, never note or prompt text. Also: the OTEL_*
variables configure export in a real `dream` process (with SQLAlchemy spans), Celery tasks are
traced under a real worker, and without the extra everything is a no-op."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.sdk.trace.sampling import (  # noqa: E402
    ALWAYS_OFF,
    ALWAYS_ON,
    Sampler,
    SamplingResult,
)
from opentelemetry.trace import SpanKind  # noqa: E402

from tests.support.factories import DARK_MODE_NOTES, NOW, add_notes, add_sessions  # noqa: E402
from tests.support.llm_stub import LLMStub  # noqa: E402
from tests.support.services import redis_url  # noqa: E402
from worker.app import App  # noqa: E402
from worker.domain.types import PHASES, Scope  # noqa: E402
from worker.llm.fake import FakeLLM, FakeRule  # noqa: E402
from worker.llm.openai_compat import OpenAICompatibleLLM  # noqa: E402
from worker.reporting import list_runs, run_tree  # noqa: E402
from worker.runs import service  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DREAM = str(Path(sys.executable).with_name("dream"))
CANARY = "Quetzalcoatl-7731"
FUSED = "User prefers dark mode in the code editor and terminal"


class _WhileTesting(Sampler):
    """Records spans only while this module runs: a global provider cannot be unset, and the
    tests after this module should not pay for spans nobody reads."""

    on = True

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return (ALWAYS_ON if self.on else ALWAYS_OFF).should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return "WhileTesting"


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider with an in-memory exporter (a provider is set only once)."""
    sampler = _WhileTesting()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider(sampler=sampler)
        trace.set_tracer_provider(provider)
    exported = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    yield exported
    sampler.on = False
    exported.shutdown()


def _notes() -> list[dict[str, Any]]:
    notes = [{"id": f"d{k}", "user_id": "u1", "type": "Preference", "content": text}
             for k, text in enumerate(DARK_MODE_NOTES)]
    notes.append({"id": "c1", "user_id": "u1", "content": f"The vault code word is {CANARY}"})
    return notes


def _attribute_text(spans: list[ReadableSpan]) -> str:
    return json.dumps([{k: str(v) for k, v in (s.attributes or {}).items()} | {"name": s.name}
                       for s in spans])


def _int_attribute(span: ReadableSpan, key: str) -> int:
    """A span's numeric attribute (``key`` must be set) as an int."""
    value = (span.attributes or {})[key]
    assert isinstance(value, (int, float, str)), value
    return int(value)


def test_run_phase_and_model_call_spans_follow_the_genai_conventions(
    app: App, llm_stub: LLMStub, exporter: InMemorySpanExporter,
) -> None:
    """A consolidating run gives one `update_memory` run span, four phase spans under it, and a
    CLIENT `chat stub-model` span under the consolidate phase for each model call, carrying
    gen_ai.operation.name, provider/system, request and response model and the token usage the
    run recorded; no span carries note text, prompt text or an exception event."""
    add_notes(app, *_notes())
    llm_stub.set_handler(FakeLLM(rules=[FakeRule(prompt="consolidate", reply={
        "should_consolidate": True, "content": FUSED, "type": "Preference",
        "source_ids": "$aliases", "reason": "same editor preference"})]))
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=1)
    # The consolidation calls are what this traces; the script has no contradictions answer
    # for the small scope asked about whole, nor for two notes sharing a rare word.
    app.settings.contradictions.small_scope_notes = 0
    app.settings.contradictions.term_max_notes = 0
    exporter.clear()
    run_id = service.create_run(app, Scope("agent-1", "u1"), force=True, clock=NOW)
    assert run_id is not None
    assert service.execute_run(app, run_id) == "succeeded"
    spans = [s for s in exporter.get_finished_spans()
             if (s.attributes or {}).get("dream.run_id") == run_id or s.name.startswith("chat ")]

    (run,) = [s for s in spans if s.name == "update_memory dream"]
    assert run.attributes is not None and run.attributes["gen_ai.operation.name"] == "update_memory"
    assert run.attributes["dream.run.status"] == "succeeded"
    phases = {s.attributes["dream.phase"]: s for s in spans
              if s.attributes and s.name.startswith("dream.phase ")}
    assert list(phases) == list(PHASES)
    assert run.context is not None
    for span in phases.values():
        assert span.parent is not None and span.parent.span_id == run.context.span_id
        assert span.attributes is not None
        assert span.attributes["gen_ai.memory.store.id"] == Scope("agent-1", "u1").key
    consolidate = phases["consolidate"]
    assert consolidate.attributes is not None and consolidate.context is not None
    assert consolidate.attributes["dream.phase.status"] == "succeeded"
    assert consolidate.attributes["dream.counter.clusters_merged"] == 1

    calls = [s for s in spans if s.name.startswith("chat ")]
    assert len(calls) == len(llm_stub.chat_requests()) >= 1
    tree = run_tree(app, run_id)
    parent = next(s for s in tree["steps"] if s["phase"] == "consolidate")
    for call in calls:
        attrs = call.attributes or {}
        assert call.name == "chat stub-model" and call.kind is SpanKind.CLIENT
        assert call.parent is not None and call.parent.span_id == consolidate.context.span_id
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == attrs["gen_ai.system"] == "openai"
        assert attrs["gen_ai.request.model"] == attrs["gen_ai.response.model"] == "stub-model"
        assert attrs["dream.prompt.name"] == "consolidate"
    assert sum(_int_attribute(c, "gen_ai.usage.input_tokens") for c in calls) == \
        parent["tokens_in"] > 0
    assert sum(_int_attribute(c, "gen_ai.usage.output_tokens") for c in calls) == \
        parent["tokens_out"] > 0

    text = _attribute_text(spans)
    for note in _notes():
        assert note["content"] not in text
    assert CANARY not in text and "dark mode" not in text and FUSED not in text
    assert all(not s.events for s in spans)  # no exception messages, no prompt events


def test_a_provider_batch_is_one_chat_span_with_its_usage(
    app: App, llm_stub: LLMStub, exporter: InMemorySpanExporter,
) -> None:
    """DREAM_LLM_BATCH: the consolidate phase's batch is one CLIENT `chat stub-model` span under
    the phase span, naming the batch id and carrying the usage of its output file; no text."""
    add_notes(app, *_notes())
    llm_stub.set_handler(FakeLLM(rules=[FakeRule(prompt="consolidate", reply={
        "should_consolidate": True, "content": FUSED, "type": "Preference",
        "source_ids": "$aliases", "reason": "same editor preference"})]))
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=1)
    app.settings.llm_batch, app.settings.llm_batch_poll = True, 0.05
    exporter.clear()
    run_id = service.create_run(app, Scope("agent-1", "u1"), force=True, clock=NOW,
                                phases=["consolidate"])
    assert run_id is not None
    assert service.execute_run(app, run_id) == "succeeded"
    spans = exporter.get_finished_spans()
    (phase,) = [s for s in spans if s.name == "dream.phase consolidate"]
    (call,) = [s for s in spans if s.name.startswith("chat ")]
    attrs = call.attributes or {}
    assert call.kind is SpanKind.CLIENT and phase.context is not None
    assert call.parent is not None and call.parent.span_id == phase.context.span_id
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["dream.batch.id"] in llm_stub.batches.batches
    assert attrs["dream.batch.status"] == "completed" and attrs["dream.batch.answered"] == 1
    step = next(s for s in run_tree(app, run_id)["steps"] if s["phase"] == "consolidate")
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (
        step["tokens_in"], step["tokens_out"]) != (0, 0)
    text = _attribute_text(list(spans))
    assert CANARY not in text and "dark mode" not in text and FUSED not in text


@pytest.mark.parametrize(("broken", "error_type", "status"), [
    ("expired", "batch_expired", "expired"),
    ("failed", "batch_failed", "failed"),
    ("unchecked", "LLMError", "unchecked"),  # retrieve answers HTTP 200 with no batch
])
def test_a_batch_that_answered_nothing_is_an_error_span(
    app: App, llm_stub: LLMStub, exporter: InMemorySpanExporter, broken: str, error_type: str,
    status: str,
) -> None:
    """A provider batch that expired or failed, or one that could not be checked, is a failed
    model call: its chat span has error.type and status ERROR, as the README's table says
    (before: status UNSET and no error.type, and no span at all for the unchecked one)."""
    from tests.support.llm_stub_batches import RawAnswer

    add_notes(app, *_notes())
    llm_stub.set_handler(lambda req: {"should_consolidate": False, "reason": "apart"})
    if broken == "unchecked":
        llm_stub.batches.garbage["retrieve"] = RawAnswer(b"<html>proxy</html>", "text/html")
    else:
        llm_stub.batches.finish_as = broken
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)
    app.settings.llm_batch, app.settings.llm_batch_poll = True, 0.05
    exporter.clear()
    run_id = service.create_run(app, Scope("agent-1", "u1"), force=True, clock=NOW,
                                phases=["consolidate"])
    assert run_id is not None
    service.execute_run(app, run_id)
    (call,) = [s for s in exporter.get_finished_spans() if s.name == "chat stub-model"]
    attrs = call.attributes or {}
    assert call.status.status_code.name == "ERROR" and attrs["error.type"] == error_type
    assert attrs["dream.batch.status"] == status and attrs["dream.batch.answered"] == 0
    assert not call.events and "proxy" not in (call.status.description or "")


@pytest.mark.parametrize("how", ["given_up", "wait_out"])
def test_a_batch_this_run_stops_waiting_for_is_an_error_span(
    app: App, llm_stub: LLMStub, exporter: InMemorySpanExporter, how: str,
) -> None:
    """A batch still unfinished 25 h after it was submitted (given up under Celery), or past
    DREAM_LLM_BATCH_WAIT in-process, is released and its calls failed: one chat span with
    error.type (``batch_given_up``, ``batch_wait_out``), status ERROR and the status the
    provider last gave (before: no span at all, unlike an expired or failed batch)."""
    from datetime import timedelta

    from sqlalchemy import update

    from worker.clock import utcnow
    from worker.llm.batch import reschedule_while_pending
    from worker.store.models import RunStepRow

    add_notes(app, *_notes())
    llm_stub.set_handler(lambda req: {"should_consolidate": False, "reason": "apart"})
    llm_stub.batches.polls = 10_000
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)
    app.settings.llm_batch, app.settings.llm_batch_poll = True, 0.05
    app.settings.llm_batch_wait = 0.2
    exporter.clear()
    run_id = service.create_run(app, Scope("agent-1", "u1"), force=True, clock=NOW,
                                phases=["consolidate"])
    assert run_id is not None
    if how == "wait_out":
        service.execute_run(app, run_id)
    else:
        with reschedule_while_pending():
            assert service.execute_run_task(app, run_id).retry_after is not None
        with app.uow() as uow:  # submitted a day and a bit ago
            uow.session.execute(update(RunStepRow).where(
                RunStepRow.run_id == run_id, RunStepRow.name.startswith("llm batch ")).values(
                started_at=utcnow() - timedelta(hours=25, minutes=1)))
            uow.commit()
        with reschedule_while_pending():
            assert service.execute_run_task(app, run_id).retry_after is None
    (call,) = [s for s in exporter.get_finished_spans() if s.name == "chat stub-model"]
    attrs = call.attributes or {}
    assert call.status.status_code.name == "ERROR" and attrs["error.type"] == f"batch_{how}"
    assert attrs["dream.batch.status"] == "in_progress" and attrs["dream.batch.answered"] == 0
    assert attrs["dream.batch.id"] in llm_stub.batches.batches and not call.events


def test_a_failing_model_call_is_an_error_span_by_type_only(
    app: App, llm_stub: LLMStub, exporter: InMemorySpanExporter,
) -> None:
    """A model endpoint answering 401 marks its chat span ERROR with error.type; the message
    (which could quote anything) is not recorded, and the phase still finishes (R6 holds)."""
    from tests.support.llm_stub import StubResponse

    add_notes(app, *_notes())
    llm_stub.set_handler(lambda req: StubResponse.error(401))
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)
    exporter.clear()
    run_id = service.create_run(app, Scope("agent-1", "u1"), force=True, clock=NOW,
                                phases=["consolidate"])
    assert run_id is not None
    service.execute_run(app, run_id)
    calls = [s for s in exporter.get_finished_spans() if s.name == "chat stub-model"]
    assert calls
    for call in calls:
        assert call.status.status_code.name == "ERROR"
        assert (call.attributes or {})["error.type"] == "LLMError"
        assert not call.events and "credentials" not in (call.status.description or "")


def _phases_and_their_tasks_exported(spans: list[dict[str, Any]]) -> bool:
    """Every phase span is out, and the span of the task around each (it ends later: the
    archive task finalizes the run after its phase)."""
    ids = {s["context"]["span_id"] for s in spans}
    phases = [s for s in spans if s["name"].startswith("dream.phase ")]
    return len(phases) >= len(PHASES) and all(s["parent_id"] in ids for s in phases)


def _console_spans(output: str) -> list[dict[str, Any]]:
    """The JSON objects ConsoleSpanExporter printed (one pretty-printed object per span)."""
    decoder = json.JSONDecoder()
    spans, i = [], 0
    while (i := output.find('{\n    "name"', i)) >= 0:
        obj, end = decoder.raw_decode(output, i)
        spans.append(obj)
        i = end
    return spans


def test_otel_variables_configure_export_from_a_real_dream_process(tmp_path: Path) -> None:
    """`dream run` with OTEL_TRACES_EXPORTER=console and OTEL_SERVICE_NAME exports its run, phase
    and SQLAlchemy spans under that service name; with OTEL_SDK_DISABLED=true nothing is exported."""
    url = f"sqlite:///{tmp_path / 'd.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAM_", "OTEL_"))}
    env |= {"DREAM_DATABASE_URL": url, "DREAM_LOG_LEVEL": "WARNING", "DREAM_LLM_PROVIDER": "none"}
    notes = "\n".join(json.dumps({"agent_id": "otel-a", "content": f"{CANARY} fact {i}"})
                      for i in range(3))
    for args, stdin in ((["db", "upgrade"], None), (["notes", "import", "-"], notes)):
        subprocess.run([DREAM, *args], env=env, input=stdin, text=True, check=True,
                       capture_output=True, timeout=60)
    traced = subprocess.run(
        [DREAM, "run", "--agent", "otel-a", "--force"], capture_output=True, text=True,
        timeout=120, env=env | {"OTEL_TRACES_EXPORTER": "console",
                                "OTEL_SERVICE_NAME": "dream-test"})
    assert traced.returncode == 0, traced.stderr
    spans = _console_spans(traced.stderr)
    names = [s["name"] for s in spans]
    assert "update_memory dream" in names
    assert {f"dream.phase {p}" for p in PHASES} <= set(names)
    sql = [s for s in spans if s["attributes"].get("db.system") == "sqlite"
           or s["attributes"].get("db.system.name") == "sqlite"]
    assert sql, names  # SQLAlchemy instrumentation of this process's engine
    assert {s["resource"]["attributes"]["service.name"] for s in spans} == {"dream-test"}
    assert CANARY not in traced.stdout + traced.stderr  # ids, names, counts only
    quiet = subprocess.run(
        [DREAM, "run", "--agent", "otel-a", "--force"], capture_output=True, text=True,
        timeout=120, env=env | {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"})
    assert quiet.returncode == 0 and _console_spans(quiet.stderr) == []


def test_console_spans_leave_a_commands_stdout_to_its_answer(tmp_path: Path) -> None:
    """With OTEL_TRACES_EXPORTER=console, `dream notes export > FILE` wrote the spans between
    the JSONL lines, and the file no longer imported; the spans go to stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAM_", "OTEL_"))}
    env |= {"DREAM_DATABASE_URL": f"sqlite:///{tmp_path / 'e.db'}", "DREAM_LOG_LEVEL": "WARNING",
            "OTEL_TRACES_EXPORTER": "console"}
    for args in (["db", "upgrade"], ["notes", "add", "--agent", "otel-e", "--content", "x y z"]):
        subprocess.run([DREAM, *args], env=env, check=True, capture_output=True, timeout=60)
    exported = subprocess.run([DREAM, "notes", "export"], capture_output=True, text=True,
                              timeout=60, env=env)
    assert exported.returncode == 0, exported.stderr
    assert [json.loads(line)["content"] for line in exported.stdout.splitlines()] == ["x y z"]
    assert _console_spans(exported.stderr)  # the spans are still exported


def test_spans_are_exported_as_dream_worker_unless_otel_names_the_service(
    tmp_path: Path,
) -> None:
    """Without OTEL_SERVICE_NAME (or a service.name in OTEL_RESOURCE_ATTRIBUTES) a real `dream
    run` exports its spans as service dream-worker, the README's default (before: the SDK's own
    unknown_service:python won); OTEL_RESOURCE_ATTRIBUTES still names it when it says so."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAM_", "OTEL_"))}
    env |= {"DREAM_DATABASE_URL": f"sqlite:///{tmp_path / 's.db'}", "DREAM_LOG_LEVEL": "WARNING",
            "DREAM_LLM_PROVIDER": "none", "OTEL_TRACES_EXPORTER": "console"}
    for args in (["db", "upgrade"], ["notes", "add", "--agent", "otel-s", "--content", "x y z"]):
        subprocess.run([DREAM, *args], env=env, check=True, capture_output=True, timeout=60)
    for extra, name in (({}, "dream-worker"),
                        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=host-memory"},
                         "host-memory")):
        traced = subprocess.run([DREAM, "run", "--agent", "otel-s", "--force"],
                                capture_output=True, text=True, timeout=120, env=env | extra)
        assert traced.returncode == 0, traced.stderr
        spans = _console_spans(traced.stderr)
        assert spans and {s["resource"]["attributes"]["service.name"] for s in spans} == {name}


def test_without_the_extra_telemetry_is_a_no_op(tmp_path: Path) -> None:
    """With opentelemetry not importable, a whole CLI dream run works and the helpers do nothing."""
    script = f"""
import sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
from click.testing import CliRunner
from worker import telemetry
from worker.cli import main
assert telemetry.trace is None
env = {{"DREAM_DATABASE_URL": "sqlite:///{tmp_path / 'n.db'}", "OTEL_TRACES_EXPORTER": "console",
       "DREAM_LOG_LEVEL": "WARNING"}}
for args in (["db", "upgrade"], ["notes", "add", "--agent", "a", "--content", "x y z"],
             ["run", "--agent", "a", "--force"]):
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
with telemetry.run_span("r") as span:
    span.set(a=1)
import re
print("ok", re.search(r"^run \\S+ (\\w+)", result.output, re.M).group(1))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "ok succeeded"


def test_without_a_provider_no_span_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the API but no SDK provider (the default), a phase span starts nothing and the
    caller's span stays current; a provider installed later is used from the next span on."""
    from worker import telemetry

    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    caller = trace.get_current_span()
    with telemetry.phase_span("r", "consolidate", "k") as handle:
        assert handle.span is None and trace.get_current_span() is caller
        handle.phase_result("succeeded", {"notes": 3})  # records nothing, fails nothing
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    with telemetry.phase_span("r", "consolidate", "k") as handle:
        assert handle.span is not None
    assert [s.name for s in exporter.get_finished_spans()] == ["dream.phase consolidate"]


@pytest.mark.celery
@pytest.mark.redis
def test_celery_tasks_and_phases_are_traced_under_a_real_worker(tmp_path: Path) -> None:
    """A real Celery worker with OTEL_TRACES_EXPORTER=console: each phase task has a Celery
    `run/dream.<phase>` span (the Celery instrumentation) with the phase span as its child."""
    broker = redis_url().rsplit("/", 1)[0] + "/13"
    queue = f"dream-otel-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'c.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAM_", "OTEL_"))}
    env |= {"DREAM_DATABASE_URL": url, "DREAM_BROKER_URL": broker, "DREAM_CELERY_QUEUE": queue,
            "DREAM_LLM_PROVIDER": "none", "DREAM_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1",
            "DREAM_CELERY_TASKS": "phase"}
    subprocess.run([DREAM, "db", "upgrade"], env=env, check=True, capture_output=True, timeout=60)
    log = tmp_path / "worker.log"
    with open(log, "ab") as fh:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker", "--pool",
             "prefork", "-c", "1", "-Q", queue, "-n", f"{queue}@%h", "--without-gossip",
             "--without-mingle", "--loglevel", "WARNING"],
            cwd=ROOT, env=env | {"OTEL_TRACES_EXPORTER": "console",
                                 "OTEL_BSP_SCHEDULE_DELAY": "200"},
            stdout=fh, stderr=subprocess.STDOUT)
    try:
        from worker.app import build_app
        from worker.config import Settings

        app = build_app(Settings(database_url=url))
        add_notes(app, {"agent_id": "otel-c", "content": "Standup is at nine"})
        add_sessions(app, 1, agent_id="otel-c")
        queued = subprocess.run([DREAM, "run", "--agent", "otel-c", "--force", "--via-celery"],
                                env=env, capture_output=True, text=True, timeout=60)
        assert queued.returncode == 0, queued.stderr
        run_id = queued.stdout.split()[1]
        deadline = time.monotonic() + 60
        while run_tree(app, run_id)["status"] not in ("succeeded", "partial", "failed"):
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        assert [r["status"] for r in list_runs(app, scope=Scope("otel-c"))] == ["succeeded"]
        spans: list[dict[str, Any]] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:  # the batch processor exports every 200 ms
            spans = _console_spans(log.read_text())
            if _phases_and_their_tasks_exported(spans):  # a task's span ends after its phase's
                break
            time.sleep(0.3)
        app.dispose()
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        import redis

        client = redis.Redis.from_url(broker)
        client.delete(queue)
        client.close()
    by_id = {s["context"]["span_id"]: s for s in spans}
    for phase in PHASES:
        (span,) = [s for s in spans if s["name"] == f"dream.phase {phase}"]
        task = by_id[span["parent_id"]]
        assert task["name"] == f"run/dream.{phase}" and task["kind"] == "SpanKind.CONSUMER"
    assert "Standup is at nine" not in log.read_text()


@pytest.mark.parametrize(("variable", "value"), [
    ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),  # the SDK raises: every command ended in a traceback
    ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "abc"),
    ("OTEL_BSP_SCHEDULE_DELAY", "abc"),  # the SDK defaults it, printing a traceback beneath
])
def test_a_bad_otel_value_is_one_line_and_the_command_still_runs(
        tmp_path: Path, variable: str, value: str) -> None:
    """Tracing never stops a command: a value the SDK refuses leaves tracing off with one
    warning line naming it; one it defaults is one line too (found by the adversarial pass:
    `dream db upgrade` itself failed, so no store could be set up)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAM_", "OTEL_"))}
    env |= {"DREAM_DATABASE_URL": f"sqlite:///{tmp_path / 'b.db'}",
            "OTEL_TRACES_EXPORTER": "console", variable: value}
    done = subprocess.run([DREAM, "db", "upgrade"], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    said = [line for line in done.stderr.splitlines() if variable in line or "OTEL_" in line
            or "config_invalid" in line]
    assert len(said) == 1, done.stderr


def test_an_unreachable_otlp_endpoint_is_one_line_naming_it(tmp_path: Path) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT that nobody answers: the command still answers and exits 0,
    and stderr says so in one line naming the endpoint (before: a "Transient error ...
    retrying" line per retry and a last "Failed to export", 8-10 s after the answer)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DREAM_", "OTEL_"))}
    env |= {"DREAM_DATABASE_URL": f"sqlite:///{tmp_path / 'u.db'}", "DREAM_LOG_LEVEL": "WARNING"}
    subprocess.run([DREAM, "db", "upgrade"], env=env, check=True, capture_output=True,
                   timeout=60)
    done = subprocess.run([DREAM, "runs", "list"], capture_output=True, text=True, timeout=60,
                          env=env | {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert done.returncode == 0, done.stderr
    (line,) = done.stderr.splitlines()
    assert "spans not exported: http://127.0.0.1:9/v1/traces did not answer" in line


def test_the_otlp_export_and_the_exit_flush_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """An OTLP export (its retries included) gets EXPORT_SECONDS unless the SDK's own timeout
    variable says otherwise, and the flush at exit stops waiting after that long even while
    the exporter still works (its provider's shutdown is left running, the process ends)."""
    import threading

    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from worker import telemetry

    for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    assert telemetry.export_seconds() == telemetry.EXPORT_SECONDS <= 2
    added: list[Any] = []
    telemetry._add_exporters(type("P", (), {"add_span_processor": added.append})(), "otlp")
    assert len(added) == 1 and isinstance(added[0], BatchSpanProcessor)
    processor: Any = added[0]  # the SDK's private parts: the exporter's client and its timeout
    try:
        assert (processor._batch_processor._exporter._client._timeout
                == telemetry.EXPORT_SECONDS)
    finally:
        processor.shutdown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "7")
    assert telemetry.export_seconds() == 7.0

    release = threading.Event()

    class Stuck:
        """A provider whose shutdown waits on an exporter that never answers."""

        def shutdown(self) -> None:
            release.wait(60)

    telemetry.shutdown_within(Stuck(), 0.01)  # returns with the shutdown still running
    (ending,) = [t for t in threading.enumerate() if t.name == "otel-shutdown"]
    assert ending.is_alive() and ending.daemon  # never holds the interpreter's exit
    release.set()
    ending.join()


def test_an_export_problem_is_said_again_an_hour_later_not_on_every_retry() -> None:
    """A worker runs for weeks: the collector down on Monday and again on Friday is two lines
    on stderr, the retries of one outage one line (it said the first only, per process)."""
    from worker import telemetry

    problem = telemetry._ExportProblem()

    problem.endpoint = "http://collector:4318/v1/traces"
    shown: list[str] = []

    def said(message: str, at: float) -> bool:
        record = logging.LogRecord("opentelemetry", logging.WARNING, __file__, 1, message,
                                   None, None)
        record.created = at
        passed = problem.filter(record)
        if passed:
            shown.append(record.getMessage())
        return passed

    assert said("Transient error Service Unavailable, retrying in 1.1s", 1000.0)
    assert shown == ["spans not exported: http://collector:4318/v1/traces did not answer; "
                     "check OTEL_EXPORTER_OTLP_ENDPOINT and the collector"]
    assert not said("Transient error Service Unavailable, retrying in 2.3s", 1001.0)
    assert not said("Failed to export spans batch", 1000.0 + problem.QUIET_SECONDS - 1)
    assert said("Failed to export spans batch", 1000.0 + problem.QUIET_SECONDS + 1)
    assert said("Invalid type NoneType for attribute", 1002.0)  # anything else passes
