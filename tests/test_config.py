"""Settings: defaults, nested sections, and one-line errors naming the variable."""

import pytest

from worker.config import ConfigError, load_settings


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
])
def test_bad_value_fails_with_one_line(monkeypatch: pytest.MonkeyPatch, var: str, value: str,
                                       named: str) -> None:
    """A bad value fails at start-up with one line naming the variable."""
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert named in message and "\n" not in message
