"""R29: with redaction on, no e-mail, phone or card number in a note leaves the process.

Every outbound path runs for real: the `openai` client against the local stub model and the
stub's embeddings endpoint (tests/support/llm_stub.py records every request body), for each
phase's prompt, the import and re-embedding paths and the host paths (remember, fuse).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from tests.support.factories import NOW, add_entities, add_notes, days_ago
from tests.support.llm_stub import LLMStub, StubRequest
from tests.support.topic_judge import topic_reply
from worker.app import App
from worker.cli import main
from worker.domain.types import Scope
from worker.embeddings.openai_compat import OpenAICompatibleEmbedder
from worker.embeddings.refresh import ensure_scope_embeddings
from worker.host.fusion import fuse
from worker.host.remember import remember
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.runs import service

SCOPE = Scope("agent-1")
EMAIL = "jane.doe@example.com"
PHONE = "+1 415 555 0199"
CARD = "4111 1111 1111 1111"  # Luhn-valid test number
CANARIES = (EMAIL, PHONE, CARD, "4111111111111111", "4155550199", "jane.doe")


def _leaks(stub: LLMStub) -> list[str]:
    """Canaries found in any request the stub received (chat and embeddings bodies)."""
    sent = "\n".join(json.dumps(r.body, ensure_ascii=False) for r in stub.requests)
    return [c for c in CANARIES if c in sent]


def _prompt_notes(req: StubRequest) -> list[dict[str, Any]]:
    """The notes JSON array as the prompt carried it (consolidate, prune, archive prompts)."""
    start = req.user.index("[")
    notes, _ = json.JSONDecoder().raw_decode(req.user[start:])
    return list(notes)


def _answer(req: StubRequest) -> dict[str, Any]:
    """A well-behaved model: merges a consolidation cluster keeping the note that mentions the
    e-mail placeholder verbatim, calls every pair independent, keeps every reviewed note."""
    if req.prompt_name == "consolidate":
        notes = _prompt_notes(req)
        keep = next((n for n in notes if "[EMAIL_1]" in n["content"]), notes[0])
        return {"should_consolidate": True, "content": keep["content"], "type": "Preference",
                "source_ids": [n["alias"] for n in notes], "reason": "same preference"}
    if req.prompt_name == "contradictions":  # the prompt asks by topic (tests.support.topic_judge)
        return topic_reply(req.user, lambda a, b: "independent", confidence=0.9)
    return {"decisions": [{"id": n["id"], "decision": "keep", "reason": "durable"}
                          for n in _prompt_notes(req)]}


@pytest.fixture
def redacting(app: App, llm_stub: LLMStub) -> App:
    """The app with redaction on, the stub as model and as remote embedder."""
    app.settings.privacy.redact = True
    llm_stub.set_handler(_answer)
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)
    app.embedder = OpenAICompatibleEmbedder(base_url=llm_stub.url, api_key="k", model="emb",
                                            dimensions=app.settings.embedding_dimensions)
    return app


def _run(app: App, phase: str) -> None:
    run_id = service.create_run(app, SCOPE, force=True, phases=[phase], clock=NOW)
    assert run_id is not None
    service.execute_run(app, run_id)


def _consolidate_notes() -> list[dict[str, Any]]:
    texts = ["User prefers dark mode in the code editor",
             f"User prefers dark mode in the code editor, mail {EMAIL}",
             f"User prefers dark mode in the code editor, phone {PHONE}",
             f"User prefers the dark mode theme in the code editor, card {CARD}"]
    return [{"id": f"d{k}", "type": "Preference", "content": t, "created_at": days_ago(10 - k)}
            for k, t in enumerate(texts)]


def test_r29_consolidation_prompt_and_fused_embedding_carry_no_canary(
        redacting: App, llm_stub: LLMStub) -> None:
    """The consolidation prompt shows placeholders; the fused note gets the real address back
    from the placeholder table (not from the model), and its embedding request is redacted."""
    add_notes(redacting, *_consolidate_notes())
    _run(redacting, "consolidate")
    prompts = [r for r in llm_stub.chat_requests() if r.prompt_name == "consolidate"]
    assert prompts and "[EMAIL_1]" in prompts[0].user and "[CARD_1]" in prompts[0].user
    assert _leaks(llm_stub) == []
    with redacting.uow() as uow:
        active = uow.notes.load_scope(SCOPE, ("active",)).notes
    assert [n.content for n in active] == [f"User prefers dark mode in the code editor, mail {EMAIL}"]
    embedded = [r for r in llm_stub.requests if r.path.endswith("/embeddings")]
    assert len(embedded) == 2  # the import, then the fused note
    assert "[EMAIL]" in json.dumps(embedded[-1].body)


def test_r29_contradictions_prompt_carries_no_canary(redacting: App, llm_stub: LLMStub) -> None:
    """The pair prompt (the one that leaked jane.doe@example.com before) is redacted."""
    add_notes(redacting,
              {"id": "a", "content": f"Customer uses metric units for all reports to {EMAIL}",
               "created_at": days_ago(5)},
              {"id": "b", "content": f"Customer uses imperial units for all reports to {EMAIL}",
               "created_at": days_ago(4)})
    _run(redacting, "contradictions")
    assert any(r.prompt_name == "contradictions" for r in llm_stub.chat_requests())
    assert _leaks(llm_stub) == []


def test_r29_prune_review_prompt_carries_no_canary(redacting: App, llm_stub: LLMStub) -> None:
    """prune.review=llm: the notes of a deleted conversation are shown redacted."""
    redacting.settings.prune.review = "llm"
    add_entities(redacting, {"kind": "agent", "id": "agent-1"},
                 {"kind": "conversation", "id": "gone", "status": "deleted"})
    add_notes(redacting, {"id": "p", "content": f"Pays with card {CARD}, mail {EMAIL}",
                          "source_conversation_id": "gone"})
    _run(redacting, "prune")
    assert any(r.prompt_name == "prune" for r in llm_stub.chat_requests())
    assert _leaks(llm_stub) == []


def test_r29_archive_review_prompt_carries_no_canary(redacting: App, llm_stub: LLMStub) -> None:
    """archive.review=llm: a high-importance idle note is shown redacted."""
    redacting.settings.archive.review = "llm"
    add_notes(redacting, {"id": "old", "content": f"Emergency contact {PHONE}, {EMAIL}",
                          "importance": 0.9, "created_at": days_ago(400),
                          "access_count": 1, "last_accessed_at": days_ago(400)})  # read once,
    # long ago: idle, so asked about (a read with no date is never idle)
    _run(redacting, "archive")
    assert any(r.prompt_name == "archive" for r in llm_stub.chat_requests())
    assert _leaks(llm_stub) == []


def test_r29_host_paths_and_reembedding_send_no_canary(redacting: App, llm_stub: LLMStub) -> None:
    """remember, fuse and `embeddings refresh` embed through the same boundary; the notes
    themselves keep the real text (redaction is about what leaves, not what is stored)."""
    redacting.settings.remember.measure = "cosine"
    first = remember(redacting, SCOPE, f"User's billing e-mail is {EMAIL}")
    second = remember(redacting, SCOPE, f"User's phone number is {PHONE} for urgent matters")
    fused = fuse(redacting, [first.id, second.id],
                 f"User's billing e-mail is {EMAIL}; phone {PHONE} for urgent matters")
    with redacting.uow() as uow:
        stored = {n.id: n.content for n in uow.notes.get_many([fused.note["id"]])}
    assert EMAIL in stored[fused.note["id"]]
    redacting.embedder = OpenAICompatibleEmbedder(
        base_url=llm_stub.url, api_key="k", model="emb-2",
        dimensions=redacting.settings.embedding_dimensions)
    assert ensure_scope_embeddings(redacting, SCOPE) >= 1
    embedded = [r for r in llm_stub.requests if r.path.endswith("/embeddings")]
    assert len(embedded) >= 4
    assert _leaks(llm_stub) == []


def test_r29_redaction_off_sends_text_unchanged(app: App, llm_stub: LLMStub) -> None:
    """Control: with redaction off the same prompt does carry the address (the test can fail)."""
    llm_stub.set_handler(_answer)
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)
    add_notes(app, *_consolidate_notes())
    _run(app, "consolidate")
    assert EMAIL in _leaks(llm_stub)


@pytest.mark.parametrize("text, expected", [
    # e-mail, phone, card: masked with numbered placeholders, repeated values share one
    (f"{EMAIL} or {EMAIL}", "[EMAIL_1] or [EMAIL_1]"),
    (f"call {PHONE}", "call [PHONE_1]"),
    (f"card {CARD}", "card [CARD_1]"),
    # dates are facts, not phone numbers; a 16-digit number failing Luhn is not a card
    ("moved on 2024-03-01 at 10:00", "moved on 2024-03-01 at 10:00"),
    # (long digit runs are masked as phone numbers: over-masking is the safe side)
    ("order 1234 5678 9012 3456", "order [PHONE_1]"),
])
def test_outbound_placeholders_round_trip(text: str, expected: str) -> None:
    """What leaves is masked; a reply quoting the placeholders gets the values back."""
    from worker.privacy import Placeholders, outbound_text

    table = Placeholders()
    out = outbound_text(text, redact_pii=True, mask=table.mask)
    assert out == expected
    assert table.restore({"content": [out]}) == {"content": [text]}


def test_r29_black_box_cli_every_phase_and_host_path(
        app: App, llm_stub: LLMStub, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 11 case 5 as a user runs it: DREAM_PRIVACY__REDACT=true, a remote model and
    embedder, `dream notes import`, `dream notes add`, `dream run --force` with both reviews on:
    every phase asked the model and no request carried a canary."""
    llm_stub.set_handler(_answer)
    for key, value in {"DATABASE_URL": app.settings.database_url, "PRIVACY__REDACT": "true",
                       "LLM_PROVIDER": "openai", "LLM_BASE_URL": llm_stub.url,
                       "LLM_API_KEY": "k", "LLM_MAX_RETRIES": "0",
                       "EMBEDDING_PROVIDER": "openai", "EMBEDDING_BASE_URL": llm_stub.url,
                       "PRUNE__REVIEW": "llm", "ARCHIVE__REVIEW": "llm"}.items():
        monkeypatch.setenv(f"DREAM_{key}", value)
    notes = [*_consolidate_notes(),
             {"id": "a", "content": f"Customer uses metric units for all reports to {EMAIL}",
              "created_at": days_ago(5)},
             {"id": "b", "content": f"Customer uses imperial units for all reports to {EMAIL}",
              "created_at": days_ago(4)},
             {"id": "p", "content": f"Pays with card {CARD}", "source_conversation_id": "gone"},
             {"id": "old", "content": f"Emergency contact {PHONE}", "importance": 0.9,
              "created_at": days_ago(400), "access_count": 1,
              "last_accessed_at": days_ago(400)}]  # read once, long ago: idle
    path = tmp_path / "notes.jsonl"
    path.write_text("\n".join(json.dumps({"agent_id": "agent-1", **n}) for n in notes))
    entities = tmp_path / "entities.jsonl"
    entities.write_text("\n".join(json.dumps(e) for e in (
        {"kind": "agent", "id": "agent-1"},
        {"kind": "conversation", "id": "gone", "status": "deleted"})))
    runner = CliRunner()
    for args in (["notes", "import", str(path)], ["entities", "import", str(entities)],
                 ["notes", "add", "--agent", "agent-1", "--content", f"Backup mail {EMAIL}"],
                 ["run", "--agent", "agent-1", "--force", "--now", NOW.isoformat()]):
        out = runner.invoke(main, args)
        assert out.exit_code == 0, (args, out.output)
    asked = {r.prompt_name for r in llm_stub.chat_requests()}
    assert asked == {"consolidate", "contradictions", "prune", "archive"}
    assert any(r.path.endswith("/embeddings") for r in llm_stub.requests)
    assert _leaks(llm_stub) == []
