"""A failed phase's message (worker.safety.scrub.safe_error_message): a foreign exception's
text is masked word by word against the scope's notes (R21); an error whose class builds its
messages from constants, setting names and counts keeps its remedy word for word."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from tests.cli.test_commands import dream
from tests.conftest import make_sqlite_app
from tests.runs.test_phase_run import WRITING, _writing
from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope, StepStatus
from worker.embeddings.openai_compat import EmbeddingError
from worker.errors import ConfigError
from worker.llm.base import LLMError
from worker.runs import engine, service
from worker.runs.interruption import RunInterrupted
from worker.safety.scrub import MASK, safe_error_message, scrub
from worker.store.repositories.writes import WriteRepository

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


def test_a_foreign_error_quoting_a_note_is_masked(app: App) -> None:
    """An exception we did not word (a driver's, a bug's) that quotes a note loses the quote;
    the words it merely shares with notes stay (they are no quote: every common word is in
    some note of a real store)."""
    said = safe_error_message(app, SCOPE, RuntimeError(f"bad row: {NOTES[0]!r}; {REMEDY}"))
    assert said == f"bad row: '{MASK}'; {REMEDY}"


@pytest.mark.parametrize(("message", "said"), [
    # a driver's own message: each word is in some note, none in a note's order
    ("server closed the connection unexpectedly", "server closed the connection unexpectedly"),
    ('relation "notes" does not exist', 'relation "notes" does not exist'),
    # quotes: two telling words in a note's order, a whole note, a number a note holds
    ("cannot parse 'moved near Alexanderplatz'", f"cannot parse '{MASK}'"),
    ("KeyError: 'Kreuzberg'", f"KeyError: '{MASK}'"),
    ("value 030 1234 is odd", f"value {MASK} is odd"),
    # a lone word of a longer note written as a name (capitalised inside a sentence, or with
    # a letter beyond ASCII) is one: it says whom or where
    ("unknown district Alexanderplatz", f"unknown district {MASK}"),
    ("no user zoëlla here", f"no user {MASK} here"),
    # a lone common word of a longer note, with function words in the note's order, is not;
    # nor a capital opening a sentence, nor a word in capitals
    ("the door is open", "the door is open"),
    ("Server gone. Office hours: SERVER error", "Server gone. Office hours: SERVER error"),
], ids=["driver", "missing-table", "two-words", "one-word-note", "number", "name",
        "non-ascii", "function-words", "sentence-capitals"])
def test_a_quote_is_masked_and_a_shared_word_is_not(message: str, said: str) -> None:
    notes = ["User moved near Alexanderplatz in 2021", "Kreuzberg", "Call 030 1234 after six",
             "Zoëlla prefers tea",
             "The server at the office closed for the holidays", "Fix the connection pool",
             "User closed the door; she does not exist online"]
    assert scrub(message, notes) == said


# Everyday words a store holds, each in a note, none in the driver message's order.
_WORDS = ("User is terminating the gym contract", "The office connection is slow",
          "Her administrator role ends in May", "User learns command line tools",
          "The server room is cold", "User closed the input form unexpectedly",
          "User failed consuming sugar")


@pytest.mark.postgres
def test_a_connection_lost_in_a_phase_write_is_named_unmasked(
        pg_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's backend is terminated for real in the phase's write (an operator's
    pg_terminate_backend): the run is given back as interrupted, and its step says the
    connection was lost in words of ours, not "terminating [note text] due to [note text]"
    (every word a note shares was masked in the driver's message, and notes hold "the",
    "connection", "server")."""
    add_notes(pg_app, *({"id": f"w{i}", "content": c} for i, c in enumerate(_WORDS)))
    update = WriteRepository.update_notes

    def terminated(repo: WriteRepository, *args: Any, **kwargs: Any) -> int:
        pid = repo.session.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with pg_app.engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid, 5000)"), {"pid": pid})
        return update(repo, *args, **kwargs)

    monkeypatch.setattr(WriteRepository, "update_notes", terminated)
    snap = service.create_claimed_run(pg_app, SCOPE, force=True)
    assert snap is not None
    with pytest.raises(RunInterrupted, match="the connection to the database was lost"):
        engine.execute_run(pg_app, snap, {**WRITING, "consolidate": _writing("consolidate")})
    with pg_app.uow() as uow:
        step = next(s for s in uow.runs.steps(snap.run_id)
                    if s.phase == "consolidate" and s.parent_id is None)
    assert step.status == StepStatus.INTERRUPTED.value
    assert (step.error or "").startswith(
        "interrupted; the connection to the database was lost"), step.error
    assert MASK not in (step.error or "")


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
