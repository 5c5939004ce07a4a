"""OpenAICompatibleLLM through the real `openai` client against the local HTTP stub."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import BaseModel

from tests.support.llm_stub import StubResponse
from worker.llm.ask import ask
from worker.llm.base import LLMError, PromptTooLong
from worker.llm.fake import FakeLLM, FakeRule
from worker.llm.openai_compat import OpenAICompatibleLLM, parse_retry_after
from worker.llm.prompts import RenderedPrompt

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}}


class Ok(BaseModel):
    ok: bool


def _llm(stub, **kw) -> OpenAICompatibleLLM:  # type: ignore[no-untyped-def]
    kw.setdefault("timeout", 5.0)
    return OpenAICompatibleLLM(base_url=stub.url, model="stub-model", api_key="k", **kw)


def _call(llm: OpenAICompatibleLLM):  # type: ignore[no-untyped-def]
    return llm.complete_json(prompt_name="consolidate", system="sys", user="usr", schema=SCHEMA)


def test_reply_carries_parsed_json_and_token_usage(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """A 200 answer is parsed into data; usage and model come from the response body."""
    llm_stub.set_handler(lambda req: {"ok": True})
    reply = _call(_llm(llm_stub))
    assert reply.data == {"ok": True}
    assert (reply.tokens_in, reply.tokens_out, reply.model) == (11, 7, "stub-model")
    req = llm_stub.requests[0]
    assert req.response_format == "json_schema" and req.prompt_name == "consolidate"


def test_json_schema_rejected_falls_back_to_json_object_and_remembers(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """A server that 400s json_schema gets json_object, and the next call goes straight there."""
    llm_stub.reject_json_schema = True
    llm_stub.set_handler(lambda req: {"ok": True})
    llm = _llm(llm_stub)
    assert _call(llm).data == {"ok": True}
    assert _call(llm).data == {"ok": True}
    formats = [r.response_format for r in llm_stub.chat_requests()]
    assert formats == ["json_schema", "json_object", "json_object"]
    assert "JSON schema" in llm_stub.requests[-1].system


def _too_long(status: int = 400) -> StubResponse:
    """What OpenAI answers a prompt longer than the model's context (its message quotes no
    prompt, but another server's may)."""
    return StubResponse(status=status, body={"error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
                   "resulted in 9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})


@pytest.mark.parametrize("status", [400, 413])
def test_a_prompt_longer_than_the_context_is_sent_once_and_says_so(  # type: ignore[no-untyped-def]
        llm_stub, status: int) -> None:
    """A 400 ``context_length_exceeded`` (or a 413) is the prompt's own: one request, one line
    naming the cause and the remedy, and JSON-schema replies stay on for every other prompt.
    Before, it was taken for a server without json_schema: the prompt was sent again in JSON
    mode, every later call of the process lost the schema, and the line said to check
    DREAM_LLM_MODEL and the server's logs."""
    llm_stub.set_handler(lambda req: _too_long(status) if req.user == "usr" else {"ok": True})
    llm = _llm(llm_stub, max_retries=2)
    with pytest.raises(PromptTooLong) as info:
        _call(llm)
    assert len(llm_stub.chat_requests()) == 1
    said = str(info.value)
    assert said.startswith("model endpoint refused the consolidate prompt as longer than the "
                           f"model's context window (HTTP {status}); use a DREAM_LLM_MODEL")
    assert "\n" not in said and "8192" not in said
    llm.complete_json(prompt_name="consolidate", system="sys", user="short", schema=SCHEMA)
    assert [r.response_format for r in llm_stub.chat_requests()] == ["json_schema"] * 2


def test_429_with_retry_after_is_retried_then_succeeds(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """Rate limiting is retried after the server's Retry-After, within max_retries."""
    answers = iter([StubResponse.rate_limited(0.2), StubResponse.error(502), {"ok": False}])
    llm_stub.set_handler(lambda req: next(answers))
    started = time.monotonic()
    reply = _call(_llm(llm_stub, max_retries=2))
    assert reply.data == {"ok": False}
    assert len(llm_stub.chat_requests()) == 3
    assert time.monotonic() - started >= 0.2


def test_persistent_5xx_gives_one_line_llm_error_after_bounded_attempts(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """500 on every call: 1 + max_retries attempts, then LLMError with one line."""
    llm_stub.set_handler(lambda req: StubResponse.error(500))
    with pytest.raises(LLMError) as info:
        _call(_llm(llm_stub, max_retries=1))
    assert len(llm_stub.chat_requests()) == 2
    assert "\n" not in str(info.value) and "HTTP 500" in str(info.value)


def test_retry_after_beyond_wall_cap_gives_up_at_once(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """A Retry-After longer than the wall-time cap is not slept through."""
    llm_stub.set_handler(lambda req: StubResponse.rate_limited(120))
    started = time.monotonic()
    with pytest.raises(LLMError, match="deferred"):
        _call(_llm(llm_stub, max_retries=3, max_wall_seconds=5))
    assert time.monotonic() - started < 3


def test_hanging_endpoint_is_bounded_by_timeout_and_retries(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """An endpoint that never answers costs at most (1 + retries) timeouts, then LLMError."""
    llm_stub.set_handler(lambda req: StubResponse.hang(30))
    started = time.monotonic()
    with pytest.raises(LLMError):
        _call(_llm(llm_stub, timeout=0.5, max_retries=1))
    assert time.monotonic() - started < 4
    assert len(llm_stub.chat_requests()) == 2


def test_trickling_endpoint_is_bounded_by_the_whole_request_deadline(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """Headers at once, then one byte every 0.3 s: the read timeout never fires (each byte resets
    it), yet each attempt ends at the whole-request deadline (timeout) and the question at
    (1 + retries) deadlines, then LLMError naming the deadline; no reply is half-read."""
    llm_stub.set_handler(lambda req: StubResponse.trickle({"ok": True}, every=0.3))
    started = time.monotonic()
    with pytest.raises(LLMError, match="whole-request deadline"):
        _call(_llm(llm_stub, timeout=1.0, max_retries=1))
    elapsed = time.monotonic() - started
    # The body is ~300 bytes: trickled in full it would take ~90 s.
    assert 2.0 <= elapsed < 5, elapsed
    assert len(llm_stub.chat_requests()) == 2


def test_trickle_within_the_deadline_is_read_in_full(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """The deadline bounds the whole request, it does not cut a slow reply that fits in it."""
    llm_stub.set_handler(lambda req: StubResponse.trickle({"ok": True}, every=0.001))
    assert _call(_llm(llm_stub, timeout=10.0, max_retries=0)).data == {"ok": True}


@pytest.mark.parametrize(("body", "content_type"), [
    ("<html><body>502 Bad Gateway</body></html>", "text/html"),
    ("null", "application/json"),
    ('{"unexpected": 1}', "application/json"),
    ("[]", "application/json"),
])
def test_http_200_without_a_chat_completion_is_an_llm_error(  # type: ignore[no-untyped-def]
    llm_stub, body: str, content_type: str,
) -> None:
    """An HTTP 200 whose body is not a chat completion (a proxy's HTML page, null, another JSON
    object) is an endpoint failure (LLMError, so the item is deferred), never an exception that
    fails the phase."""
    llm_stub.set_handler(lambda req: StubResponse.raw(body, content_type))
    with pytest.raises(LLMError, match="HTTP 200 without a chat completion"):
        _call(_llm(llm_stub, max_retries=0))


@pytest.mark.parametrize("body", ['{"choices": [', '{"id": "x", "choices": [{"inde',
                                  "\xff\xfe not text"])
def test_http_200_json_cut_short_is_retried_then_an_llm_error(  # type: ignore[no-untyped-def]
    llm_stub, body: str,
) -> None:
    """An HTTP 200 ``application/json`` body that does not decode (a proxy cutting the reply)
    was a JSONDecodeError that failed the phase, unretried; it is the endpoint's failure:
    retried like a 5xx, then one LLMError line saying so, the item deferred."""
    llm_stub.set_handler(lambda req: StubResponse.raw(body, "application/json"))
    with pytest.raises(LLMError) as info:
        _call(_llm(llm_stub, max_retries=1))
    assert len(llm_stub.chat_requests()) == 2
    assert str(info.value) == (
        "model endpoint failed after 2 attempts (HTTP 200 with a body that is not JSON; check "
        "DREAM_LLM_BASE_URL); the item is deferred to the next run")


def test_http_200_json_cut_once_then_whole_is_answered(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """A single cut reply costs one retry, not the question."""
    answers = iter([StubResponse.raw('{"choices": [', "application/json"), {"ok": True}])
    llm_stub.set_handler(lambda req: next(answers))
    assert _call(_llm(llm_stub, max_retries=1)).data == {"ok": True}


def test_ask_starts_no_call_after_its_deadline() -> None:
    """A phase's wall budget: once ``deadline`` has passed, ask() makes no call and says so."""
    fake = FakeLLM(default={"ok": True})
    outcome = ask(fake, RenderedPrompt("consolidate", "sys", "usr", "h"), Ok,
                  deadline=time.monotonic() - 1)
    assert outcome.status == "out_of_time" and outcome.attempts == 0 and not fake.calls
    assert "wall-time budget" in outcome.reason


def test_unauthorised_is_not_retried(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """401 is a configuration problem: one attempt, a message naming the API key setting."""
    llm_stub.set_handler(lambda req: StubResponse.error(401))
    with pytest.raises(LLMError, match="DREAM_LLM_API_KEY"):
        _call(_llm(llm_stub))
    assert len(llm_stub.chat_requests()) == 1


def test_bad_json_content_is_returned_not_raised_and_ask_reasks(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """Garbage content gives data=None; ask() re-asks with the reason and accepts the fix."""
    fake = FakeLLM(rules=[FakeRule(reply="not json {", times=1), FakeRule(reply={"ok": True})])
    llm_stub.set_handler(fake)
    llm = _llm(llm_stub)
    assert _call(llm).data is None
    outcome = ask(llm, RenderedPrompt("consolidate", "sys", "usr", "h"), Ok)
    assert outcome.ok and outcome.value == Ok(ok=True)
    assert outcome.attempts == 1
    fake.rules[0].used = 0
    outcome = ask(llm, RenderedPrompt("consolidate", "sys", "usr", "h"), Ok)
    assert outcome.ok and outcome.attempts == 2
    assert "previous reply could not be used" in llm_stub.chat_requests()[-1].user


@pytest.mark.parametrize(("headers", "expected"), [
    ({"retry-after": "3"}, 3.0), ({"retry-after-ms": "250"}, 0.25), ({}, None),
    ({"retry-after": "soon"}, None),
])
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    """Retry-After in seconds or milliseconds; unusable values mean 'use our back-off'."""
    assert parse_retry_after(headers) == expected


def test_stub_serves_embeddings_to_the_openai_embedder(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """/v1/embeddings answers with normalised vectors of the requested size."""
    from worker.embeddings.openai_compat import OpenAICompatibleEmbedder

    embedder = OpenAICompatibleEmbedder(base_url=llm_stub.url, api_key="k", model="e",
                                        dimensions=64, batch_size=2)
    vectors = embedder.embed(["a b", "a b", "c d e"])
    assert vectors.shape == (3, 64)
    assert abs(float(vectors[0] @ vectors[1]) - 1.0) < 1e-5
    assert len(llm_stub.requests) == 2  # two batches


def test_trickling_embedding_endpoint_is_bounded(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """The embedder's sibling of the trickle hole: a body sent one byte every 0.3 s ends at the
    batch's whole-request deadline with an EmbeddingError, not after minutes."""
    from worker.embeddings.openai_compat import EmbeddingError, OpenAICompatibleEmbedder

    llm_stub.embeddings_response = StubResponse.trickle(
        {"object": "list", "data": [{"index": 0, "embedding": [0.1] * 64}]}, every=0.3)
    embedder = OpenAICompatibleEmbedder(base_url=llm_stub.url, api_key="k", model="e",
                                        dimensions=64, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(EmbeddingError):
        embedder.embed(["a b"])
    assert time.monotonic() - started < embedder.deadline_seconds + 2


def test_http_200_without_embeddings_is_an_embedding_error(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """A proxy's HTML page with HTTP 200 is a clear EmbeddingError, not an AttributeError."""
    from worker.embeddings.openai_compat import EmbeddingError, OpenAICompatibleEmbedder

    llm_stub.embeddings_response = StubResponse.raw("<html>502</html>")
    embedder = OpenAICompatibleEmbedder(base_url=llm_stub.url, api_key="k", model="e",
                                        dimensions=64)
    with pytest.raises(EmbeddingError, match="without embeddings"):
        embedder.embed(["a b"])


def _completion(content: str | None = '{"ok": true}', **fields: Any) -> StubResponse:
    """A chat completion body as the endpoint sends it, ``fields`` replacing its own."""
    return StubResponse.completion(content, **{"model": "served-model", **fields})


@pytest.mark.parametrize(("field", "value"), [
    ("prompt_tokens", -1_000_000),  # would give the run's budget a million tokens back
    ("completion_tokens", -5),
    ("prompt_tokens", 10**30),  # overflowed the steps' token columns: the phase failed
    ("prompt_tokens", "abc"),  # int("abc") raised ValueError: the phase failed
    ("completion_tokens", {"n": 1}),
    ("completion_tokens", 2.5),
])
def test_a_usage_that_is_no_token_count_is_an_llm_error(  # type: ignore[no-untyped-def]
    llm_stub, field: str, value: Any,
) -> None:
    """The run's budget is charged what the endpoint says a reply used (R15). A count that is
    negative, past any context window, or not a whole number is an endpoint answering garbage:
    one LLMError line naming the field (the item is deferred), never a budget given back or an
    exception that fails the phase."""
    usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18, field: value}
    llm_stub.set_handler(lambda req: _completion(usage=usage))
    with pytest.raises(LLMError) as info:
        _call(_llm(llm_stub, max_retries=0))
    message = str(info.value)
    assert f"usage.{field} that is no token count" in message and "\n" not in message
    assert "deferred" in message


@pytest.mark.parametrize("usage", [None, {}, {"prompt_tokens": 11.0, "completion_tokens": 0}])
def test_a_usage_left_out_or_whole_is_accepted(llm_stub, usage: Any) -> None:  # type: ignore[no-untyped-def]
    """The control: a server that counts nothing sends no usage (0 tokens), and a count written
    as 11.0 is a whole number."""
    llm_stub.set_handler(lambda req: _completion(usage=usage))
    reply = _call(_llm(llm_stub, max_retries=0))
    assert reply.data == {"ok": True}
    assert (reply.tokens_in, reply.tokens_out) == ((11, 0) if usage and usage.get(
        "prompt_tokens") else (0, 0))
    assert reply.unmetered  # none counts a reply with text: charged its call's estimate


@pytest.mark.parametrize("model", [{"name": "x"}, 7, "", "m" * 201, "gpt\x1b[2J", "a b\nc"])
def test_a_model_name_that_names_no_model_is_the_configured_one(  # type: ignore[no-untyped-def]
    llm_stub, model: Any,
) -> None:
    """Every step, span and listing records the model a reply names. An object there failed
    the phase; pages of text or a terminal escape were copied onto each step and printed by
    `dream runs show`. Such a name is replaced by the configured model; a real one is kept."""
    llm_stub.set_handler(lambda req: _completion(model=model))
    assert _call(_llm(llm_stub, max_retries=0)).model == "stub-model"
    llm_stub.set_handler(lambda req: _completion(model="org/llama-3.1:8b-q4"))
    assert _call(_llm(llm_stub, max_retries=0)).model == "org/llama-3.1:8b-q4"


def test_content_nested_past_the_parser_depth_is_garbage_and_reasked(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """A reply of 100,000 opening brackets made json.loads raise RecursionError, which no
    caller expects: the phase failed. It is a reply that is not JSON, re-asked like any."""
    answers = iter([_completion("[" * 100_000), _completion('{"ok": false}')])
    llm_stub.set_handler(lambda req: next(answers))
    llm = _llm(llm_stub, max_retries=0)
    outcome = ask(llm, RenderedPrompt("consolidate", "sys", "usr", "h"), Ok)
    assert outcome.ok and outcome.value == Ok(ok=False) and outcome.attempts == 2
    assert outcome.malformed == 1


def test_a_refusal_is_final_and_no_malformed_reply(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """A model's refusal (``message.refusal``, no content): before, it read as a reply that is
    not JSON, was re-asked twice (refused again, three calls) and counted malformed, which
    flags a run "model answers unusable ... check that DREAM_LLM_MODEL answers in JSON". Now
    one call, the question invalid with a reason that quotes nothing of the refusal."""
    llm_stub.set_handler(lambda req: _completion(None, choices=[{
        "index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": None,
                    "refusal": "I can't help with notes about Dana's health."}}]))
    outcome = ask(_llm(llm_stub, max_retries=0), RenderedPrompt("consolidate", "sys", "usr", "h"),
                  Ok)
    assert (outcome.status, outcome.attempts, outcome.malformed) == ("invalid", 1, 0)
    assert outcome.reason.startswith("the model refused to answer") and "Dana" not in outcome.reason
    assert len(llm_stub.chat_requests()) == 1


def test_a_reply_cap_is_sent_as_max_tokens_and_a_cut_reply_is_logged(llm_stub) -> None:  # type: ignore[no-untyped-def]
    """``DREAM_LLM_MAX_OUTPUT_TOKENS`` goes out as ``max_tokens`` (online and in a batch line);
    unset, nothing is sent. A reply the server cut at the cap is logged (no note text) and,
    not parsing, re-asked like any malformed reply."""
    from structlog.testing import capture_logs

    from worker.llm.base import BatchItem
    from worker.llm.openai_batch import batch_lines

    llm_stub.set_handler(lambda req: {"ok": True})
    _call(_llm(llm_stub))
    _call(_llm(llm_stub, max_output_tokens=300))
    sent = [r.body.get("max_tokens") for r in llm_stub.chat_requests()]
    assert sent == [None, 300]
    line = batch_lines(_llm(llm_stub, max_output_tokens=300),
                       [BatchItem("c1", "consolidate", "sys", "usr", SCHEMA)])
    assert b'"max_tokens": 300' in line
    cut = StubResponse.completion('{"ok": tr', choices=[{
        "index": 0, "finish_reason": "length",
        "message": {"role": "assistant", "content": '{"ok": tr'}}])
    llm_stub.set_handler(lambda req: cut)
    with capture_logs() as logs:
        reply = _call(_llm(llm_stub, max_output_tokens=16))
    assert reply.data is None
    assert [e for e in logs if e["event"] == "llm.reply_cut"] == [
        {"event": "llm.reply_cut", "prompt": "consolidate", "max_output_tokens": 16,
         "log_level": "warning"}]


def test_the_budget_reserves_a_reply_cap_beside_the_prompt() -> None:
    """With a cap, a question reserves its prompt's tokens plus the cap, so a run's token
    budget holds however long the replies would have been."""
    from worker.llm.ask import schema_text
    from worker.llm.base import reply_cap
    from worker.llm.fanout import Question

    prompt = RenderedPrompt(name="consolidate", system="s" * 400, user="u" * 400,
                            template_hash="h")
    q = Question(prompt, Ok)
    capped = OpenAICompatibleLLM(base_url="http://127.0.0.1:9/v1", model="m", api_key="k",
                                 max_output_tokens=500)
    # The prompt's 800 characters, the reply's schema the client appends to the system message
    # and the line that introduces it, 4 characters a token.
    sent = (800 + len(schema_text(Ok)) + 64) // 4
    assert q.estimate_tokens() == sent
    assert q.estimate_tokens(reply_cap(capped)) == sent + 500
    assert reply_cap(FakeLLM(rules=[])) == 0
