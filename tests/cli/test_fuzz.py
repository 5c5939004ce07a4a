"""R31: every `dream` command, found by walking the click group (so commands added later are
fuzzed too), fed hypothesis-generated arguments and stdin: the answer is success or exactly one
`error:` line with exit 2, never a traceback, and an error changes no row."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from tests.support.factories import add_notes, add_sessions
from tests.support.hostile import (
    SEEDED_IDS,
    jsonl_bodies,
    number_texts,
    store_digest,
    text_values,
    timestamp_texts,
)
from worker.app import App
from worker.cli import main
from worker.cli.review import REVIEW_EXIT_CODES
from worker.cli.runs import RUN_EXIT_CODES
from worker.errors import EXIT_CODES
from worker.ingest import EXAMPLE_FIELDS, NOTE_FIELDS, SESSION_FIELDS

# Commands whose success means serving or a whole separate store, each with the test that
# covers its arguments instead. Every name here must still be a command (checked below).
NOT_FUZZED = {
    ("mcp",): "serves until its client disconnects (tests/mcp/test_server.py)",
    ("demo",): "builds and dreams a fresh store per valid path, seconds each "
               "(test_hostile_input_cli.py::test_demo_database_paths_are_one_line)",
}
# Commands that also say how what they applied ended (outcomes, not errors: no `error:` line,
# and the store may change), by command path.
OUTCOMES = {("run",): set(RUN_EXIT_CODES.values()),
            ("review", "approve"): set(REVIEW_EXIT_CODES.values()),
            ("review", "decline"): set(REVIEW_EXIT_CODES.values())}
CANARY = "Marmalade-canary-3318"
# A valid line per importer, and the fields it knows: the fuzz mutates one field at a time.
ENTITY_FIELDS = ["kind", "id", "status", "deleted_at", "name", "note_retention_days",
                 "example_retention_days", "auto_archive_enabled", "deleted_reason", "gate_hours",
                 "gate_sessions", "gate_notes", "gate_idle_minutes", "gate_max_stale_hours"]
VALID_LINES: dict[tuple[str, ...], tuple[dict[str, Any], list[str]]] = {
    ("notes", "import"): ({"agent_id": "a", "user_id": "u", "content": "User drinks green tea"},
                          sorted(NOTE_FIELDS)),
    ("sessions", "import"): ({"agent_id": "a", "started_at": "2026-01-01T00:00:00Z"},
                             sorted(SESSION_FIELDS)),
    ("examples", "import"): ({"agent_id": "a", "input": "hi", "output": "hello"},
                             sorted(EXAMPLE_FIELDS)),
    ("entities", "import"): ({"kind": "agent", "id": "a"}, ENTITY_FIELDS),
}


def leaf_commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaf_commands(command, (*path, name))
        else:
            yield (*path, name), command


COMMANDS = [(path, cmd) for path, cmd in leaf_commands(main) if path not in NOT_FUZZED]


def values_for(param: click.Parameter) -> st.SearchStrategy[str]:
    """Plausible and hostile strings for one parameter, by its click type."""
    kind = param.type
    if isinstance(kind, click.Choice):
        return st.one_of(st.sampled_from([str(c) for c in kind.choices]), text_values())
    if isinstance(kind, click.types.IntParamType | click.types.FloatParamType):
        return number_texts()
    if kind.name == "id":  # ids and scope parts: the seeded ones often, to reach real work
        return st.one_of(st.sampled_from(SEEDED_IDS), st.sampled_from(SEEDED_IDS), text_values())
    if param.name in ("now", "at", "since") or "ISO-8601" in (getattr(param, "help", None) or ""):
        return timestamp_texts()
    if param.name in ("file",):
        # Mostly stdin, where the generated JSONL is.
        return st.one_of(st.just("-"), st.just("-"), st.just("-"),
                         st.sampled_from(["/nonexistent/x.jsonl", "/", "."]), text_values())
    return text_values()


def _after(flag: str) -> Callable[[str], list[str]]:
    """An option's value with its flag before it."""
    return lambda value: [flag, value]


def _values_of(param: click.Parameter) -> Callable[[int], st.SearchStrategy[list[str]]]:
    """``n`` values of an argument."""
    return lambda n: st.lists(values_for(param), min_size=n, max_size=n)


def argv_for(path: tuple[str, ...], command: click.Command) -> st.SearchStrategy[list[str]]:
    """The command path, then any subset of its options (flags bare, others with a value) and
    its arguments, in declaration order (click does not care), now and then a stray token."""
    parts: list[st.SearchStrategy[list[str]]] = []
    for param in command.params:
        if isinstance(param, click.Option):
            flag = max(param.opts, key=len)
            if param.is_flag:
                parts.append(st.sampled_from([[], [flag]]))
            else:
                single = values_for(param).map(_after(flag))
                repeated = st.lists(single, max_size=2).map(lambda pairs: [t for p in pairs for t in p])
                parts.append(st.one_of(st.just([]), single, repeated) if param.multiple
                             else st.one_of(st.just([]), single))
        else:
            count = (st.integers(0, 3) if param.nargs == -1
                     else st.sampled_from([param.nargs, param.nargs, param.nargs, 0]))
            parts.append(count.flatmap(_values_of(param)))
    stray = st.sampled_from([[]] * 12 + [["--unknown-option"], ["extra"], ["--help"]])
    generated = st.tuples(st.tuples(*parts), stray).map(
        lambda t: [*path, *[tok for chunk in t[0] for tok in chunk], *t[1]])
    if any(p.name == "file" for p in command.params):
        # Importers: mostly `IMPORT -`, so the examples go into the generated JSONL.
        return st.one_of(st.just([*path, "-"]), st.just([*path, "-"]), generated)
    return generated


def stdin_for(path: tuple[str, ...], command: click.Command) -> st.SearchStrategy[bytes]:
    """JSONL for commands that read a FILE (given as -); nothing for the rest, so a command
    without parameters exhausts its few inputs instead of repeating them."""
    if any(p.name == "file" for p in command.params):
        return jsonl_bodies(*VALID_LINES.get(path, VALID_LINES[("notes", "import")]))
    return st.just(b"")


def seed(app: App) -> None:
    add_notes(app, *({"id": f"n{i}", "agent_id": "a", "user_id": "u", "content": f"{CANARY} likes tea, item {i}"}
                     for i in range(1, 4)))
    add_sessions(app, 5, agent_id="a", user_id="u")


@pytest.fixture
def fuzz_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Generated paths are relative to an empty directory, never the checkout."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def check_invocation(app: App, argv: list[str], stdin: bytes, before: str) -> str:
    """Invoke through the real click group, sharing the App (one store per hypothesis test).
    Returns the snapshot to compare the next example against."""
    env = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING",
           "DREAM_BROKER_URL": None, "DREAM_API_TOKENS": None, "DREAM_LLM_PROVIDER": "none"}
    result = CliRunner().invoke(main, argv, input=stdin, env=env, obj={"app": app})
    shown = f"argv={argv!r} stdin={stdin[:120]!r}\nexit={result.exit_code}\n{result.output[-2000:]}"
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        shown, result.exc_info)
    assert "Traceback" not in result.output, shown
    ran = any(tuple(argv[:len(path)]) == path and result.exit_code in codes
              for path, codes in OUTCOMES.items())
    if result.exit_code == 0 or ran:
        return store_digest(app)  # a valid command (a run that ended blocked…) may change it
    assert result.exit_code in EXIT_CODES.values(), shown  # a user error's class, never a bug
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), shown
    assert CANARY not in result.output, shown
    assert store_digest(app) == before, shown
    return before


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_answers_hostile_arguments_with_one_error_line(
    sqlite_app: App, fuzz_cwd: Path, path: tuple[str, ...], command: click.Command,
) -> None:
    """R31 on SQLite, one hypothesis run per command (200 examples in CI): generated option
    values, arguments and JSONL stdin never end in a traceback; errors are one line and leave
    every row as it was."""
    seed(sqlite_app)
    state = {"before": store_digest(sqlite_app)}

    @given(argv=argv_for(path, command), stdin=stdin_for(path, command))
    def fuzz(argv: list[str], stdin: bytes) -> None:
        state["before"] = check_invocation(sqlite_app, argv, stdin, state["before"])

    fuzz()


@pytest.mark.postgres
def test_all_commands_on_postgres_answer_hostile_arguments_with_one_error_line(
    pg_app: App, fuzz_cwd: Path,
) -> None:
    """R31 on PostgreSQL, where NUL characters, over-long ids and 64-bit integers fail in the
    database rather than in Python: one hypothesis run over every command."""
    seed(pg_app)
    state = {"before": store_digest(pg_app)}
    any_command = st.sampled_from(COMMANDS).flatmap(
        lambda pc: st.tuples(argv_for(*pc), stdin_for(*pc)))

    @given(call=any_command)
    def fuzz(call: tuple[list[str], bytes]) -> None:
        argv, stdin = call
        state["before"] = check_invocation(pg_app, argv, stdin, state["before"])

    fuzz()


def test_the_fuzzed_command_list_is_the_whole_group() -> None:
    """Every excluded command still exists (the list cannot rot) and everything else is fuzzed,
    including the ones other modules register."""
    every = {path for path, _ in leaf_commands(main)}
    assert set(NOT_FUZZED) <= every
    assert {path for path, _ in COMMANDS} == every - set(NOT_FUZZED)
    assert {("notes", "import"), ("run",), ("fuse",), ("erase",), ("undo",)} <= every
