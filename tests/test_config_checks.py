"""Settings that pass one by one but contradict each other are refused as they load, with one
line naming both variables, their values and what to change (worker/config_checks.py)."""

from __future__ import annotations

import re

import pytest

from tests.test_config import expect_warning_line
from worker.app import App
from worker.config import ConfigError, Settings, load_settings
from worker.config_checks import phase_seconds


@pytest.mark.parametrize(("env", "refused"), [
    # 900 s of model time + 100 s for the call in flight + 60 s of writes = 1,060 s
    ({"DREAM_LLM_PROVIDER": "openai"}, None),  # the defaults: 2,700 s soft limit
    ({"DREAM_LLM_PROVIDER": "openai", "DREAM_TASK_TIME_LIMIT": "1178"}, None),  # soft 1,060
    ({"DREAM_LLM_PROVIDER": "openai", "DREAM_TASK_TIME_LIMIT": "1177"},  # soft 1,059: 1 s short
     "raise DREAM_TASK_TIME_LIMIT to at least 1178 or lower DREAM_LLM_PHASE_SECONDS to at most 899"),
    ({"DREAM_LLM_PROVIDER": "fake", "DREAM_LLM_PHASE_SECONDS": "3600"},
     "raise DREAM_TASK_TIME_LIMIT to at least 4178 or lower DREAM_LLM_PHASE_SECONDS to at most 2540"),
    # a long call deadline alone can outlive the task
    ({"DREAM_LLM_PROVIDER": "openai", "DREAM_TASK_TIME_LIMIT": "600", "DREAM_LLM_TIMEOUT": "200",
      "DREAM_LLM_PHASE_SECONDS": "10"},
     "at least 756 (or lower DREAM_LLM_TIMEOUT / DREAM_LLM_MAX_RETRIES)"),
    # no model asks anything: the rule judge's phases hold only I/O
    ({"DREAM_LLM_PROVIDER": "none", "DREAM_TASK_TIME_LIMIT": "60"}, None),
])
def test_a_judging_phase_must_fit_in_the_soft_time_limit(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], refused: str | None) -> None:
    """A judging phase longer than Celery's soft limit (90 % of DREAM_TASK_TIME_LIMIT) was
    accepted, and every long phase was killed mid-way; now refused at start-up, naming both
    settings with their values and the smallest limit (or largest phase time) that fits."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if refused is None:
        settings = load_settings()
        if settings.llm_provider != "none":
            assert phase_seconds(settings) <= settings.task_soft_time_limit
        return
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert message.startswith("invalid setting: DREAM_LLM_PHASE_SECONDS (")
    assert "does not fit in DREAM_TASK_TIME_LIMIT (" in message and refused in message
    assert "\n" not in message


def test_the_limit_a_refusal_names_is_accepted() -> None:
    """The task time limit the message asks for holds the phase, and one second less does not."""
    for phase in (1.0, 900.0, 2540.0, 7777.7):
        kwargs = {"llm_provider": "openai", "llm_phase_seconds": phase}
        with pytest.raises(ValueError) as err:
            Settings(task_time_limit=10, **kwargs)  # type: ignore[arg-type]
        named = re.search(r"DREAM_TASK_TIME_LIMIT to at least (\d+)", str(err.value))
        assert named is not None
        limit = int(named.group(1))
        assert Settings(task_time_limit=limit, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            Settings(task_time_limit=limit - 1, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("cap", "beat", "refused"), [
    ("86400", "900", False),  # the defaults
    ("900", "900", False),  # one beat at most: every failure waits one interval
    ("0", "900", False),  # the back-off turned off
    ("300", "900", True),  # below the first wait: it could never hold
])
def test_the_failure_back_off_cap_is_at_least_one_beat(
        monkeypatch: pytest.MonkeyPatch, cap: str, beat: str, refused: bool) -> None:
    """A failing scope first waits one beat interval; a cap below it contradicts that."""
    monkeypatch.setenv("DREAM_FAILURE_BACKOFF_MAX_SECONDS", cap)
    monkeypatch.setenv("DREAM_BEAT_INTERVAL_SECONDS", beat)
    if not refused:
        assert load_settings().failure_backoff_max_seconds == int(cap)
        return
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(err.value) == (
        f"invalid setting: DREAM_FAILURE_BACKOFF_MAX_SECONDS ({cap}) is below "
        f"DREAM_BEAT_INTERVAL_SECONDS ({beat}), the first wait after a failed run; raise it to "
        f"at least {beat}, or set 0 to turn the back-off off; fix the environment variable and "
        "retry")


@pytest.mark.parametrize(("noop", "update", "refused"), [
    ("0.85", "0.5", False),  # the defaults
    ("0.85", "0.84", False),  # a narrow band still updates
    ("0.85", "0.85", True),  # before: accepted, and remember never answered UPDATE
    ("0.6", "0.9", True),
])
def test_the_remember_update_threshold_is_below_the_noop_one(
        monkeypatch: pytest.MonkeyPatch, noop: str, update: str, refused: bool) -> None:
    """remember decides NOOP first: an update threshold at or above it could never act."""
    monkeypatch.setenv("DREAM_REMEMBER__NOOP_THRESHOLD", noop)
    monkeypatch.setenv("DREAM_REMEMBER__UPDATE_THRESHOLD", update)
    if not refused:
        assert load_settings().remember.update_threshold == float(update)
        return
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(err.value) == (
        f"invalid setting: DREAM_REMEMBER__UPDATE_THRESHOLD ({update}) is not below "
        f"DREAM_REMEMBER__NOOP_THRESHOLD ({noop}): a match that close is a NOOP already, so "
        "remember would never UPDATE; lower the update threshold or raise the noop one; fix "
        "the environment variable and retry")


def test_a_contradicting_pair_stops_dream_run_before_any_run(sqlite_app: App) -> None:
    """`dream run` under such settings: exit 8 with one `error:` line, no run row."""
    from click.testing import CliRunner

    from tests.support.factories import add_notes
    from worker.cli import main
    from worker.store.models import DreamRunRow

    add_notes(sqlite_app, {"content": "Prefers tea."})
    result = CliRunner().invoke(main, ["run", "--agent", "agent-1", "--force"], env={
        "DREAM_DATABASE_URL": sqlite_app.settings.database_url, "DREAM_LLM_PROVIDER": "fake",
        "DREAM_TASK_TIME_LIMIT": "600", "DREAM_LOG_LEVEL": "WARNING"})
    assert result.exit_code == ConfigError.exit_code, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: invalid setting: DREAM_LLM_PHASE_SECONDS (900) does not fit "
                           "in DREAM_TASK_TIME_LIMIT (600)"), line
    with sqlite_app.uow() as uow:
        assert uow.session.query(DreamRunRow).count() == 0


@pytest.mark.parametrize(("env", "refused"), [
    # a lead-in is words several notes share: 1 was read as 2, and said nothing
    ({"DREAM_CONTRADICTIONS__LEAD_IN_NOTES": "1"},
     "DREAM_CONTRADICTIONS__LEAD_IN_NOTES is 1, but a lead-in is a run of words several notes "
     "open or close with, and one note alone shares its words with no other; set 0 to turn "
     "lead-ins off, or a count from 2 to 1000"),
    ({"DREAM_CONTRADICTIONS__LEAD_IN_NOTES": "0"}, None),
    ({"DREAM_CONTRADICTIONS__LEAD_IN_NOTES": "2"}, None),
    # pieces of at most SMALL_SCOPE_NOTES notes: at 0 no scope was cut, at 1 no piece held a pair
    ({"DREAM_CONTRADICTIONS__LARGE_SCOPE_PIECES": "true",
      "DREAM_CONTRADICTIONS__SMALL_SCOPE_NOTES": "0"},
     "DREAM_CONTRADICTIONS__LARGE_SCOPE_PIECES=true asks a scope's short notes in pieces of at "
     "most DREAM_CONTRADICTIONS__SMALL_SCOPE_NOTES notes, and that is 0: no piece holds a pair; "
     "raise DREAM_CONTRADICTIONS__SMALL_SCOPE_NOTES to at least 2, or drop "
     "DREAM_CONTRADICTIONS__LARGE_SCOPE_PIECES"),
    ({"DREAM_CONTRADICTIONS__LARGE_SCOPE_PIECES": "true",
      "DREAM_CONTRADICTIONS__SMALL_SCOPE_NOTES": "1"}, "and that is 1: no piece holds a pair"),
    ({"DREAM_CONTRADICTIONS__LARGE_SCOPE_PIECES": "true",
      "DREAM_CONTRADICTIONS__SMALL_SCOPE_NOTES": "2"}, None),
    ({"DREAM_CONTRADICTIONS__SMALL_SCOPE_NOTES": "0"}, None),  # the small scope off, alone
    # PostgreSQL counts whole milliseconds: less was raised to 1 ms
    ({"DREAM_DB_LOCK_TIMEOUT_SECONDS": "0.0004"},
     "DREAM_DB_LOCK_TIMEOUT_SECONDS (0.0004) is below one millisecond, the least PostgreSQL "
     "waits; set at least 0.001, or 0 to leave the server's own setting"),
    ({"DREAM_DB_STATEMENT_TIMEOUT_SECONDS": "0.0009"},
     "DREAM_DB_STATEMENT_TIMEOUT_SECONDS (0.0009) is below one millisecond"),
    ({"DREAM_DB_LOCK_TIMEOUT_SECONDS": "0.001", "DREAM_DB_STATEMENT_TIMEOUT_SECONDS": "0"}, None),
])
def test_a_value_the_code_would_read_as_another_is_refused(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], refused: str | None) -> None:
    """Each value passed its own bounds, and the code silently used another (a floor raised
    it, or another setting left it nothing to do); now one line naming it and what to set."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if refused is None:
        settings = load_settings()
        assert settings.contradictions.lead_in_notes != 1
        return
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert message.startswith("invalid setting: DREAM_"), message
    assert refused in message and "\n" not in message
    assert message.endswith("; fix the environment variable and retry")


def test_a_reread_value_stops_dream_gate_before_any_run(sqlite_app: App) -> None:
    """`dream gate` with DREAM_CONTRADICTIONS__LEAD_IN_NOTES=1: before, it created the run and
    the phase read 1 as 2; now exit 8, one `error:` line, no run row, no traceback."""
    from click.testing import CliRunner

    from tests.support.factories import add_notes
    from worker.cli import main
    from worker.store.models import DreamRunRow

    add_notes(sqlite_app, {"content": "Prefers tea."})
    result = CliRunner().invoke(main, ["gate"], env={
        "DREAM_DATABASE_URL": sqlite_app.settings.database_url, "DREAM_GATE_SESSIONS": "0",
        "DREAM_GATE_HOURS": "0", "DREAM_CONTRADICTIONS__LEAD_IN_NOTES": "1",
        "DREAM_LOG_LEVEL": "WARNING"})
    assert result.exit_code == ConfigError.exit_code, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: invalid setting: DREAM_CONTRADICTIONS__LEAD_IN_NOTES is 1, "
                           "but a lead-in"), line
    with sqlite_app.uow() as uow:
        assert uow.session.query(DreamRunRow).count() == 0


@pytest.mark.parametrize(("env", "refused"), [
    ({"DREAM_BUDGET__MAX_TOKENS_PER_RUN": "500"},
     "DREAM_BUDGET__MAX_TOKENS_PER_RUN (500) is not above DREAM_LLM_MAX_OUTPUT_TOKENS (1024)"),
    ({"DREAM_BUDGET__MAX_TOKENS_PER_SCOPE": "1024"},
     "DREAM_BUDGET__MAX_TOKENS_PER_SCOPE (1024) is not above DREAM_LLM_MAX_OUTPUT_TOKENS"),
    ({"DREAM_CONTRADICTIONS__MAX_TOKENS_PER_RUN": "16"},
     "DREAM_CONTRADICTIONS__MAX_TOKENS_PER_RUN (16) is not above"),
    ({"DREAM_BUDGET__MAX_TOKENS_PER_RUN": "20000"}, None),
    ({"DREAM_BUDGET__MAX_TOKENS_PER_RUN": "0"}, None),  # no tokens at all: said, not a slip
    ({"DREAM_BUDGET__MAX_TOKENS_PER_RUN": "500", "DREAM_LLM_PROVIDER": "none"}, None),
])
def test_a_token_cap_no_call_fits_under_is_refused(
        monkeypatch: pytest.MonkeyPatch, env: dict[str, str], refused: str | None) -> None:
    """A call holds its prompt's estimate plus the reply cap before it is sent: under a token
    cap no larger than DREAM_LLM_MAX_OUTPUT_TOKENS none ever was, and every run that had a
    question ended blocked on its budget, night after night. Now one line at start-up."""
    monkeypatch.setenv("DREAM_LLM_PROVIDER", "openai")
    monkeypatch.setenv("DREAM_LLM_MAX_OUTPUT_TOKENS", "1024")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if refused is None:
        assert load_settings().llm_max_output_tokens == 1024
        return
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert message.startswith("invalid setting: DREAM_") and refused in message, message
    assert "\n" not in message and message.endswith("; fix the environment variable and retry")


@pytest.mark.parametrize(("env", "line"), [
    # A statement's time includes its lock waits: the statement bound cut every lock wait
    # short, and a lock wait was reported as a runaway statement.
    ({"DREAM_DB_LOCK_TIMEOUT_SECONDS": "300", "DREAM_DB_STATEMENT_TIMEOUT_SECONDS": "300"},
     "warning: DREAM_DB_LOCK_TIMEOUT_SECONDS=300 is not below "
     "DREAM_DB_STATEMENT_TIMEOUT_SECONDS=300: a statement's time includes its lock waits, so the "
     "statement bound cancels a lock wait first and it is reported as a statement that ran too "
     "long (only `dream db upgrade`, without the statement bound, meets the lock one); lower the "
     "lock timeout below 300, or raise the statement timeout"),
    ({"DREAM_DB_LOCK_TIMEOUT_SECONDS": "60", "DREAM_DB_STATEMENT_TIMEOUT_SECONDS": "5"},
     "warning: DREAM_DB_LOCK_TIMEOUT_SECONDS=60 is not below DREAM_DB_STATEMENT_TIMEOUT_SECONDS=5"),
    ({"DREAM_DB_LOCK_TIMEOUT_SECONDS": "299.5"}, None),
    ({"DREAM_DB_LOCK_TIMEOUT_SECONDS": "600", "DREAM_DB_STATEMENT_TIMEOUT_SECONDS": "0"}, None),
    ({"DREAM_DB_LOCK_TIMEOUT_SECONDS": "0", "DREAM_DB_STATEMENT_TIMEOUT_SECONDS": "5"}, None),
    # 8,000 characters of up to 4 bytes each, plus 4,096 for the rest of the request: a note
    # the host limit accepts was refused unread (413) by the body limit.
    ({"DREAM_API_MAX_BODY_BYTES": "36095"},
     "warning: DREAM_API_MAX_BODY_BYTES=36095 is below what a text of "
     "DREAM_HOST__MAX_NOTE_CHARS=8000 characters may take in a request, 36096 bytes (UTF-8 "
     "takes up to 4 bytes a character, plus 4096 for the rest of the request): the API and MCP "
     "refuse such a text unread although its limit allows it; raise DREAM_API_MAX_BODY_BYTES "
     "to at least 36096, or lower DREAM_HOST__MAX_NOTE_CHARS"),
    ({"DREAM_API_MAX_BODY_BYTES": "36096"}, None),
    ({"DREAM_API_MAX_BODY_BYTES": "8192", "DREAM_HOST__MAX_NOTE_CHARS": "1000",
      "DREAM_HOST__MAX_FUSED_CHARS": "1000"}, None),
    # the fused text's own limit (2,000), when it is the longer one
    ({"DREAM_API_MAX_BODY_BYTES": "8192", "DREAM_HOST__MAX_NOTE_CHARS": "1000"},
     "warning: DREAM_API_MAX_BODY_BYTES=8192 is below what a text of "
     "DREAM_HOST__MAX_FUSED_CHARS=2000 characters may take in a request, 12096 bytes"),
    # A protected note goes once unread past both its agent's retention and the protected
    # days: at or below the retention (90 for an agent not in the registry) it went as any.
    ({"DREAM_ARCHIVE__PROTECTED_INACTIVE_DAYS": "90"},
     "warning: DREAM_ARCHIVE__PROTECTED_INACTIVE_DAYS=90 is not above 90, the retention of an "
     "agent not in the registry: archive takes a protected note once it is unread past both, so "
     "such agents' protected notes go as soon as any other (and so do those of an agent whose "
     "note_retention_days is at least as long); raise it above the retentions"),
    ({"DREAM_ARCHIVE__PROTECTED_INACTIVE_DAYS": "91"}, None),
])
def test_a_setting_another_defeats_is_one_warning_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        env: dict[str, str], line: str | None) -> None:
    """Accepted, and silently cut short by another setting; one `warning:` line now (a
    migration, a shorter note or an agent's own retention may still give it effect), none when
    it acts. Settings still load."""
    expect_warning_line(monkeypatch, capsys, env, line)
