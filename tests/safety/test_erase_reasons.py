"""A judge's reason about an erased note goes with it: the model retells a note in its own words
("the user moved to Alexanderplatz"), which no quote of the note's text matches, and the worker
wrote that reason into the comments of the notes it kept and into their operation log. Through
the CLI with the real `openai` client against the local stub model; SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.safety.test_erase_survivors import _cli
from tests.support.factories import DARK_MODE_NOTES, add_notes, days_ago
from tests.support.llm_stub import LLMStub, StubRequest
from tests.support.safety import all_rows_text, note_states
from tests.support.topic_judge import prompt_topics
from worker.app import App

DETAIL = "Alexanderplatz"  # a word of the erased note the model's reasons retell
RETOLD = f"the newer note says the user moved near {DETAIL} in Berlin"


def _conflict(req: StubRequest) -> dict[str, Any]:
    """Every topic one attribute whose notes each hold their own value, with a reason that
    retells the erased note in other words."""
    return {"topics": [
        {"topic": t["topic"], "attributes": [
            {"name": "home city", "confidence": 0.95, "reason": RETOLD,
             "values": [{"notes": [n["alias"]]} for n in t["notes"]]}]}
        for t in prompt_topics(req.user)]}


def _dream(app: App, monkeypatch: pytest.MonkeyPatch, stub: LLMStub, phase: str) -> None:
    out = _cli(app, monkeypatch, "run", "--agent", "agent-1", "--user", "u1", "--force",
               "--phase", phase, stub=stub)
    assert out.exit_code == 0, out.output


def _erase(app: App, monkeypatch: pytest.MonkeyPatch, *subject: str) -> str:
    out = _cli(app, monkeypatch, "erase", *subject, "--yes")
    assert out.exit_code == 0, out.output
    return out.output


@pytest.mark.parametrize("protection, status, kept", [
    # The older note loses: superseded by the erased one, kept retired for review.
    ("standard", "revoked", "[Contradiction resolved: superseded by [erased note]]"),
    # The older note is protected: both were kept and flagged against each other.
    ("protected", "active", "[Contradiction flagged for review: conflicts with [erased note]]"),
])
def test_a_conflict_reason_retelling_the_erased_note_is_erased_with_it(
        app: App, llm_stub: LLMStub, monkeypatch: pytest.MonkeyPatch,
        protection: str, status: str, kept: str) -> None:
    """Before: `dream erase --note new` left "[Contradiction resolved: superseded by [erased
    note]. the newer note says the user moved near Alexanderplatz in Berlin]" on ``old`` and in
    its operation-log rows (the contradictions run's and the erase's own). Now the line keeps
    what happened and loses the reason; the note keeps its state and the erasure's comment."""
    add_notes(app, {"id": "old", "user_id": "u1", "content": "User lives in Paris",
                    "created_at": days_ago(30), "protection": protection},
              {"id": "new", "user_id": "u1", "created_at": days_ago(2),
               "content": f"User lives in Berlin near {DETAIL}"})
    llm_stub.set_handler(_conflict)
    _dream(app, monkeypatch, llm_stub, "contradictions")
    assert RETOLD in (note_states(app)["old"]["comments"] or "")

    _erase(app, monkeypatch, "--note", "new")
    assert DETAIL not in all_rows_text(app)
    old = note_states(app)["old"]
    assert old["status"] == status
    assert old["comments"].split("\n")[0] == kept


def _fuse_with_a_reason(req: StubRequest) -> dict[str, Any]:
    """Fuses the cluster into its first note's text (n0's detail left out) and says why in
    words of its own about the note that carries the detail."""
    start = req.user.index("[")
    notes, _ = json.JSONDecoder().raw_decode(req.user[start:])
    plain = [n for n in notes if DETAIL not in n["content"]]
    return {"should_consolidate": True, "content": plain[0]["content"],
            "type": "Preference", "source_ids": [n["alias"] for n in notes],
            "reason": f"one note adds that the user codes near {DETAIL}; same preference"}


def test_a_merge_reason_retelling_the_erased_source_leaves_the_restored_notes(
        app: App, llm_stub: LLMStub, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: erasing conversation c0 restored n1..n3 with "Consolidated into [erased note]:
    one note adds that the user codes near Alexanderplatz; same preference" as their comment.
    Now "Consolidated into [erased note]" and the restoration's line only."""
    texts = [f"{DARK_MODE_NOTES[0]} near {DETAIL}", *DARK_MODE_NOTES[1:4]]
    add_notes(app, *({"id": f"n{k}", "user_id": "u1", "type": "Preference", "content": t,
                      "source_conversation_id": f"c{k}", "created_at": days_ago(10 - k)}
                     for k, t in enumerate(texts)))
    llm_stub.set_handler(_fuse_with_a_reason)
    _dream(app, monkeypatch, llm_stub, "consolidate")
    assert {s["status"] for k, s in note_states(app).items() if k.startswith("n")} == {"revoked"}

    output = _erase(app, monkeypatch, "--conversation", "c0")
    assert "restored note n1" in output
    assert DETAIL not in all_rows_text(app)
    for k in (1, 2, 3):
        assert note_states(app)[f"n{k}"]["comments"].split("\n")[0] == \
            "Consolidated into [erased note]"
