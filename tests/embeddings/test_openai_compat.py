"""The OpenAI-compatible embedder's failures through the real `openai` client against the local
stub (worker.embeddings.openai_compat): an HTTP answer names the setting to fix, as the model
client's do (tests/llm/test_openai_compat.py has the deadline and the non-answer cases)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_commands import dream, one_error_line
from tests.conftest import make_sqlite_app
from tests.support.llm_stub import LLMStub, StubResponse
from worker.embeddings.openai_compat import EmbeddingError, OpenAICompatibleEmbedder


@pytest.mark.parametrize(("status", "says"), [
    # A refused key was "check DREAM_EMBEDDING_BASE_URL and DREAM_EMBEDDING_MODEL".
    (401, "embedding endpoint refused the credentials (401); check DREAM_EMBEDDING_API_KEY"),
    (403, "embedding endpoint refused the credentials (403); check DREAM_EMBEDDING_API_KEY"),
    (404, "embedding endpoint answered 404; check DREAM_EMBEDDING_BASE_URL (usually ends in "
          "/v1) and DREAM_EMBEDDING_MODEL"),
    # A text longer than the model takes, or a model that does not embed.
    (400, "embedding endpoint rejected the request (400); check DREAM_EMBEDDING_MODEL"),
])
def test_an_http_refusal_names_the_setting_to_fix(llm_stub: LLMStub, status: int,
                                                  says: str) -> None:
    llm_stub.embeddings_response = StubResponse.error(status)
    embedder = OpenAICompatibleEmbedder(base_url=llm_stub.url, api_key="k", model="e",
                                        dimensions=64)
    with pytest.raises(EmbeddingError) as err:
        embedder.embed(["a b"])
    assert str(err.value).startswith(says), err.value


def _refusing_long_texts(stub: LLMStub, monkeypatch: pytest.MonkeyPatch,
                         limit: int) -> list[list[str]]:
    """The stub refuses a request holding a text over ``limit`` characters as OpenAI does (400,
    "maximum context length"); the inputs of every embedding request, in order."""
    seen: list[list[str]] = []
    answer = stub._answer

    def refusing(req: Any) -> Any:
        if req.path.endswith("/embeddings"):
            seen.append(list(req.body["input"]))
            if any(len(t) > limit for t in req.body["input"]):
                return 400, {"error": {"message": "This model's maximum context length is 8192 "
                                       "tokens, however you requested 9000 tokens",
                                       "type": "invalid_request_error"}}, {}
        return answer(req)

    monkeypatch.setattr(stub, "_answer", refusing)
    return seen


def test_a_text_longer_than_the_model_takes_is_clipped_and_the_rest_embedded(
        llm_stub: LLMStub, monkeypatch: pytest.MonkeyPatch) -> None:
    """One note of a batch is longer than the embedding model takes: the batch is split until
    it stands alone, and it is embedded by its first part; the other notes get the vectors
    they get by themselves, in few requests. Before, the whole embedding failed (every run,
    each phase paying for the scope's other notes again)."""
    seen = _refusing_long_texts(llm_stub, monkeypatch, limit=1000)
    texts = [f"user fact number {k}" for k in range(7)]
    texts[5] = "word " * 800  # 4,000 characters
    embedder = OpenAICompatibleEmbedder(base_url=llm_stub.url, api_key="k", model="e",
                                        dimensions=64)
    vectors = embedder.embed(texts)
    alone = embedder.embed([t for k, t in enumerate(texts) if k != 5])
    assert vectors.shape == (7, 64)
    assert (vectors[[0, 1, 2, 3, 4, 6]] == alone).all()
    assert (vectors[5] == embedder.embed([texts[5][:1000]])).all()
    assert len(seen) <= 12  # 7 texts: 3 halvings of the batch, 2 of the text, each refused


def test_a_short_text_still_refused_is_one_line(llm_stub: LLMStub,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Clipping stops at a few hundred characters: a model refusing those is not one to
    clip for, and the refusal stands, naming the cause."""
    _refusing_long_texts(llm_stub, monkeypatch, limit=10)
    embedder = OpenAICompatibleEmbedder(base_url=llm_stub.url, api_key="k", model="e",
                                        dimensions=64)
    with pytest.raises(EmbeddingError, match=r"^embedding endpoint refused a text as longer than "
                                             r"the model's context window \(400\); check "
                                             "DREAM_EMBEDDING_MODEL$"):
        embedder.embed(["x" * 2000, "short"])


def test_no_answer_at_all_still_points_at_the_endpoint() -> None:
    """Nothing listens: no status to go by, so the URL and the model are what to check."""
    embedder = OpenAICompatibleEmbedder(base_url="http://127.0.0.1:1/v1", api_key="k",
                                        model="e", dimensions=64, timeout=1)
    with pytest.raises(EmbeddingError, match=r"embedding endpoint failed \(APIConnectionError\); "
                                             "check DREAM_EMBEDDING_BASE_URL"):
        embedder.embed(["a b"])


def test_notes_import_with_a_refused_key_is_one_line(tmp_path: Path,
                                                     llm_stub: LLMStub) -> None:
    """`dream notes import` (which embeds): one line naming DREAM_EMBEDDING_API_KEY, exit 6,
    and no note written."""
    llm_stub.embeddings_response = StubResponse.error(401)
    app = make_sqlite_app(tmp_path)
    line = one_error_line(dream(app.settings.database_url, "notes", "import", "-",
                                input=json.dumps({"agent_id": "a1", "content": "Tea."}) + "\n",
                                DREAM_EMBEDDING_PROVIDER="openai", DREAM_EMBEDDING_API_KEY="bad",
                                DREAM_EMBEDDING_BASE_URL=llm_stub.url), EmbeddingError.exit_code)
    assert "check DREAM_EMBEDDING_API_KEY" in line
    with app.uow() as uow:
        assert uow.notes.count_by_status() == {}
    app.dispose()


def _answer(*rows: tuple[object, object]) -> StubResponse:
    """An embeddings answer of (index, embedding) rows, as the endpoint sends it."""
    return StubResponse(content={"object": "list", "model": "e",
                                 "data": [{"object": "embedding", "index": i, "embedding": e}
                                          for i, e in rows],
                                 "usage": {"prompt_tokens": 1, "total_tokens": 1}})


@pytest.mark.parametrize(("answer", "says"), [
    # Different lengths and strings were a raw ValueError from numpy: a 60-line traceback.
    (_answer((0, [0.1] * 4), (1, [0.1] * 3)), "vectors of different lengths (3 to 4 numbers)"),
    (_answer((0, ["a"] * 4), (1, ["a"] * 4)), "holding something other than numbers"),
    (_answer((0, [0.1, None, 0.1, 0.1]), (1, [0.1] * 4)), "holding something other than numbers"),
    (_answer((0, [[0.1]] * 4), (1, [[0.1]] * 4)), "holding something other than numbers"),
    # A boolean among numbers was read as 1.0 or 0.0 (the client's parsing coerces it); a
    # number in a string is no number either.
    (_answer((0, [True, 0.5, 0.1, 0.1]), (1, [0.1] * 4)), "holding something other than numbers"),
    (_answer((0, [0.1] * 4), (1, [0.5, False, 1, 2])), "holding something other than numbers"),
    (_answer((0, ["0.5", 0.1, 0.1, 0.1]), (1, [0.1] * 4)), "holding something other than numbers"),
    (_answer((0, {"x": 1}), (1, [0.1] * 4)), "whose embedding is no list of numbers"),
    # NaN and infinity were stored, each row of NaN; so was a number float32 cannot hold.
    (StubResponse.raw('{"object": "list", "data": [{"index": 0, "embedding": [NaN, 1, 1, 1]},'
                      ' {"index": 1, "embedding": [1, 1, 1, Infinity]}]}', "application/json"),
     "NaN or infinite values"),
    (_answer((0, [1e300] * 4), (1, [0.1] * 4)), "NaN or infinite values"),
    # Two vectors for index 0 and none for 1 were stored as if in order; no index was a
    # TypeError.
    (_answer((0, [0.1] * 4), (0, [0.2] * 4)), "duplicate or missing index values"),
    (_answer((0, [0.1] * 4), (5, [0.2] * 4)), "duplicate or missing index values"),
    (_answer((None, [0.1] * 4), (None, [0.2] * 4)), "duplicate or missing index values"),
    # One vector for two texts said to set DREAM_EMBEDDING_DIMENSIONS: the count is wrong.
    (_answer((0, [0.1] * 4)), "answered 1 vector for 2 texts"),
    # The width is what DREAM_EMBEDDING_DIMENSIONS decides.
    (_answer((0, [0.1] * 3), (1, [0.1] * 3)),
     "vectors of 3 numbers, expected 4; set DREAM_EMBEDDING_DIMENSIONS to match"),
    # JSON cut short by a proxy.
    (StubResponse.raw('{"object": "list", "data": [', "application/json"),
     "HTTP 200 without embeddings"),
])
def test_an_answer_that_is_no_vectors_is_one_embedding_error(
        llm_stub: LLMStub, answer: StubResponse, says: str) -> None:
    """Every answer that is not one finite vector of the configured width per text, in index
    order, is an EmbeddingError of one line naming what is wrong: never a raw exception, never
    vectors stored."""
    llm_stub.embeddings_response = answer
    embedder = OpenAICompatibleEmbedder(base_url=llm_stub.url, api_key="k", model="e",
                                        dimensions=4)
    with pytest.raises(EmbeddingError) as err:
        embedder.embed(["a b", "c d"])
    assert says in str(err.value) and "\n" not in str(err.value), err.value
    if "DIMENSIONS" not in says:
        assert "DREAM_EMBEDDING_DIMENSIONS" not in str(err.value)


def test_vectors_out_of_order_are_put_in_order_and_normalised(llm_stub: LLMStub) -> None:
    """The answer's index decides which text a vector belongs to; huge but finite values are
    normalised without overflowing."""
    llm_stub.embeddings_response = _answer((1, [0.0, 3e38, 0.0, 0.0]), (0, [2, 0, 0, 0]))
    embedder = OpenAICompatibleEmbedder(base_url=llm_stub.url, api_key="k", model="e",
                                        dimensions=4)
    assert embedder.embed(["a b", "c d"]).tolist() == [[1, 0, 0, 0], [0, 1, 0, 0]]


@pytest.mark.parametrize("command", ["import", "add"])
def test_notes_import_and_add_refuse_vectors_that_are_garbage(
        tmp_path: Path, llm_stub: LLMStub, command: str) -> None:
    """`dream notes import` and `dream notes add` (which embeds when write-time dedup measures
    cosine) with an endpoint answering vectors of different lengths (a traceback before) or
    NaN (stored before, exit 0): one line, exit 6, no note written."""
    app = make_sqlite_app(tmp_path)
    note = {"agent_id": "a1", "content": "Tea."}
    args = (["notes", "import", "-"] if command == "import"
            else ["notes", "add", "--agent", "a1", "--content", "Tea."])
    env = {"DREAM_EMBEDDING_PROVIDER": "openai", "DREAM_EMBEDDING_BASE_URL": llm_stub.url,
           "DREAM_EMBEDDING_DIMENSIONS": "8", "DREAM_REMEMBER__MEASURE": "cosine"}
    nan = "[" + ", ".join(["NaN"] * 8) + "]"
    for answer in (_answer((0, [0.1] * 8), (1, [0.1] * 3)),
                   StubResponse.raw(f'{{"data": [{{"index": 0, "embedding": {nan}}}, '
                                    f'{{"index": 1, "embedding": {nan}}}]}}', "application/json")):
        llm_stub.embeddings_response = answer
        lines = json.dumps(note) + "\n" + json.dumps({**note, "content": "Coffee."}) + "\n"
        line = one_error_line(dream(app.settings.database_url, *args, input=lines, **env),
                              EmbeddingError.exit_code)
        assert line.startswith("error: embedding endpoint answered "), line
    with app.uow() as uow:
        assert uow.notes.count_by_status() == {}
    app.dispose()
