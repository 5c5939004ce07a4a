"""Settings for every shell (CLI, Celery, API); the only module that reads os.environ.

Nested sections use a double underscore: ``DREAM_CONSOLIDATE__THRESHOLD=0.65``.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from pathlib import Path
from typing import Any, Literal, get_args

import platformdirs
from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from worker.config_checks import (
    conflict_problem,
    duration_problem,
    inert_settings,
    memory_store_problem,
    reread_problem,
    section_key_twice,
    soft_time_limit,
)
from worker.config_sections import BudgetSettings as BudgetSettings  # re-exported
from worker.config_sections import HostSettings, PrivacySettings, RememberSettings
from worker.errors import ConfigError as ConfigError  # re-exported: callers import it here
from worker.tokens import parse_tokens
from worker.urls import backend_url_problem, broker_url_problem, http_url_problem, masked_url

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)


def default_database_url() -> str:
    data_dir = Path(platformdirs.user_data_dir("dream-worker"))
    return f"sqlite:///{data_dir / 'dream.db'}"


class ConsolidateSettings(BaseModel):
    threshold: float = Field(0.60, ge=0.0, le=1.0)
    # Cosine a pair needs before the rule judge even compares texts. 0.70 ≈ the 5th percentile
    # of the pairs its text rules settle on SICK (hashing embedder); the rules carry the safety.
    rule_threshold: float = Field(0.70, ge=0.0, le=1.0)
    min_cluster_size: int = Field(3, ge=2)
    max_cluster_size: int = Field(7, ge=2)
    max_chars: int = Field(300, ge=20)
    max_generation: int = Field(3, ge=1)
    block_on_omission: bool = False
    # Topical clusters (a model judge only): notes no cosine cluster took, sharing a word at
    # most this many of the scope's notes hold (below 2 turns the pass off), at least this alike,
    # not naming two different subjects (worker.similarity.terms.topical_pairs).
    term_max_notes: int = Field(8, ge=0, le=64)
    term_min_similarity: float = Field(0.35, ge=-1.0, le=1.0)

    @model_validator(mode="after")
    def _sizes_in_order(self) -> ConsolidateSettings:
        # Above the maximum, no cluster a model judges can be both: every run found none and
        # said nothing about why (the rule judge's pairs ignore the minimum either way).
        if self.min_cluster_size > self.max_cluster_size:
            raise ValueError(f"DREAM_CONSOLIDATE__MIN_CLUSTER_SIZE ({self.min_cluster_size}) is "
                             f"above DREAM_CONSOLIDATE__MAX_CLUSTER_SIZE ({self.max_cluster_size}); "
                             "lower the one or raise the other")
        return self


class ContradictionSettings(BaseModel):
    threshold: float = Field(0.70, ge=0.0, le=1.0)
    # Same-frame candidates: notes equal but for spans of at most this many words together.
    frame_max_span: int = Field(4, ge=0, le=10)
    frame_min_words: int = Field(1, ge=1)  # words both notes share around the spans
    # Shared-term candidates: short notes sharing a word at most this many of the scope's notes
    # hold (below 2 turns the source off), at least this alike.
    term_max_notes: int = Field(8, ge=0, le=64)
    term_min_similarity: float = Field(0.0, ge=-1.0, le=1.0)
    # Same-frame pairs once a lead-in ("… the user mentioned that") is set aside: notes a
    # lead-in must open or close (worker.similarity.lead_ins; 0 turns it off; 1 is refused).
    lead_in_notes: int = Field(5, ge=0, le=1000)
    # Below the threshold down to this cosine: pairs the text rules settle (≥ threshold: none).
    contained_min_similarity: float = Field(0.60, ge=0.0, le=1.0)
    topic_size: int = Field(8, ge=2, le=50)  # notes of one topic asked about together
    small_scope_notes: int = Field(60, ge=0, le=100)  # model: a scope this small asked whole
    # A retirement only the whole-scope ask found is asked again alone before it applies
    # (worker.phases.contradictions.confirm): a model lumping two attributes must err twice.
    confirm_whole: bool = True
    large_scope_pieces: bool = False  # up to 3× that asked in pieces too (cost: square; needs ≥ 2)
    notes_per_call: int = Field(24, ge=2)  # trusted topics packed into one prompt up to this
    max_calls_per_run: int | None = Field(20, ge=0)  # per run and scope, inside the run's
    max_tokens_per_run: int | None = Field(None, ge=0)
    max_open_steps: int = Field(50, ge=0)  # rule judge: open pairs recorded as child steps
    min_confidence: float = Field(0.7, ge=0.0, le=1.0)
    newer_wins_days: int = Field(0, ge=0)  # 0: later by more than worker.clock.SKEW (1 h)
    high_importance: float = Field(0.8, ge=0.0, le=1.0)


class PruneSettings(BaseModel):
    max_notes_per_run: int = Field(200, ge=0)
    review: Literal["archive", "llm"] = "archive"
    checker: Literal["registry", "sql"] = "registry"
    # SQL checker: "table.id_column.status_column" per entity type, read-only look-ups.
    sql_agents: str | None = None
    sql_users: str | None = None
    sql_companies: str | None = None
    sql_conversations: str | None = None
    # Positive evidence only (R25): an id the checker cannot find is "unknown", never a reason
    # to retire. A host whose own tables (checker=sql) hold every entity it ever had may declare
    # that an id absent from them was deleted.
    absence_means_deleted: bool = False

    @field_validator("sql_agents", "sql_users", "sql_companies", "sql_conversations")
    @classmethod
    def _host_table(cls, value: str | None, info: ValidationInfo) -> str | None:
        # The checker's own parse, at start-up: a typo was found only when a run built the
        # checker (the run failed after its row was written), and only with CHECKER=sql.
        if value:
            from worker.store.repositories.references import HostTable

            HostTable.parse(value, f"DREAM_PRUNE__{str(info.field_name).upper()}")
        return value

    @model_validator(mode="after")
    def _absence_needs_host_tables(self) -> PruneSettings:
        if self.absence_means_deleted and self.checker != "sql":
            # The built-in registry holds only what was imported: absence there says nothing.
            raise ValueError("DREAM_PRUNE__ABSENCE_MEANS_DELETED=true needs DREAM_PRUNE__CHECKER=sql "
                             "(the host's own tables)")
        return self


class ArchiveSettings(BaseModel):
    review: Literal["off", "llm"] = "off"
    protected_inactive_days: int = Field(365, ge=1)
    high_importance: float = Field(0.8, ge=0.0, le=1.0)


class GuardSettings(BaseModel):
    max_retire_share: float = Field(0.5, ge=0.0, le=1.0)
    # The share only applies to scopes at least this big; tiny scopes would trip it on one merge.
    min_scope_size: int = Field(10, ge=1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="DREAM_",
        env_nested_delimiter="__",
        extra="ignore",
        allow_inf_nan=False,  # "inf" would pass every lower bound
    )

    database_url: str = Field(default_factory=default_database_url)
    # PostgreSQL: how long a statement waits for a lock, and runs at all, before the server
    # cancels it (a busy error; a run is given back as interrupted), 0: no bound of ours
    # (else at least 1 ms: the server counts whole milliseconds).
    # Migrations run without the statement bound. SQLite waits 30 s for its write lock.
    db_lock_timeout_seconds: float = Field(30.0, ge=0, le=86_400)
    db_statement_timeout_seconds: float = Field(300.0, ge=0, le=86_400)
    broker_url: str | None = None
    result_backend: str | None = None
    celery_queue: str = Field("dream", min_length=1)  # workers consume it; beat and the CLI send to it
    # How a run is cut into Celery tasks, decided where it is enqueued (the worker running
    # gate_check, the CLI, the API, MCP): "run" (the default), one task for the whole run (the
    # scope read once and carried, as in-process; it hands off to a new task before its time
    # limit could cut a phase); "phase", a chain of one task per phase, the last one finalizing
    # (each phase under its own time limit). Either way a phase waiting on a batch frees the
    # worker.
    celery_tasks: Literal["phase", "run"] = "run"

    gate_hours: float = Field(24.0, ge=0)
    gate_sessions: int = Field(5, ge=0)
    # Optional gate rules (off by default; an agent's own settings in the agents table win):
    gate_notes: int | None = Field(None, ge=1)  # or this many new/changed notes since the last dream
    gate_idle_minutes: float | None = Field(None, gt=0)  # wait for quiet before a due scope runs
    gate_max_stale_hours: float | None = Field(None, gt=0)  # … but never past this age
    beat_interval_seconds: int = Field(900, ge=10)
    lease_seconds: int = Field(3600, ge=10)
    max_attempts: int = Field(3, ge=1, le=100)
    task_time_limit: int = Field(3000, ge=10)
    # A queued (or interrupted) run nobody claimed this long after it was enqueued is enqueued
    # again by the gate check, and failed after max_attempts re-enqueues (R30).
    queued_timeout_seconds: int = Field(3600, ge=10)
    # While the broker's queue still holds messages no worker has taken, a run waiting in it is
    # not lost: the gate check neither hands it out again nor recovers its expired lease (a
    # chain's next phase queued behind the backlog) until it has waited this long.
    backlog_patience_seconds: int = Field(86_400, ge=10)
    # Open candidates that grew over this many consecutive runs of a scope make its run blocked.
    open_growth_runs: int = Field(3, ge=2)
    # A scope whose runs keep failing waits before the gate hands it out again: one beat
    # interval after the first failed run, doubling with each, at most this long (0: off).
    failure_backoff_max_seconds: int = Field(86_400, ge=0)

    llm_provider: Literal["none", "openai", "fake"] = "none"
    llm_base_url: str | None = None
    llm_model: str = Field("gpt-4o-mini", min_length=1, max_length=200)  # run_steps.model
    llm_api_key: str | None = None
    llm_timeout: float = Field(30.0, gt=0)
    llm_max_retries: int = Field(2, ge=0, le=20)
    llm_phase_seconds: float = Field(900.0, gt=0)  # a phase's model time; the rest deferred
    llm_concurrency: int = Field(4, ge=1, le=256)  # a thread each: more exhausts the process
    # Each reply's cap, sent as max_tokens; the budgets reserve prompt + cap per call.
    llm_max_output_tokens: int | None = Field(None, ge=16, le=1_000_000)
    llm_batch: bool = False  # batch pricing: a phase's questions go as one provider batch
    # In-process: how long a phase polls its batch before deferring what is unanswered.
    llm_batch_wait: float = Field(600.0, ge=0)
    llm_batch_poll: float = Field(10.0, gt=0)  # seconds between polls (and Celery re-schedules)
    # A question the model refused or answered unusably is not asked again for this long (0: off).
    llm_unanswered_hours: float = Field(168.0, ge=0, le=24 * 366)
    fake_llm_script: Path | None = None

    embedding_provider: Literal["hashing", "openai"] = "hashing"
    embedding_base_url: str | None = None
    embedding_model: str = Field("text-embedding-3-small", min_length=1, max_length=200)
    embedding_api_key: str | None = None
    embedding_dimensions: int = Field(512, ge=8, le=16000)
    embedding_batch_size: int = Field(256, ge=1, le=2048)  # OpenAI's most inputs per request

    ann_threshold: int = Field(20000, ge=100)

    # Review before apply (worker.review): auto applies what a run decides; propose records
    # every change as a review item and applies nothing; safe_auto applies what rules settle and
    # model verdicts at or above the confidence bar, and proposes the rest. An agent's own
    # apply_mode (agents table) wins.
    apply_mode: Literal["auto", "propose", "safe_auto"] = "auto"
    safe_auto_min_confidence: float = Field(0.9, ge=0.0, le=1.0)

    # OpenTelemetry's own variables decide whether spans are exported (worker.telemetry); the
    # exporter and SDK read the rest of OTEL_* (headers, sampler, service name) themselves.
    otel_sdk_disabled: bool = Field(False, validation_alias="OTEL_SDK_DISABLED")
    otel_traces_exporter: str | None = Field(None, validation_alias="OTEL_TRACES_EXPORTER")
    otel_exporter_otlp_endpoint: str | None = Field(None, validation_alias=AliasChoices(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"))

    api_tokens: str | None = None  # JSON: {"token": {"role": "admin"} | {"agent_id":..}}
    # Largest request body the API reads (checked before authentication); 1 MiB holds the
    # longest note the host limits allow, JSON-escaped, many times over.
    api_max_body_bytes: int = Field(1_048_576, ge=1024)
    api_shutdown_seconds: int = Field(20, ge=0, le=3600)  # in-flight wait at a stop (< k8s' 30 s)
    log_format: Literal["auto", "console", "json"] = "auto"
    log_level: LogLevel = "INFO"  # in any case: "debug" is DEBUG

    consolidate: ConsolidateSettings = ConsolidateSettings()
    contradictions: ContradictionSettings = ContradictionSettings()
    prune: PruneSettings = PruneSettings()
    archive: ArchiveSettings = ArchiveSettings()
    guard: GuardSettings = GuardSettings()
    budget: BudgetSettings = BudgetSettings()
    privacy: PrivacySettings = PrivacySettings()
    remember: RememberSettings = RememberSettings()
    host: HostSettings = HostSettings()

    @property
    def task_soft_time_limit(self) -> int:
        """Celery's soft limit (90 % of the hard one): what a run task plans its phases by."""
        return soft_time_limit(self.task_time_limit)

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_in_any_case(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("broker_url", "result_backend")
    @classmethod
    def _known_scheme(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Celery resolves the scheme only when it first connects: an unknown one was a KeyError
        # (or ModuleNotFoundError) traceback, for the result backend after the run was written.
        if value is not None:
            check = broker_url_problem if info.field_name == "broker_url" else backend_url_problem
            if problem := check(value):
                raise ValueError(problem)
        return value

    @field_validator("llm_base_url", "embedding_base_url")
    @classmethod
    def _http_endpoint(cls, value: str | None) -> str | None:
        if value is not None and (problem := http_url_problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("api_tokens")
    @classmethod
    def _token_grants(cls, value: str | None) -> str | None:
        # Read by the servers only, but checked here as every setting is: a malformed value
        # stops any command (the deploy's `dream db upgrade` first), with the line naming it.
        try:
            parse_tokens(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _settings_agree(self) -> Settings:
        # Each value passed alone; together they may overflow a clock or contradict each other,
        # and one may be a value the code would read as another (refused, not reinterpreted).
        if problem := (duration_problem(self) or conflict_problem(self)
                       or reread_problem(self)):
            raise ValueError(problem)
        return self


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment, turning validation errors into one clear line."""
    warn_unknown_variables()
    if problem := section_key_twice(os.environ, Settings):
        raise ConfigError(problem)
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except SettingsError as exc:
        # A whole section given as one variable (DREAM_CONSOLIDATE=...) is read as JSON.
        field = re.search(r'field "(\w+)"', str(exc))
        name = f"DREAM_{field.group(1).upper()}" if field else "a DREAM_ section variable"
        raise ConfigError(f"invalid setting {name}: not valid JSON; give a JSON object of its "
                          f"values, or set them one by one ({name}__<NAME>=...)") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        msg = first["msg"].removeprefix("Value error, ")
        path = "__".join(str(p) for p in first["loc"]).upper()
        name = path if path.startswith("OTEL_") else f"DREAM_{path}"  # OpenTelemetry's own
        if not first["loc"] or msg.startswith(name):
            # A check across fields, or one whose message names its variable (and value) itself.
            raise ConfigError(f"invalid setting: {msg}; "
                              "fix the environment variable and retry") from None
        given = first.get("input")
        if path in _URLS and isinstance(given, str):
            given = masked_url(given)  # never echo a password
        raise ConfigError(
            f"invalid setting {name}: {msg} (got {given!r}); "
            "fix the environment variable and retry"
        ) from None
    if problem := memory_store_problem(settings):
        raise ConfigError(problem)
    for inert in inert_settings(settings):
        if inert not in _warned:
            _warned.add(inert)  # once per process, as an unknown variable
            sys.stderr.write(f"warning: {inert}\n")
    return settings


_URLS = {"BROKER_URL", "RESULT_BACKEND", "DATABASE_URL", "LLM_BASE_URL", "EMBEDDING_BASE_URL"}
# DREAM_* variables read outside Settings: by the worker itself, and by its test suite and
# benchmarks (their own runs of `dream` must not warn about them).
OTHER_VARIABLES = {
    "DREAM_RESOURCES_DIR", "DREAM_CRASH_AT", "DREAM_CRASH_MARKER",
    "DREAM_TEST_DATABASE_URL", "DREAM_TEST_PGDATA", "DREAM_TEST_PG_KEEP", "DREAM_REQUIRE_SERVICES",
    "DREAM_EVAL_DATA", "DREAM_BENCH_DIR", "DREAM_BENCH_LATENCY", "DREAM_SCREENSHOT_DIR",
}
_warned: set[str] = set()


def known_variables() -> set[str]:
    """Every DREAM_* variable read: each setting, section (as JSON), section field, and more."""
    known = set(OTHER_VARIABLES)
    for name, field in Settings.model_fields.items():
        if field.validation_alias is not None:
            continue  # OpenTelemetry's own OTEL_* variables
        known.add(f"DREAM_{name.upper()}")
        section = field.annotation
        if isinstance(section, type) and issubclass(section, BaseModel):
            known.update(f"DREAM_{name.upper()}__{sub.upper()}" for sub in section.model_fields)
    return known


def warn_unknown_variables(environ: dict[str, str] | None = None) -> None:
    """One ``warning:`` line on stderr per unknown DREAM_* variable (a typo is otherwise silently
    ignored), naming the closest known one; once per variable and process. Not an error: other
    tools may share the prefix."""
    env = os.environ if environ is None else environ
    unknown = sorted(k for k in env if k.upper().startswith("DREAM_") and k not in _warned)
    if not unknown:
        return
    known = known_variables()
    for name in unknown:
        _warned.add(name)
        if name.upper() in known:
            continue
        close = _closest(name.upper(), known)
        hint = f"did you mean {close}?" if close else "no dream-worker setting is called that"
        sys.stderr.write(f"warning: unknown variable {name} is ignored ({hint})\n")


def _closest(name: str, known: set[str]) -> str | None:
    """The known variable ``name`` most likely misspells, compared without the shared prefix
    (within its section when the section is right: DREAM_CONSOLIDATE__TRESHOLD)."""
    section, nested, _ = name.partition("__")
    prefix = section + "__" if nested and section in known else "DREAM_"
    pool = {k.removeprefix(prefix): k for k in known if k.startswith(prefix)}
    close = difflib.get_close_matches(name.removeprefix(prefix), list(pool), n=1, cutoff=0.6)
    return pool[close[0]] if close else None
