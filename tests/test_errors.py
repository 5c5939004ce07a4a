"""The one error hierarchy (worker.errors): each class has one exit code and one HTTP status,
and the domain names callers import are the classes of their meaning."""

from __future__ import annotations

import json

import pytest

from worker import errors
from worker.api.auth import parse_tokens
from worker.config import ConfigError
from worker.domain.limits import json_syntax_problem
from worker.embeddings.openai_compat import EmbeddingError
from worker.host import Conflict, HostError, Invalid, NotFound
from worker.ingest.jsonl import InputError, read_jsonl
from worker.llm.base import LLMError
from worker.runs.service import BrokerUnavailable, RunError, UnknownScope
from worker.runs.start import NotDue
from worker.safety.undo import UndoRefused


@pytest.mark.parametrize(("cls", "exit_code", "status", "code"), [
    # The table in worker/errors.py's docstring, row by row.
    (errors.InvalidInput, 2, 422, "invalid"),
    (errors.NotFound, 3, 404, "not_found"),
    (errors.Conflict, 4, 409, "conflict"),
    (errors.Unavailable, 5, 503, "unavailable"),
    (errors.ModelFailure, 6, 502, "model_failed"),
    (errors.Forbidden, 7, 403, "forbidden"),
    (errors.Unauthorized, 7, 401, "unauthorized"),  # a Forbidden with its own challenge status
    (errors.ConfigError, 8, 500, "misconfigured"),
])
def test_each_class_has_one_exit_code_and_status(
        cls: type[errors.DreamError], exit_code: int, status: int, code: str) -> None:
    """The CLI's exit code and the API's status come from the class alone."""
    assert (cls.exit_code, cls.status, cls.code) == (exit_code, status, code)


def test_exit_codes_are_distinct_per_meaning() -> None:
    """No two meanings share an exit code, so a script can tell them apart."""
    assert len(set(errors.EXIT_CODES.values())) == len(errors.EXIT_CODES)
    assert 0 not in errors.EXIT_CODES.values() and 1 not in errors.EXIT_CODES.values()


@pytest.mark.parametrize(("name", "meaning"), [
    # Domain names stay importable where callers use them; each is its meaning's class.
    (InputError, errors.InvalidInput),
    (Invalid, errors.InvalidInput),
    (NotFound, errors.NotFound),
    (UnknownScope, errors.NotFound),
    (errors.RunNotFound, errors.NotFound),
    (Conflict, errors.Conflict),
    (RunError, errors.Conflict),  # a run request the store's state refuses
    (UndoRefused, errors.Conflict),
    (NotDue, errors.Conflict),
    (BrokerUnavailable, errors.Unavailable),
    (LLMError, errors.ModelFailure),
    (EmbeddingError, errors.ModelFailure),
    (ConfigError, errors.ConfigError),
    (errors.InvalidRun, errors.InvalidInput),
])
def test_domain_errors_are_their_meaning(name: type[Exception], meaning: type[Exception]) -> None:
    assert issubclass(name, meaning) and issubclass(name, errors.DreamError)


def test_a_run_not_found_is_still_a_run_error_and_answers_404() -> None:
    """Callers that catch RunError keep catching a missing run; the class decides the status."""
    missing = errors.RunNotFound("r1")
    assert isinstance(missing, RunError) and missing.status == 404 and missing.exit_code == 3
    assert str(missing) == "no run with id r1; list runs with `dream runs list`"
    assert HostError is errors.DreamError
    assert errors.InvalidRun("x").status == 422  # its meaning wins over RunError's conflict


@pytest.mark.parametrize(("text", "problem"), [
    ('{"a": "tab\there"}', "Invalid control character at column 11"),
    ('{"a": "open', "Unterminated string starting at column 7"),
    ('{"a": }', "Expecting value at column 7"),
])
def test_json_syntax_errors_name_the_column_once(text: str, problem: str) -> None:
    """The decoder's own message may end in "at": the import error said "at at column"."""
    with pytest.raises(json.JSONDecodeError) as err:
        json.loads(text)
    assert json_syntax_problem(err.value) == problem
    with pytest.raises(InputError, match=rf"^line 1: not valid JSON \({problem}\)$"):
        list(read_jsonl([text]))
    with pytest.raises(ConfigError, match=rf"DREAM_API_TOKENS is not valid JSON \({problem}\)"):
        parse_tokens(text)
