"""Settings: defaults, nested sections, and one-line errors naming the variable."""

import pytest

from worker import config
from worker.app import App
from worker.config import ConfigError, load_settings, warn_unknown_variables
from worker.urls import masked_url


def test_defaults_are_the_embedded_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no configuration: SQLite, rule-based judge, hashing embedder, 24 h / 5 sessions."""
    for key in ("DREAM_DATABASE_URL", "DREAM_LLM_PROVIDER", "DREAM_EMBEDDING_PROVIDER"):
        monkeypatch.delenv(key, raising=False)
    s = load_settings()
    assert s.database_url.startswith("sqlite:///")
    assert s.llm_provider == "none" and s.embedding_provider == "hashing"
    assert (s.gate_hours, s.gate_sessions) == (24, 5)


def test_nested_section_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nested thresholds are set with a double underscore."""
    monkeypatch.setenv("DREAM_CONSOLIDATE__THRESHOLD", "0.65")
    assert load_settings().consolidate.threshold == 0.65


@pytest.mark.parametrize(("var", "value", "named"), [
    ("DREAM_GATE_HOURS", "soon", "DREAM_GATE_HOURS"),
    ("DREAM_LLM_PROVIDER", "gpt", "DREAM_LLM_PROVIDER"),
    ("DREAM_CONSOLIDATE__THRESHOLD", "1.7", "DREAM_CONSOLIDATE__THRESHOLD"),
    # R31 siblings: non-finite values pass a lower bound; durations past a century overflow the
    # timestamp arithmetic (a traceback after a run row had been written)
    ("DREAM_GATE_HOURS", "inf", "DREAM_GATE_HOURS"),
    ("DREAM_LLM_TIMEOUT", "nan", "DREAM_LLM_TIMEOUT"),
    ("DREAM_LLM_TIMEOUT", "1e300", "DREAM_LLM_TIMEOUT"),
    ("DREAM_LEASE_SECONDS", "99999999999999", "DREAM_LEASE_SECONDS"),
    ("DREAM_QUEUED_TIMEOUT_SECONDS", "99999999999999", "DREAM_QUEUED_TIMEOUT_SECONDS"),
    ("DREAM_CONTRADICTIONS__NEWER_WINS_DAYS", "99999999", "DREAM_CONTRADICTIONS__NEWER_WINS_DAYS"),
    ("DREAM_API_MAX_BODY_BYTES", "10", "DREAM_API_MAX_BODY_BYTES"),
    # free strings that only take some values: each failed later with a traceback
    ("DREAM_LOG_LEVEL", "LOUD", "DREAM_LOG_LEVEL: Input should be 'DEBUG', 'INFO'"),
    ("DREAM_BROKER_URL", "foo://x", "unknown scheme 'foo://'; use redis://, rediss://, amqp://"),
    ("DREAM_BROKER_URL", "localhost", "DREAM_BROKER_URL: 'localhost' is not a URL"),
    ("DREAM_BROKER_URL", "redis://127.0.0.1:abc/0", "port of 'redis://127.0.0.1:abc/0' is not a number"),
    ("DREAM_BROKER_URL", "redis://a:6379/0;nats://b", "unknown scheme 'nats://'"),
    ("DREAM_RESULT_BACKEND", "foo://x", "DREAM_RESULT_BACKEND: unknown scheme 'foo://'; use redis://"),
    # the SQL checker's tables: before, refused only when a run built the checker (the run
    # failed after its row was written), and never while CHECKER=registry
    ("DREAM_PRUNE__SQL_AGENTS", "agents; drop table notes", "DREAM_PRUNE__SQL_AGENTS must look like table.id_column"),
    ("DREAM_PRUNE__SQL_USERS", "users.id", "DREAM_PRUNE__SQL_USERS must look like"),
    ("DREAM_PRUNE__SQL_COMPANIES", "a.b.c.d.e", "DREAM_PRUNE__SQL_COMPANIES must look like"),
    ("DREAM_PRUNE__SQL_CONVERSATIONS", "conv.id.st-atus", "DREAM_PRUNE__SQL_CONVERSATIONS must look like"),
    # model and embedding endpoints: before, every call failed with "APIConnectionError" and
    # the run (its deterministic phases applied) ended blocked as "model unavailable"
    ("DREAM_LLM_BASE_URL", "localhost:11434/v1",
     "DREAM_LLM_BASE_URL: not an http:// or https:// URL with a host; use e.g. http://"),
    ("DREAM_LLM_BASE_URL", "ftp://models/v1", "DREAM_LLM_BASE_URL: not an http:// or https://"),
    ("DREAM_LLM_BASE_URL", "http://", "DREAM_LLM_BASE_URL: not an http:// or https:// URL with a host"),
    ("DREAM_LLM_BASE_URL", "http://ollama:99999/v1", "DREAM_LLM_BASE_URL: its port is not a number"),
    ("DREAM_LLM_BASE_URL", "http://oll ama/v1", "DREAM_LLM_BASE_URL: not a URL a client can reach"),
    ("DREAM_EMBEDDING_BASE_URL", "embeddings.local/v1", "DREAM_EMBEDDING_BASE_URL: not an http://"),
    # model names: before, an empty one sent every call to no model, and one past the
    # 200-character column (run_steps.model, notes.embedding_model) failed PostgreSQL's write
    ("DREAM_LLM_MODEL", "", "DREAM_LLM_MODEL: String should have at least 1 character"),
    ("DREAM_LLM_MODEL", "m" * 201, "DREAM_LLM_MODEL: String should have at most 200 characters"),
    ("DREAM_EMBEDDING_MODEL", "", "DREAM_EMBEDDING_MODEL: String should have at least 1"),
    ("DREAM_EMBEDDING_MODEL", "e" * 201, "DREAM_EMBEDDING_MODEL: String should have at most 200"),
    # counts with no ceiling: a thread per concurrent call (100,000 exhausted the process),
    # more inputs per embedding request than OpenAI's endpoint takes, attempts and retries
    # that never give up
    ("DREAM_LLM_CONCURRENCY", "100000", "DREAM_LLM_CONCURRENCY: Input should be less than or equal to 256"),
    ("DREAM_EMBEDDING_BATCH_SIZE", "5000", "DREAM_EMBEDDING_BATCH_SIZE: Input should be less than or equal to 2048"),
    ("DREAM_MAX_ATTEMPTS", "99999999999", "DREAM_MAX_ATTEMPTS: Input should be less than or equal to 100"),
    ("DREAM_LLM_MAX_RETRIES", "1000", "DREAM_LLM_MAX_RETRIES: Input should be less than or equal to 20"),
    # a reply cap below what one short verdict takes would cut every reply
    ("DREAM_LLM_MAX_OUTPUT_TOKENS", "5", "DREAM_LLM_MAX_OUTPUT_TOKENS: Input should be greater than or equal to 16"),
    # PostgreSQL's bounds: a negative wait means nothing, and past a day nobody waits
    ("DREAM_DB_LOCK_TIMEOUT_SECONDS", "-1", "DREAM_DB_LOCK_TIMEOUT_SECONDS: Input should be greater than or equal to 0"),
    ("DREAM_DB_STATEMENT_TIMEOUT_SECONDS", "-0.5", "DREAM_DB_STATEMENT_TIMEOUT_SECONDS: Input should be greater than or equal to 0"),
    ("DREAM_DB_STATEMENT_TIMEOUT_SECONDS", "1e9", "DREAM_DB_STATEMENT_TIMEOUT_SECONDS: Input should be less than or equal to 86400"),
    # a whole section as one variable is parsed as JSON: a SettingsError traceback before
    ("DREAM_CONSOLIDATE", "threshold=0.65", "DREAM_CONSOLIDATE: not valid JSON; give a JSON object"),
    ("DREAM_GUARD", "{max_retire_share: 0.2}", "DREAM_GUARD: not valid JSON; give a JSON object"),
    # a key twice in a section's JSON: the last was taken silently (here the valid 0.5)
    ("DREAM_CONSOLIDATE", '{"threshold": 1.7, "threshold": 0.5}',
     "invalid setting DREAM_CONSOLIDATE: key 'threshold' appears twice in its JSON"),
])
def test_bad_value_fails_with_one_line(monkeypatch: pytest.MonkeyPatch, var: str, value: str,
                                       named: str) -> None:
    """A bad value fails at start-up with one line naming the variable."""
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert named in message and "\n" not in message


@pytest.mark.parametrize("nested", ["DREAM_CONSOLIDATE__THRESHOLD", "dream_consolidate__threshold"])
def test_section_field_given_both_ways_fails(monkeypatch: pytest.MonkeyPatch, nested: str) -> None:
    """A field given in a section's JSON and by its nested variable: the nested one was taken
    silently (here the valid 0.7 over the JSON's 0.5); now one line naming both."""
    monkeypatch.setenv("DREAM_CONSOLIDATE", '{"threshold": 0.5}')
    monkeypatch.setenv(nested, "0.7")
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert "DREAM_CONSOLIDATE:" in message and nested in message and "\n" not in message
    assert "set it one way only" in message


def test_section_json_and_other_nested_field_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAM_CONSOLIDATE", '{"threshold": 0.5}')
    monkeypatch.setenv("DREAM_CONSOLIDATE__MAX_CHARS", "400")
    settings = load_settings()
    assert (settings.consolidate.threshold, settings.consolidate.max_chars) == (0.5, 400)


@pytest.mark.parametrize(("minimum", "maximum", "refused"), [
    ("8", "7", True), ("3", "2", True),  # no cluster can be both: every run found none
    ("7", "7", False), ("2", "7", False),
])
def test_cluster_sizes_must_be_in_order(monkeypatch: pytest.MonkeyPatch, minimum: str,
                                        maximum: str, refused: bool) -> None:
    monkeypatch.setenv("DREAM_CONSOLIDATE__MIN_CLUSTER_SIZE", minimum)
    monkeypatch.setenv("DREAM_CONSOLIDATE__MAX_CLUSTER_SIZE", maximum)
    if not refused:
        assert load_settings().consolidate.min_cluster_size == int(minimum)
        return
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(err.value) == (
        f"invalid setting: DREAM_CONSOLIDATE__MIN_CLUSTER_SIZE ({minimum}) is above "
        f"DREAM_CONSOLIDATE__MAX_CLUSTER_SIZE ({maximum}); lower the one or raise the other; "
        "fix the environment variable and retry")


@pytest.mark.parametrize(("var", "value", "expected"), [
    ("DREAM_LOG_LEVEL", "debug", "DEBUG"),  # any case, as before
    ("DREAM_BROKER_URL", "amqp://guest@rabbit:5672//", "amqp://guest@rabbit:5672//"),
    ("DREAM_BROKER_URL", "sqla+postgresql://u@h/db", "sqla+postgresql://u@h/db"),
    ("DREAM_BROKER_URL", "redis://a:6379/0;redis://b:6379/0", "redis://a:6379/0;redis://b:6379/0"),
    ("DREAM_RESULT_BACKEND", "db+postgresql://u@h/db", "db+postgresql://u@h/db"),
    ("DREAM_RESULT_BACKEND", "rpc://", "rpc://"),
    ("DREAM_LLM_BASE_URL", "http://localhost:11434/v1", "http://localhost:11434/v1"),
    ("DREAM_LLM_BASE_URL", "https://api.openai.com/v1", "https://api.openai.com/v1"),
    ("DREAM_LLM_BASE_URL", "http://[::1]:8080/v1", "http://[::1]:8080/v1"),
    ("DREAM_EMBEDDING_BASE_URL", "HTTPS://Embed.Example/v1", "HTTPS://Embed.Example/v1"),
])
def test_values_celery_and_logging_take_still_load(monkeypatch: pytest.MonkeyPatch, var: str,
                                                   value: str, expected: str) -> None:
    monkeypatch.setenv(var, value)
    assert getattr(load_settings(), var.removeprefix("DREAM_").lower()) == expected


@pytest.mark.parametrize(("var", "url", "shown"), [
    ("DREAM_BROKER_URL", "foo://bob:hunter2@host:1/0", "foo://bob:**@host:1/0"),
    ("DREAM_LLM_BASE_URL", "ftp://bob:hunter2@host:1/v1", "ftp://bob:**@host:1/v1"),
])
def test_a_bad_url_setting_never_echoes_its_password(monkeypatch: pytest.MonkeyPatch, var: str,
                                                     url: str, shown: str) -> None:
    monkeypatch.setenv(var, url)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "hunter2" not in str(err.value) and shown in str(err.value)


def test_a_model_url_without_a_scheme_stops_dream_run_before_any_run(sqlite_app: App) -> None:
    """`dream run` with DREAM_LLM_BASE_URL=localhost:11434/v1 (the scheme left out): exit 8 with
    one line, no run row (before: a run whose prune and archive applied, ended blocked as
    "model unavailable ... (APIConnectionError)")."""
    from click.testing import CliRunner

    from tests.support.factories import add_notes
    from worker.cli import main
    from worker.store.models import DreamRunRow

    add_notes(sqlite_app, {"content": "Prefers tea."})
    result = CliRunner().invoke(main, ["run", "--agent", "agent-1", "--force"], env={
        "DREAM_DATABASE_URL": sqlite_app.settings.database_url, "DREAM_LLM_PROVIDER": "openai",
        "DREAM_LLM_BASE_URL": "localhost:11434/v1", "DREAM_LOG_LEVEL": "WARNING"})
    assert result.exit_code == ConfigError.exit_code, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: invalid setting DREAM_LLM_BASE_URL: not an http://"), line
    with sqlite_app.uow() as uow:
        assert uow.session.query(DreamRunRow).count() == 0


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),  # no password: nothing masked
    ("amqp://guest@h//", "amqp://guest@h//"),
    ("redis://:s3cret@h:6379/0", "redis://:**@h:6379/0"),
    ("amqp://u:p@ss@h//", "amqp://u:**@h//"),
    ("redis://:a@x;redis://:b@y", "redis://:**@x;redis://:**@y"),
])
def test_masked_url_masks_only_a_password_that_is_there(url: str, shown: str) -> None:
    assert masked_url(url) == shown


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which unknown variables this process has already warned about."""
    monkeypatch.setattr(config, "_warned", set())


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.parametrize(("var", "hint"), [
    ("DREAM_GATE_HOUR", "did you mean DREAM_GATE_HOURS?"),
    ("DREAM_CONSOLIDATE__TRESHOLD", "did you mean DREAM_CONSOLIDATE__THRESHOLD?"),
    ("DREAM_CONSOLIDATE__BOGUS", "no dream-worker setting is called that"),
    ("dream_log_levl", "did you mean DREAM_LOG_LEVEL?"),
])
def test_an_unknown_variable_is_one_warning_line_once(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], var: str,
        hint: str) -> None:
    """A typo was silently ignored; now one stderr line names it and the closest setting, once
    per process, and settings still load (other tools may share the prefix)."""
    monkeypatch.setenv(var, "5")
    load_settings()
    load_settings()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"warning: unknown variable {var} is ignored ({hint})"]


@pytest.mark.usefixtures("fresh_warnings")
def test_known_variables_do_not_warn(capsys: pytest.CaptureFixture[str]) -> None:
    """Every setting, a section given whole as JSON, and the worker's other variables."""
    warn_unknown_variables({"DREAM_GATE_HOURS": "1", "DREAM_CONSOLIDATE__THRESHOLD": "0.6",
                            "DREAM_CONSOLIDATE": "{}", "DREAM_CRASH_AT": "x",
                            "DREAM_RESOURCES_DIR": "/tmp", "OTEL_TRACES_EXPORTER": "otlp",
                            "dream_log_level": "info", "DREAMY": "1"})
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("env", "named"), [
    ({"DREAM_PRUNE__CHECKER": "sql", "DREAM_PRUNE__SQL_USERS": "users.id"}, "DREAM_PRUNE__SQL_USERS"),
    ({"DREAM_PRUNE__ABSENCE_MEANS_DELETED": "true"}, "DREAM_PRUNE__ABSENCE_MEANS_DELETED"),
])
def test_a_check_that_names_its_variable_is_said_once(monkeypatch: pytest.MonkeyPatch,
                                                      env: dict[str, str], named: str) -> None:
    """The line names the variable once, not again as ``DREAM_PRUNE`` with the section's
    values as a dict (before: ``invalid setting DREAM_PRUNE: DREAM_PRUNE__… (got {…})``)."""
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert message.startswith(f"invalid setting: {named}") and message.count(named) == 1
    assert "{" not in message, message


@pytest.mark.parametrize("spec", ["host_users.user_key.state", "host_users.user_key.state.why"])
def test_a_well_formed_host_table_loads(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    monkeypatch.setenv("DREAM_PRUNE__CHECKER", "sql")
    monkeypatch.setenv("DREAM_PRUNE__SQL_USERS", spec)
    assert load_settings().prune.sql_users == spec


def test_a_bad_host_table_stops_dream_run_before_any_run(sqlite_app: App) -> None:
    """`dream run` with DREAM_PRUNE__CHECKER=sql and a malformed table: exit 8 with one line
    naming the variable, and no run row (before: the run was created and failed in prune)."""
    from click.testing import CliRunner

    from tests.support.factories import add_notes
    from worker.cli import main
    from worker.store.models import DreamRunRow

    add_notes(sqlite_app, {"content": "Prefers tea."})
    result = CliRunner().invoke(main, ["run", "--agent", "agent-1", "--force"], env={
        "DREAM_DATABASE_URL": sqlite_app.settings.database_url, "DREAM_LLM_PROVIDER": "none",
        "DREAM_LOG_LEVEL": "WARNING", "DREAM_PRUNE__CHECKER": "sql",
        "DREAM_PRUNE__SQL_AGENTS": "host_agents.id"})
    assert result.exit_code == ConfigError.exit_code == 8, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: invalid setting: DREAM_PRUNE__SQL_AGENTS must look like"), line
    assert result.stdout == ""
    with sqlite_app.uow() as uow:
        assert uow.session.query(DreamRunRow).count() == 0


@pytest.mark.usefixtures("fresh_warnings")
def test_a_staleness_bound_without_an_idle_wait_is_one_warning_line_once(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """DREAM_GATE_MAX_STALE_HOURS only ends an idle wait: alone it did nothing and said
    nothing. Now one stderr line says so, once; settings still load (an agent's own idle wait
    gives it effect); with DREAM_GATE_IDLE_MINUTES set, no line."""
    monkeypatch.setenv("DREAM_GATE_MAX_STALE_HOURS", "48")
    assert load_settings().gate_max_stale_hours == 48
    load_settings()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "warning: DREAM_GATE_MAX_STALE_HOURS=48 only ends an idle wait")
    assert "set DREAM_GATE_IDLE_MINUTES" in lines[0]
    monkeypatch.setenv("DREAM_GATE_IDLE_MINUTES", "30")
    monkeypatch.setattr(config, "_warned", set())
    load_settings()
    assert capsys.readouterr().err == ""


@pytest.mark.usefixtures("fresh_warnings")
def test_the_sql_checker_without_host_tables_is_one_warning_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """DREAM_PRUNE__CHECKER=sql with no DREAM_PRUNE__SQL_* table: prune checked nothing, each
    run said "succeeded", and nothing said why. One warning line now; with a table, none."""
    monkeypatch.setenv("DREAM_PRUNE__CHECKER", "sql")
    assert load_settings().prune.checker == "sql"
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "warning: DREAM_PRUNE__CHECKER=sql reads the host tables"), lines
    monkeypatch.setenv("DREAM_PRUNE__SQL_USERS", "host_users.id.state")
    monkeypatch.setattr(config, "_warned", set())
    load_settings()
    assert capsys.readouterr().err == ""


@pytest.mark.usefixtures("fresh_warnings")
def test_every_inert_setting_gets_its_own_warning_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Two inert settings at once: only the first was named, so fixing it revealed the second
    on the next start. Each gets its own line, once per process."""
    monkeypatch.setenv("DREAM_GATE_MAX_STALE_HOURS", "48")
    monkeypatch.setenv("DREAM_PRUNE__CHECKER", "sql")
    load_settings()
    load_settings()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" ", 2)[:2] for line in lines] == [
        ["warning:", "DREAM_GATE_MAX_STALE_HOURS=48"], ["warning:", "DREAM_PRUNE__CHECKER=sql"]]


@pytest.mark.usefixtures("fresh_warnings")
def test_batch_pricing_without_an_openai_provider_is_one_warning_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """DREAM_LLM_BATCH=true "needs DREAM_LLM_PROVIDER=openai" (README) but with the rule judge
    or the fake model it batched nothing and said nothing. One warning line now; with the
    openai provider, none."""
    monkeypatch.setenv("DREAM_LLM_BATCH", "true")
    assert load_settings().llm_batch is True
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["warning: DREAM_LLM_BATCH=true batches through an OpenAI-compatible "
                     "provider, and DREAM_LLM_PROVIDER is 'none': nothing is batched; set "
                     "DREAM_LLM_PROVIDER=openai, or drop DREAM_LLM_BATCH"], lines
    monkeypatch.setenv("DREAM_LLM_PROVIDER", "openai")
    monkeypatch.setenv("DREAM_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setattr(config, "_warned", set())
    load_settings()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("tokens", [
    "{not json",
    "[]",
    '{"short": {"role": "admin"}}',
    '{"0123456789abcdefg": {"role": "root"}}',
    '{"0123456789abcdefg": {"agent_id": "a", "user": "u"}}',
])
def test_a_malformed_token_setting_stops_every_command_before_any_write(
        sqlite_app: App, tokens: str) -> None:
    """DREAM_API_TOKENS is checked with the other settings, by every `dream` command (a real
    process): `dream db upgrade` (the deploy's first step) and `dream run` exit 8 with one line
    naming the variable and what to do, never the token, and write nothing: no database file,
    no run row (before: only `dream api` and `dream mcp --transport http` looked at it)."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.factories import add_notes
    from worker.store.models import DreamRunRow

    dream = str(Path(sys.executable).with_name("dream"))
    add_notes(sqlite_app, {"content": "Prefers tea."})
    fresh = Path(sqlite_app.settings.database_url.removeprefix("sqlite:///")).with_name("new.db")
    env = {"PATH": "/usr/bin:/bin", "DREAM_LLM_PROVIDER": "none", "DREAM_LOG_LEVEL": "WARNING",
           "DREAM_API_TOKENS": tokens}
    for url, args in ((f"sqlite:///{fresh}", ["db", "upgrade"]),
                      (sqlite_app.settings.database_url, ["run", "--agent", "agent-1", "--force"])):
        done = subprocess.run([dream, *args], env={**env, "DREAM_DATABASE_URL": url},
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == ConfigError.exit_code, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("error: invalid setting: DREAM_API_TOKENS "), line
        assert line.endswith("fix the environment variable and retry"), line
        assert "0123456789abcdefg" not in line and done.stdout == ""
    assert not fresh.exists()
    with sqlite_app.uow() as uow:
        assert uow.session.query(DreamRunRow).count() == 0


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite+pysqlite:///:memory:",
                                 "sqlite:///file:dream?mode=memory&uri=true"])
def test_an_in_memory_sqlite_database_is_refused_at_start_up(
        monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """An in-memory SQLite database lasts one command: `dream db upgrade` reported success,
    then every other command said to run it, for ever. Refused at start-up with one line
    (every command, server and Celery process loads its settings so); Settings built in code
    (the tests' throw-away stores) still take it."""
    monkeypatch.setenv("DREAM_DATABASE_URL", url)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert str(err.value) == (
        "invalid setting DREAM_DATABASE_URL: an in-memory SQLite database lasts one command "
        "(`dream db upgrade` would build a schema nothing after it finds); use sqlite:///PATH "
        f"(got {url!r}); fix the environment variable and retry")
    assert config.Settings(database_url=url).database_url == url


@pytest.mark.parametrize("url", ["sqlite:////tmp/dream.db", "sqlite:///./memory.db",
                                 "postgresql://u@localhost/memory"])
def test_a_database_on_disk_is_not_taken_for_one_in_memory(
        monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("DREAM_DATABASE_URL", url)
    assert load_settings().database_url == url


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.parametrize(("stale", "hours", "warned"), [
    ("12", "24", True), ("24", "24", True),  # stale once due: the idle wait never held a scope
    ("30", "24", False), ("1", "0", False),
])
def test_a_staleness_bound_within_the_gate_hours_is_one_warning_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stale: str,
        hours: str, warned: bool) -> None:
    """Staleness counts from the last dream, and a scope is due DREAM_GATE_HOURS after it: a
    bound no longer than those hours ended every idle wait as it began, silently. One line
    now (an agent's own gate_hours may still give it effect); settings still load."""
    monkeypatch.setenv("DREAM_GATE_IDLE_MINUTES", "30")
    monkeypatch.setenv("DREAM_GATE_MAX_STALE_HOURS", stale)
    monkeypatch.setenv("DREAM_GATE_HOURS", hours)
    assert load_settings().gate_max_stale_hours == float(stale)
    lines = capsys.readouterr().err.splitlines()
    if not warned:
        assert lines == []
        return
    assert lines == [
        f"warning: DREAM_GATE_MAX_STALE_HOURS={stale} is not above DREAM_GATE_HOURS={hours}: "
        "staleness counts from the last dream, so a scope that has dreamt is stale once it is "
        "due and never waits DREAM_GATE_IDLE_MINUTES for quiet (only a first dream does); "
        f"raise it above {hours} (the hours plus the longest wait), or drop "
        "DREAM_GATE_IDLE_MINUTES"], lines


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.parametrize("phase", ["PRUNE", "ARCHIVE"])
def test_a_model_review_without_a_model_is_one_warning_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], phase: str) -> None:
    """DREAM_<PHASE>__REVIEW=llm with the rule judge: the review was skipped and the notes
    archived unreviewed, saying nothing. One warning line now; with a model, none."""
    monkeypatch.setenv(f"DREAM_{phase}__REVIEW", "llm")
    load_settings()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"warning: DREAM_{phase}__REVIEW=llm asks a model, and DREAM_LLM_PROVIDER "
                     "is 'none': notes are archived unreviewed; set DREAM_LLM_PROVIDER, or drop "
                     f"DREAM_{phase}__REVIEW"], lines
    monkeypatch.setenv("DREAM_LLM_PROVIDER", "fake")
    monkeypatch.setattr(config, "_warned", set())
    load_settings()
    assert capsys.readouterr().err == ""


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.parametrize(("env", "line"), [
    # 0 sessions are always reached, so the changed notes never counted: only the hours did
    ({"DREAM_GATE_NOTES": "20", "DREAM_GATE_SESSIONS": "0"},
     "warning: DREAM_GATE_NOTES=20 counts instead of the sessions, and DREAM_GATE_SESSIONS is "
     "0, always reached: a scope is due every DREAM_GATE_HOURS (24) whatever changed; set "
     "DREAM_GATE_SESSIONS above 0 for the notes to count, or drop DREAM_GATE_NOTES"),
    ({"DREAM_GATE_NOTES": "20", "DREAM_GATE_SESSIONS": "0", "DREAM_GATE_HOURS": "0"}, None),
    ({"DREAM_GATE_NOTES": "20", "DREAM_GATE_SESSIONS": "1"}, None),
    # the built-in registry reads no host table
    ({"DREAM_PRUNE__SQL_USERS": "host_users.id.state"},
     "warning: DREAM_PRUNE__SQL_USERS names a host table only DREAM_PRUNE__CHECKER=sql reads, "
     "and the checker is 'registry': prune checks the built-in registry instead (unless the "
     "host sets app.reference_checker); set DREAM_PRUNE__CHECKER=sql, or unset "
     "DREAM_PRUNE__SQL_USERS"),
    ({"DREAM_PRUNE__SQL_USERS": "host_users.id.state", "DREAM_PRUNE__SQL_AGENTS": "a.id.s"},
     "warning: DREAM_PRUNE__SQL_AGENTS, DREAM_PRUNE__SQL_USERS name host tables only"),
    ({"DREAM_PRUNE__SQL_USERS": "host_users.id.state", "DREAM_PRUNE__CHECKER": "sql"}, None),
])
def test_a_setting_another_leaves_nothing_to_do_is_one_warning_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        env: dict[str, str], line: str | None) -> None:
    """Accepted and silently without effect as the others stood; one `warning:` line now (an
    agent's own gate settings or a host's checker may still give it effect), none when it acts."""
    expect_warning_line(monkeypatch, capsys, env, line)


def expect_warning_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                        env: dict[str, str], line: str | None) -> None:
    """Settings load with ``env`` set, saying on stderr one line starting with ``line``, or
    nothing when ``line`` is None (each warning counted afresh: once per process otherwise)."""
    monkeypatch.setattr(config, "_warned", set())
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    load_settings()
    lines = capsys.readouterr().err.splitlines()
    if line is None:
        assert lines == []
        return
    assert len(lines) == 1 and lines[0].startswith(line), lines
