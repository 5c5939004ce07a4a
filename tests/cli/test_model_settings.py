"""An OpenAI-compatible model or embedder with neither an endpoint nor a key: every request
would go to api.openai.com without a key. One start-up line, nothing written."""

from __future__ import annotations

import pytest

from tests.cli.test_commands import counts, dream, one_error_line
from tests.support.factories import add_notes
from worker.app import App
from worker.errors import ConfigError

UNSET = {name: None for name in ("DREAM_LLM_BASE_URL", "DREAM_LLM_API_KEY",
                                 "DREAM_EMBEDDING_BASE_URL", "DREAM_EMBEDDING_API_KEY")}


@pytest.mark.parametrize(("env", "says"), [
    ({"DREAM_LLM_PROVIDER": "openai"},
     "DREAM_LLM_PROVIDER=openai needs DREAM_LLM_BASE_URL"),
    ({"DREAM_EMBEDDING_PROVIDER": "openai"},
     "DREAM_EMBEDDING_PROVIDER=openai needs DREAM_EMBEDDING_BASE_URL"),
], ids=["llm", "embeddings"])
def test_an_openai_provider_without_endpoint_or_key_is_refused_at_start_up(
        sqlite_app: App, env: dict[str, str], says: str) -> None:
    """Before, `dream run` sent the scope's notes to api.openai.com with the key "unused":
    the run ended blocked ("model unavailable", exit 10) or partial (exit 11), its run row
    written, and the same again on every gate check."""
    add_notes(sqlite_app, {"id": "n1", "agent_id": "a1", "content": "Prefers tea."},
              {"id": "n2", "agent_id": "a1", "content": "Prefers green tea."})
    before = counts(sqlite_app)
    url = sqlite_app.settings.database_url
    line = one_error_line(dream(url, "run", "--agent", "a1", "--force", **{**UNSET, **env}),
                          ConfigError.exit_code)
    assert says in line, line
    assert counts(sqlite_app) == before
    with_key = {**UNSET, **env, "DREAM_LLM_API_KEY": "k", "DREAM_EMBEDDING_API_KEY": "k"}
    assert dream(url, "runs", "list", **with_key).exit_code == 0
