"""A failed phase's message (worker.safety.scrub.safe_error_message): a foreign exception's
text is masked word by word against the scope's notes (R21); an error whose class builds its
messages from constants, setting names and counts keeps its remedy word for word."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_commands import dream
from tests.conftest import make_sqlite_app
from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.embeddings.openai_compat import EmbeddingError
from worker.errors import ConfigError
from worker.llm.base import LLMError
from worker.safety.scrub import MASK, safe_error_message

SCOPE = Scope("agent-1")
# Everyday words a store holds somewhere: every one of them is also in the remedies below.
NOTES = ("Check the endpoint and the model before the demo",
         "User failed the embedding exam; answered HTTP questions later")
REMEDY = ("embedding endpoint failed (APIConnectionError); check DREAM_EMBEDDING_BASE_URL and "
          "DREAM_EMBEDDING_MODEL")


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    app = make_sqlite_app(tmp_path)
    add_notes(app, *({"id": f"n{i}", "content": c} for i, c in enumerate(NOTES)))
    yield app
    app.dispose()


@pytest.mark.parametrize("error", [
    EmbeddingError(REMEDY),
    LLMError("model endpoint answered 404; check DREAM_LLM_BASE_URL and DREAM_LLM_MODEL"),
    ConfigError("DREAM_PRUNE__SQL_USERS names a table the database does not have; fix it"),
], ids=["embedding", "llm", "config"])
def test_an_error_that_says_no_note_text_keeps_its_words(app: App, error: Exception) -> None:
    """Our own remedy is shown as written, though notes of the scope hold its words."""
    assert safe_error_message(app, SCOPE, error) == str(error)


def test_a_foreign_error_is_still_masked(app: App) -> None:
    """The same words in an exception we did not word (a driver's, a bug's) are masked."""
    said = safe_error_message(app, SCOPE, RuntimeError(REMEDY))
    assert MASK in said and "check" not in said and "endpoint" not in said


def test_dream_run_names_the_embedding_remedy_in_full(app: App) -> None:
    """`dream run` with an embedding endpoint that refuses connections: the failed phases'
    lines say what to check, not "check DREAM_EMBEDDING_BASE_URL [note text] ..."."""
    ran = dream(app.settings.database_url, "run", "--agent", "agent-1", "--force",
                "--phase", "consolidate",
                DREAM_EMBEDDING_PROVIDER="openai", DREAM_EMBEDDING_API_KEY="k",
                DREAM_EMBEDDING_BASE_URL="http://127.0.0.1:1/v1")
    assert ran.exit_code not in (0, 2), ran.output
    assert f"EmbeddingError: {REMEDY}" in ran.stdout, ran.stdout
    assert MASK not in ran.output
