"""What a `dream` command prints besides its answer: on stderr nothing at the default level but
what needs a person (WARNING and up, readable lines), the log events only when asked for (the
servers, `dream api` and `dream mcp`, log as the Celery worker does); and a run's summary
without its zero counters."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from tests.support.factories import add_notes
from worker.app import App
from worker.cli import main
from worker.cli.common import log_setup
from worker.config import Settings

# No DREAM_LOG_* from the environment the tests run in: the defaults are what is tested.
UNSET = {"DREAM_LOG_LEVEL": None, "DREAM_LOG_FORMAT": None, "DREAM_LLM_PROVIDER": "none",
         "DREAM_BROKER_URL": None}


def _cli(app: App, *args: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(args), env={
        **UNSET, "DREAM_DATABASE_URL": app.settings.database_url, **env})


def test_run_approve_and_undo_print_no_log_lines_by_default(app: App) -> None:
    """`dream run`, `dream review approve` and `dream undo` printed about nine JSON log lines
    on stderr beside their answer (run.created, consolidate.finished, phase.finished, …): at
    the default level stderr is empty and stdout is the answer alone."""
    add_notes(app, {"id": "t1", "content": "Prefers green tea."},
              {"id": "t2", "content": "Prefers green tea in the morning."})
    ran = _cli(app, "run", "--agent", "agent-1", "--force", DREAM_APPLY_MODE="propose")
    assert (ran.exit_code, ran.stderr) == (0, ""), ran.stderr
    assert ran.stdout.startswith("run ") and "{" not in ran.stdout
    approved = _cli(app, "review", "approve", "--all", "--agent", "agent-1", "--by", "ana")
    assert (approved.exit_code, approved.stderr) == (0, ""), approved.stderr
    run_id = json.loads(_cli(app, "review", "list", "--agent", "agent-1", "--status", "any",
                             "--json").stdout)["items"][0]["applied_run_id"]
    undone = _cli(app, "undo", run_id)
    assert (undone.exit_code, undone.stderr) == (0, ""), undone.stderr
    assert undone.stdout.startswith(f"undone run {run_id}\n")


@pytest.mark.parametrize(("args", "env"), [
    (["--log-level", "info"], {}),  # the option
    ([], {"DREAM_LOG_LEVEL": "INFO"}),  # the variable, set explicitly
])
def test_log_events_are_printed_when_asked_for(app: App, args: list[str],
                                               env: dict[str, str]) -> None:
    """Asked for, a run's events are on stderr, one readable line each (console format: the
    event name, then its fields), still never on stdout."""
    add_notes(app, {"id": "t1", "content": "Prefers green tea."})
    ran = _cli(app, *args, "run", "--agent", "agent-1", "--force", **env)
    assert ran.exit_code == 0, ran.output
    created = [line for line in ran.stderr.splitlines() if "run.created" in line]
    assert len(created) == 1 and "[info" in created[0] and "trigger=cli" in created[0], ran.stderr
    assert "run.created" not in ran.stdout


@pytest.mark.parametrize(("env", "flag", "serving", "setup"), [
    # a command's defaults: warnings and errors only, readable
    ({}, None, False, ("console", "WARNING")),
    # --log-level wins over everything
    ({"log_level": "ERROR"}, "DEBUG", False, ("console", "DEBUG")),
    # DREAM_LOG_LEVEL set explicitly (even to the worker's default INFO) is honoured
    ({"log_level": "INFO"}, None, False, ("console", "INFO")),
    # DREAM_LOG_FORMAT set explicitly is honoured (auto: JSON off a terminal)
    ({"log_format": "json"}, None, False, ("json", "WARNING")),
    ({"log_format": "auto", "log_level": "INFO"}, None, False, ("auto", "INFO")),
    # the servers log as the worker does: INFO, auto format, unless configured
    ({}, None, True, ("auto", "INFO")),
    ({"log_level": "WARNING", "log_format": "json"}, None, True, ("json", "WARNING")),
    ({}, "DEBUG", True, ("auto", "DEBUG")),
])
def test_log_setup(env: dict[str, str], flag: str | None, serving: bool,
                   setup: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """(format, level) per command kind, option and explicitly set variable."""
    monkeypatch.delenv("DREAM_LOG_LEVEL", raising=False)
    monkeypatch.delenv("DREAM_LOG_FORMAT", raising=False)
    settings = Settings(database_url="sqlite://", **env)  # type: ignore[arg-type]
    assert log_setup(settings, flag, serving) == setup


def test_the_run_summary_says_what_happened_not_every_zero_counter(app: App) -> None:
    """`dream run` printed every counter of every phase, zeros included (about 25 on the
    contradictions line): a phase's line keeps its non-zero counts and its reason; `dream runs
    show` keeps them all."""
    add_notes(app, {"id": "t1", "content": "Prefers green tea."},
              {"id": "t2", "content": "Prefers green tea in the morning."})
    ran = _cli(app, "run", "--agent", "agent-1", "--force")
    assert ran.exit_code == 0, ran.output
    lines = {line.split()[0]: line for line in ran.stdout.splitlines()[1:]}
    assert "notes_revoked=2" in lines["consolidate"] and "=0," not in ran.stdout, ran.stdout
    assert not any(line.endswith("=0") for line in lines.values()), ran.stdout
    assert lines["archive"].endswith(" ms  (nothing expired or unused past retention)"), ran.stdout
    run_id = ran.stdout.split()[1]
    assert "clusters_refused=0" in _cli(app, "runs", "show", run_id).stdout
