"""The OpenAI-compatible embedder's failures through the real `openai` client against the local
stub (worker.embeddings.openai_compat): an HTTP answer names the setting to fix, as the model
client's do (tests/llm/test_openai_compat.py has the deadline and the non-answer cases)."""

from __future__ import annotations

import json
from pathlib import Path

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
