"""R21: note text never reaches logs or broker messages.

A canary word sits in every note. A full run (the scripted model merges a cluster, so the canary
is in prompts, replies, the fused note and step records) with one phase raising an exception that
quotes the prompt must leave the canary in the database only — not in any rendered structlog
line, stdlib log record, captured stdout/stderr, or the failed step's error.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from tests.support.factories import NOW, add_notes, days_ago
from worker.app import App
from worker.domain.types import Scope
from worker.llm.fake import FakeLLM, FakeRule
from worker.logging import configure_logging
from worker.reporting import run_tree
from worker.runs import service
from worker.safety.scrub import MASK, scrub

CANARY = "quokkacanary4417"
SCOPE = Scope("agent-leak", "u-leak")
DARK = [
    "User prefers dark mode in the code editor",
    "User prefers dark mode in the editor at night",
    "User prefers dark mode in the code editor and terminal",
    "User prefers the dark mode theme in the code editor",
    "User likes dark mode in the code editor",
]
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
    """Each word an error message shares with a note (3+ letters, or any number) is masked,
    neighbouring masks collapse; other text is kept so the error stays useful."""
    notes = [f"User likes {CANARY} tea", "Budget is 1234 euros", "Pay the rent"]
    assert scrub(message, notes) == expected
