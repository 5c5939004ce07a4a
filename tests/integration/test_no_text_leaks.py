"""R21: note text never reaches logs or broker messages.

A canary word sits in every note. A full run (the scripted model merges a cluster, so the canary
is in prompts, replies, the fused note and step records) with one phase raising an exception that
quotes the prompt must leave the canary in the database only — not in any rendered structlog
line, stdlib log record, captured stdout/stderr, or the failed step's error.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from tests.conftest import drop_postgres_app, make_postgres_app
from tests.integration.test_celery import ROOT, _events, _stop, _wait_terminal
from tests.support.factories import DARK_MODE_NOTES, NOW, add_notes, days_ago
from tests.support.services import redis_url
from worker.app import App
from worker.domain.types import Scope
from worker.llm.fake import FakeLLM, FakeRule
from worker.logging import configure_logging
from worker.reporting import run_tree
from worker.runs import service
from worker.safety.scrub import MASK, scrub

CANARY = "quokkacanary4417"
SCOPE = Scope("agent-leak", "u-leak")
DARK = DARK_MODE_NOTES
PAIR = ["The team's staging database password rotates every Monday",
        "The team's staging database password rotates every Friday"]
FUSED = f"User prefers dark mode in the code editor and terminal, at night too ({CANARY})"


def canary_notes(scope: Scope = SCOPE) -> list[dict[str, Any]]:
    texts = [f"{t} ({CANARY})" for t in DARK] + [f"{t} ({CANARY})" for t in PAIR]
    return [{"id": f"leak-{scope.agent_id}-{k}", "agent_id": scope.agent_id,
             "user_id": scope.user_id, "type": "Preference", "content": t,
             "created_at": days_ago(30 - k), "access_count": k + 1}
            for k, t in enumerate(texts)]


def leaky_model() -> FakeLLM:
    """Merges the dark-mode cluster; on the contradictions prompt it raises an exception whose
    message quotes the prompt (note text), as a buggy client might."""

    def explode(prompt_name: str, system: str, user: str) -> Any:
        raise RuntimeError(f"client choked on {user[user.find(CANARY) - 60:][:400]!r}")

    return FakeLLM(rules=[
        FakeRule(prompt="consolidate", contains=["code editor"], reply={
            "should_consolidate": True, "content": FUSED, "type": "Preference",
            "source_ids": "$aliases", "reason": "same editor preference"}),
        FakeRule(prompt="contradictions", reply=explode),
    ], default={"should_consolidate": False, "content": "", "type": "Preference",
                "source_ids": [], "reason": "no"})


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The production structlog pipeline (JSON renderer, format_exc_info) into a buffer."""
    old = structlog.get_config()
    buffer = io.StringIO()
    configure_logging("json", "DEBUG")
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(file=buffer))
    try:
        yield buffer
    finally:
        structlog.configure(**old)


def test_r21_no_note_text_in_logs_or_broker_in_process(
    app: App, json_logs: io.StringIO, caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """R21 in process: a full run whose consolidation merges canary notes and whose
    contradictions phase raises with the prompt in the exception: the canary is in the fused
    note (it really flowed through), yet in no JSON log line, stdlib record, stdout/stderr or
    step error; the failed step keeps the exception type and a scrubbed message."""
    caplog.set_level(logging.DEBUG)
    add_notes(app, *canary_notes())
    app.llm = leaky_model()
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW)
    assert run_id is not None
    assert service.execute_run(app, run_id) == "partial"

    tree = run_tree(app, run_id)
    phases = {s["phase"]: s for s in tree["steps"]}
    assert phases["consolidate"]["status"] == "succeeded"
    assert phases["contradictions"]["status"] == "failed"  # the raising path really ran
    error = phases["contradictions"]["error"]
    assert error.startswith("RuntimeError: client choked on") and MASK in error
    with app.uow() as uow:
        stored = [n.content for n in uow.notes.load_scope(
            SCOPE, statuses=("active", "revoked", "archived")).notes]
        step_errors = [s.error or "" for s in uow.runs.steps(run_id)]
    assert FUSED in stored  # the canary flowed through the model and into memory
    # (prune then archives everything: the scope has no entities, its agent is orphaned)
    assert not any(CANARY in e for e in step_errors)

    logs = json_logs.getvalue()
    events = [json.loads(line) for line in logs.splitlines() if line.strip()]
    failed = [e for e in events if e["event"] == "phase.failed"]
    assert failed and failed[0]["error_type"] == "RuntimeError" and failed[0]["frames"]
    assert any(e["event"] == "phase.finished" for e in events)
    out, err = capfd.readouterr()
    records = "\n".join(f"{r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records)
    for where, text in {"structlog": logs, "logging": caplog.text + records,
                        "stdout": out, "stderr": err}.items():
        assert CANARY not in text, where
        for line in DARK + PAIR:
            assert line not in text, (where, line)


@pytest.mark.parametrize(("message", "expected"), [
    ("UNIQUE constraint failed: notes.id", "UNIQUE constraint failed: notes.id"),
    (f"bad row ('n1', 'User likes {CANARY} tea')", "bad row ('n1', '[note text]')"),
    (f"{CANARY}", MASK),
    ("value 4417 is odd", "value 4417 is odd"),
    ("value 1234 too big", "value [note text] too big"),
])
def test_r21_error_messages_are_scrubbed_of_note_words(message: str, expected: str) -> None:
    """What quotes a note is masked (its words in the note's order, with a number or two
    telling words, or a whole note), neighbouring masks collapse; other text is kept so the
    error stays useful (worker.safety.scrub)."""
    notes = [f"User likes {CANARY} tea", "Budget is 1234 euros", "Pay the rent"]
    assert scrub(message, notes) == expected


# ---- through Celery: a real worker subprocess on Redis, every broker command inspected --------
REDIS_DB = 12  # dedicated to this test (test_celery uses 14, the default test URL 15)
_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b"}


def _unescape(arg: str) -> str:
    """One MONITOR argument back to its text (Redis quotes it with sdscatrepr escapes)."""
    out, i = bytearray(), 0
    while i < len(arg):
        if arg[i] == "\\" and i + 1 < len(arg):
            nxt = arg[i + 1]
            if nxt == "x":
                out.append(int(arg[i + 2 : i + 4], 16))
                i += 4
                continue
            out += _ESCAPES.get(nxt, nxt.encode())
            i += 2
            continue
        out += arg[i].encode("latin-1", "replace")
        i += 1
    return out.decode("utf-8", "replace")


def canary_forms(canary: str = CANARY) -> list[str]:
    """The canary as it would appear raw or inside base64 at any of the three byte alignments."""
    raw = canary.encode()
    forms = [canary]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw).decode()
        start = -(-pad * 4 // 3)  # characters that depend on the padding bytes
        end = ((pad + len(raw)) // 3) * 4  # characters that depend on bytes after the canary
        forms.append(encoded[start + 1 : end - 1])
    return forms


class BrokerMonitor(threading.Thread):
    """Redis MONITOR on its own connection: every command (all databases) with its arguments.

    Robust under load: the MONITOR connection never times out (redis-py's default 5 s read
    timeout fired while a slow worker booted, the thread died and the test saw no messages);
    ``ready`` is set only once a probe command came back through MONITOR, so nothing sent after
    ``start`` is missed; ``stop`` waits for its own sentinel, so every command sent before it
    was read (MONITOR streams in order). A thread that died leaves its error in ``error``."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        import redis

        # socket_timeout=None: a quiet broker for many seconds is normal, not a failure.
        self.monitor_client = redis.Redis.from_url(url, socket_timeout=None)
        self.client = redis.Redis.from_url(url)
        self.probe = f"r21-ready-{uuid.uuid4().hex}"
        self.sentinel = f"r21-stop-{uuid.uuid4().hex}"
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        conn = self.monitor_client.connection_pool.get_connection()
        try:
            conn.send_command("MONITOR")  # type: ignore[no-untyped-call]  # redis-py: unannotated
            assert conn.read_response() in (b"OK", "OK")
            while True:
                line = conn.read_response()
                text = line.decode("latin-1") if isinstance(line, bytes) else str(line)
                if self.probe in text:
                    self.ready.set()
                    continue
                if self.sentinel in text:
                    self.stopped.set()
                    return
                self.lines.append(text)
        except BaseException as exc:  # kept for the test to report, not swallowed
            self.error = exc
        finally:
            conn.disconnect()  # type: ignore[no-untyped-call]  # redis-py: unannotated

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Send probes until one is seen through MONITOR (the thread may still be connecting)."""
        deadline = time.monotonic() + timeout
        while not self.ready.is_set():
            assert self.error is None, f"MONITOR failed: {self.error!r}"
            assert time.monotonic() < deadline, "MONITOR never saw its probe"
            self.client.echo(self.probe)
            self.ready.wait(0.5)

    def stop(self, timeout: float = 120.0) -> None:
        """Stop after every command sent so far was read; fail loudly if it could not be."""
        try:
            if self.error is None and self.is_alive():
                self.client.echo(self.sentinel)
            self.join(timeout)
        finally:
            self.client.close()
            self.monitor_client.close()
        assert self.error is None, f"MONITOR failed: {self.error!r}"
        assert self.stopped.is_set(), f"MONITOR did not reach its sentinel within {timeout}s"

    def arguments(self) -> list[str]:
        """Every argument of every command sent to the broker database."""
        out: list[str] = []
        for line in self.lines:
            if f"[{REDIS_DB} " not in line:
                continue
            out.extend(_unescape(a) for a in _ARG.findall(line))
        return out


def _task_messages(arguments: list[str]) -> list[dict[str, Any]]:
    """Kombu envelopes among the arguments, with the body decoded."""
    out = []
    for arg in arguments:
        try:
            msg = json.loads(arg)
        except ValueError:
            continue
        if not isinstance(msg, dict) or "body" not in msg or "headers" not in msg:
            continue
        body = msg["body"]
        if msg.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body).decode()
        out.append({"task": msg["headers"].get("task"), "body": body,
                    "argsrepr": msg["headers"].get("argsrepr")})
    return out


@pytest.mark.celery
@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.parametrize("tasks", ["phase", "run"])
def test_r21_no_note_text_in_logs_or_broker(tmp_path: Path, json_logs: io.StringIO,
                                            tasks: str) -> None:
    """R21 through Celery (a chain of phase tasks, and ``DREAM_CELERY_TASKS=run``'s one run
    task): canary notes, `dream run --via-celery` on a dedicated Redis database,
    a real prefork worker with the scripted model merging them (DEBUG JSON logs). The canary
    reaches the fused note in PostgreSQL, yet appears in no broker command (raw or base64, task
    messages decoded: their only argument is the run id), no worker or producer log line and no
    in-process log line."""
    broker = redis_url().rsplit("/", 1)[0] + f"/{REDIS_DB}"
    queue = f"dream-r21-{uuid.uuid4().hex[:10]}"
    scope = Scope("agent-leak-celery", "u-leak")
    script = tmp_path / "fake-llm.json"
    script.write_text(json.dumps({"model": "fake-r21", "rules": [
        {"prompt": "consolidate", "contains": ["code editor"], "reply": {
            "should_consolidate": True, "content": FUSED, "type": "Preference",
            "source_ids": "$aliases", "reason": "same editor preference"}}],
        "default": {"should_consolidate": False, "content": "", "type": "Preference",
                    "source_ids": [], "reason": "no", "verdicts": []}}))
    app = make_postgres_app()
    env = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
           "DREAM_BROKER_URL": broker, "DREAM_RESULT_BACKEND": broker,
           "DREAM_CELERY_QUEUE": queue, "DREAM_LLM_PROVIDER": "fake",
           "DREAM_FAKE_LLM_SCRIPT": str(script), "DREAM_LOG_FORMAT": "json",
           "DREAM_LOG_LEVEL": "DEBUG", "PYTHONUNBUFFERED": "1", "DREAM_CELERY_TASKS": tasks}
    monitor = BrokerMonitor(broker)
    monitor.start()
    monitor.wait_ready()
    log = tmp_path / "worker.log"
    worker = None
    try:
        add_notes(app, *canary_notes(scope))
        with open(log, "ab") as fh:
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker",
                 "--pool", "prefork", "-c", "1", "-Q", queue, "-n", f"{queue}@%h",
                 "--without-gossip", "--without-mingle", "--loglevel", "DEBUG"],
                cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
        producer = subprocess.run(
            [str(Path(sys.executable).with_name("dream")), "run", "--agent", scope.agent_id,
             "--user", scope.user_id or "", "--force", "--via-celery"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert producer.returncode == 0, producer.stderr
        run_id = producer.stdout.strip().splitlines()[-1].split()[1]
        tree = _wait_terminal(app, run_id, timeout=90)
        assert tree["status"] in ("succeeded", "partial"), tree
        with app.uow() as uow:
            stored = [n.content for n in uow.notes.load_scope(
                scope, statuses=("active", "revoked", "archived")).notes]
        assert FUSED in stored  # the canary went through the worker, the model and the store
    finally:
        if worker is not None:
            assert _stop(worker) == 0, log.read_text()[-3000:]
        monitor.stop()
        import redis

        client = redis.Redis.from_url(broker)
        client.flushdb()
        client.close()
        drop_postgres_app(app)

    arguments = monitor.arguments()
    messages = _task_messages(arguments)
    # The inspection saw the run's task messages (else it proves nothing) ...
    sent = {m["task"] for m in messages}
    assert ({"dream.run"} if tasks == "run" else
            {"dream.consolidate", "dream.contradictions", "dream.prune",
             "dream.archive"}) <= sent, sent
    for m in (m for m in messages if m["task"]):
        args = json.loads(m["body"])[0]
        assert args == [run_id] and m["argsrepr"] in (repr((run_id,)), repr([run_id])), m
    # ... and the worker really logged the run.
    events = _events(log)
    assert any(e["event"] == "phase.finished" and e.get("run_id") == run_id for e in events)
    forms = canary_forms()
    texts = {"broker": "\n".join(arguments + [m["body"] for m in messages]),
             "worker log": log.read_text(encoding="utf-8", errors="replace"),
             "producer": producer.stdout + producer.stderr, "in-process": json_logs.getvalue()}
    for where, text in texts.items():
        for form in forms:
            assert form not in text, (where, form)
        for line in DARK + PAIR:
            assert line not in text, (where, line)


def test_canary_forms_find_base64_at_every_alignment() -> None:
    """The broker check would see the canary base64-encoded at any offset in a message body."""
    forms = canary_forms()
    for prefix in ("", "a", "ab", "abc", '{"note": "'):
        encoded = base64.b64encode((prefix + f"x {CANARY} y").encode()).decode()
        assert any(f in encoded for f in forms[1:]), prefix
    assert not any(f in base64.b64encode(b"nothing to see here").decode() for f in forms)
