"""Checks across settings, run as they load (``worker.config.Settings``): values that pass one
by one but together overflow a clock or contradict each other, or that the code would read as
another value. Each check gives one line naming the variables, their values and what to change,
or None."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import BaseModel

from worker.domain.limits import DuplicateKey, unique_keys
from worker.domain.types import DEFAULT_NOTE_RETENTION_DAYS
from worker.urls import masked_url, memory_database_problem

if TYPE_CHECKING:
    from worker.config import Settings

CENTURY_SECONDS = 100 * 365 * 86_400
# Settings that are durations, with the seconds in one unit of each.
DURATIONS = (("gate_hours", 3600), ("gate_idle_minutes", 60), ("gate_max_stale_hours", 3600),
             ("beat_interval_seconds", 1), ("lease_seconds", 1), ("task_time_limit", 1),
             ("queued_timeout_seconds", 1), ("backlog_patience_seconds", 1), ("llm_timeout", 1),
             ("llm_phase_seconds", 1), ("llm_batch_wait", 1), ("llm_batch_poll", 1),
             ("failure_backoff_max_seconds", 1),
             ("contradictions.newer_wins_days", 86_400),
             ("archive.protected_inactive_days", 86_400))
# What a run task keeps, after a phase's model time, for the phase's writes.
PHASE_WRITE_SECONDS = 60.0
# The short back-offs one model call may wait between its attempts, all of them together.
CALL_BACKOFF_SECONDS = 10.0
SOFT_SHARE = 0.9  # Celery's soft time limit, as a share of the hard one
# A request body beside its one note: the scope's ids, the other fields, JSON's quotes and an
# MCP call's JSON-RPC envelope (a few hundred bytes in practice).
BODY_OVERHEAD_BYTES = 4096
UTF8_MAX_BYTES = 4  # the most bytes UTF-8 takes for one character


def soft_time_limit(task_time_limit: int) -> int:
    return int(task_time_limit * SOFT_SHARE)


def model_call_seconds(settings: Settings) -> float:
    """The longest one model call may take: every attempt at the whole-request deadline and the
    back-offs between them (``OpenAICompatibleLLM.max_wall_seconds``)."""
    return settings.llm_timeout * (settings.llm_max_retries + 1) + CALL_BACKOFF_SECONDS


def phase_seconds(settings: Settings) -> float:
    """The longest a judging phase takes: its model wall time, overrun by at most the one call
    in flight when it ends (no call starts after it, ``llm.ask``), and a minute for its writes."""
    return settings.llm_phase_seconds + model_call_seconds(settings) + PHASE_WRITE_SECONDS


def duration_problem(settings: Settings) -> str | None:
    """Each duration is added to or subtracted from a timestamp; past a century that overflows
    (a traceback after the run row was written), so it is refused at start-up instead."""
    for path, unit in DURATIONS:
        section, _, name = path.rpartition(".")
        value = getattr(getattr(settings, section) if section else settings, name)
        if value is not None and value * unit > CENTURY_SECONDS:
            env = "DREAM_" + path.replace(".", "__").upper()
            return f"{env} is {value}, more than a century"
    return None


def conflict_problem(settings: Settings) -> str | None:
    """The first pair of settings that contradict each other, as one line; None when none do."""
    return (_phase_outlives_task(settings) or _backoff_cap_below_beat(settings)
            or _update_band_empty(settings) or _no_call_fits(settings))


def _phase_outlives_task(settings: Settings) -> str | None:
    # Celery kills a task at its soft limit. A judging phase that may ask the model longer than
    # the limit leaves was cut mid-way on every long run, under either task shape (a run task
    # hands each phase to a task of its own, but one phase still has to fit in it), and an
    # in-process run's lease heartbeat gives up at the hard limit. Without a model
    # (DREAM_LLM_PROVIDER=none) no phase asks anything and the limit only has to hold I/O.
    if settings.llm_provider == "none":
        return None
    need = phase_seconds(settings)
    soft = soft_time_limit(settings.task_time_limit)
    if need <= soft:
        return None
    limit = math.ceil(need / SOFT_SHARE)
    while soft_time_limit(limit) < need:  # the soft limit is rounded down to whole seconds
        limit += 1
    call = model_call_seconds(settings)
    most = math.floor(soft - call - PHASE_WRITE_SECONDS)
    lower = (f" or lower DREAM_LLM_PHASE_SECONDS to at most {most}" if most > 0
             else " (or lower DREAM_LLM_TIMEOUT / DREAM_LLM_MAX_RETRIES)")
    return (f"DREAM_LLM_PHASE_SECONDS ({settings.llm_phase_seconds:g}) does not fit in "
            f"DREAM_TASK_TIME_LIMIT ({settings.task_time_limit}): a judging phase may ask the "
            f"model that long, plus {call:g} s for the call in flight (DREAM_LLM_TIMEOUT × "
            f"(DREAM_LLM_MAX_RETRIES + 1) + {CALL_BACKOFF_SECONDS:g}) and "
            f"{PHASE_WRITE_SECONDS:g} s for its writes, {need:g} s, but Celery kills a task at "
            f"its soft limit of {soft} s (90 %), so every long phase would be cut mid-way; "
            f"raise DREAM_TASK_TIME_LIMIT to at least {limit}{lower}")


def _backoff_cap_below_beat(settings: Settings) -> str | None:
    # A failing scope's first wait is one beat interval: a smaller cap could never hold.
    cap, beat = settings.failure_backoff_max_seconds, settings.beat_interval_seconds
    if 0 < cap < beat:
        return (f"DREAM_FAILURE_BACKOFF_MAX_SECONDS ({cap}) is below "
                f"DREAM_BEAT_INTERVAL_SECONDS ({beat}), the first wait after a failed run; "
                f"raise it to at least {beat}, or set 0 to turn the back-off off")
    return None


def _update_band_empty(settings: Settings) -> str | None:
    # remember answers NOOP at or above the noop threshold before it looks at the update one:
    # an update threshold as high never applies, and every longer restatement is added beside
    # the note it restates instead of replacing it.
    noop, update = settings.remember.noop_threshold, settings.remember.update_threshold
    if update >= noop:
        return (f"DREAM_REMEMBER__UPDATE_THRESHOLD ({update:g}) is not below "
                f"DREAM_REMEMBER__NOOP_THRESHOLD ({noop:g}): a match that close is a NOOP "
                "already, so remember would never UPDATE; lower the update threshold or raise "
                "the noop one")
    return None


def _no_call_fits(settings: Settings) -> str | None:
    # A call holds its prompt's estimate plus the reply cap (worker.llm.spending) before it is
    # sent: under a token cap no larger than the reply cap alone, none ever is, and every run
    # that has something to ask ends blocked on its budget (0 is left alone: no tokens at all).
    reply = settings.llm_max_output_tokens
    if settings.llm_provider == "none" or reply is None:
        return None
    for name, cap in (("DREAM_BUDGET__MAX_TOKENS_PER_RUN", settings.budget.max_tokens_per_run),
                      ("DREAM_BUDGET__MAX_TOKENS_PER_SCOPE", settings.budget.max_tokens_per_scope),
                      ("DREAM_CONTRADICTIONS__MAX_TOKENS_PER_RUN",
                       settings.contradictions.max_tokens_per_run)):
        if cap and cap <= reply:
            return (f"{name} ({cap}) is not above DREAM_LLM_MAX_OUTPUT_TOKENS ({reply}): a model "
                    "call holds its prompt's estimate plus the reply cap before it is sent, so "
                    "no call would ever fit and every run would end blocked; raise the token "
                    f"cap well above {reply}, or lower DREAM_LLM_MAX_OUTPUT_TOKENS")
    return None


def reread_problem(settings: Settings) -> str | None:
    """The first value that passes its own bounds but that the code would read as another (a
    floor it raises, a source another setting leaves nothing to do), as one line; None when
    every value means what it says."""
    return (_lead_in_of_one(settings) or _pieces_without_small_scope(settings)
            or _wait_below_a_millisecond(settings))


def _lead_in_of_one(settings: Settings) -> str | None:
    # A lead-in is a run of words at least this many notes share (worker.similarity.lead_ins):
    # every note shares its own words, so 1 would cut every note (the phase used to read 2).
    if settings.contradictions.lead_in_notes == 1:
        return ("DREAM_CONTRADICTIONS__LEAD_IN_NOTES is 1, but a lead-in is a run of words "
                "several notes open or close with, and one note alone shares its words with "
                "no other; set 0 to turn lead-ins off, or a count from 2 to 1000")
    return None


def _pieces_without_small_scope(settings: Settings) -> str | None:
    # Pieces hold at most SMALL_SCOPE_NOTES notes, and a scope up to three times that is cut
    # into them: at 0 no scope is, at 1 no piece holds a pair (a host was offered none).
    c = settings.contradictions
    if c.large_scope_pieces and c.small_scope_notes < 2:
        return (f"DREAM_CONTRADICTIONS__LARGE_SCOPE_PIECES=true asks a scope's short notes in "
                f"pieces of at most DREAM_CONTRADICTIONS__SMALL_SCOPE_NOTES notes, and that is "
                f"{c.small_scope_notes}: no piece holds a pair; raise "
                "DREAM_CONTRADICTIONS__SMALL_SCOPE_NOTES to at least 2, or drop "
                "DREAM_CONTRADICTIONS__LARGE_SCOPE_PIECES")
    return None


def _wait_below_a_millisecond(settings: Settings) -> str | None:
    # PostgreSQL takes whole milliseconds (worker.store.db.Waits): less was raised to 1 ms.
    for name in ("db_lock_timeout_seconds", "db_statement_timeout_seconds"):
        value = getattr(settings, name)
        if 0 < value < 0.001:
            return (f"DREAM_{name.upper()} ({value:g}) is below one millisecond, the least "
                    "PostgreSQL waits; set at least 0.001, or 0 to leave the server's own "
                    "setting")
    return None


def memory_store_problem(settings: Settings) -> str | None:
    """An in-memory SQLite store, refused by ``load_settings`` (what every command, server and
    Celery process reads), not by Settings itself: the tests build throw-away stores so."""
    if problem := memory_database_problem(settings.database_url):
        return (f"invalid setting DREAM_DATABASE_URL: {problem} (got "
                f"{masked_url(settings.database_url)!r}); fix the environment variable and retry")
    return None


def inert_settings(settings: Settings) -> list[str]:
    """Each setting that does nothing, or less than it says, as the others stand (a warning, not
    an error: an agent's own settings, a model a host gives the app, a migration or a shorter
    note may still give it effect), one line each; empty when every one acts."""
    return [*_inert_gate(settings), *_inert_without_model(settings), *_inert_checker(settings),
            *_inert_lock_wait(settings), *_inert_protection(settings), *_body_below_a_note(settings)]


def _inert_lock_wait(settings: Settings) -> list[str]:
    # A statement's time includes its lock waits: a lock bound not below the statement's is
    # cut short by it, and a lock wait reports as a runaway statement (SQLSTATE 57014, not
    # 55P03). A warning: `dream db upgrade` lifts the statement bound and meets the lock one.
    lock, statement = settings.db_lock_timeout_seconds, settings.db_statement_timeout_seconds
    if 0 < statement <= lock:
        return [f"DREAM_DB_LOCK_TIMEOUT_SECONDS={lock:g} is not below "
                f"DREAM_DB_STATEMENT_TIMEOUT_SECONDS={statement:g}: a statement's time includes "
                "its lock waits, so the statement bound cancels a lock wait first and it is "
                "reported as a statement that ran too long (only `dream db upgrade`, without the "
                f"statement bound, meets the lock one); lower the lock timeout below "
                f"{statement:g}, or raise the statement timeout"]
    return []


def _body_below_a_note(settings: Settings) -> list[str]:
    # The API and MCP refuse a body over DREAM_API_MAX_BODY_BYTES unread: below the longest
    # text the host limits allow, in UTF-8's most bytes a character and with the rest of the
    # request, a note or fused text the limits accept may never be posted. A warning: shorter
    # or plainer (ASCII) texts still go, and a small body bound may be the point.
    body = settings.api_max_body_bytes
    name, chars = max((("DREAM_HOST__MAX_NOTE_CHARS", settings.host.max_note_chars),
                       ("DREAM_HOST__MAX_FUSED_CHARS", settings.host.max_fused_chars)),
                      key=lambda pair: pair[1])
    need = chars * UTF8_MAX_BYTES + BODY_OVERHEAD_BYTES
    if body >= need:
        return []
    return [f"DREAM_API_MAX_BODY_BYTES={body} is below what a text of {name}={chars} "
            f"characters may take in a request, {need} bytes (UTF-8 takes up to "
            f"{UTF8_MAX_BYTES} bytes a character, plus {BODY_OVERHEAD_BYTES} for the rest of "
            "the request): the API and MCP refuse such a text unread although its limit "
            f"allows it; raise DREAM_API_MAX_BODY_BYTES to at least {need}, or lower {name}"]


def _inert_protection(settings: Settings) -> list[str]:
    # Archive takes a protected note once it has gone unread past both its agent's retention
    # and the protected days: at or below the retention, the protected days add nothing.
    days = settings.archive.protected_inactive_days
    if days <= DEFAULT_NOTE_RETENTION_DAYS:
        return [f"DREAM_ARCHIVE__PROTECTED_INACTIVE_DAYS={days} is not above "
                f"{DEFAULT_NOTE_RETENTION_DAYS}, the retention of an agent not in the registry: "
                "archive takes a protected note once it is unread past both, so such agents' "
                "protected notes go as soon as any other (and so do those of an agent whose "
                "note_retention_days is at least as long); raise it above the retentions"]
    return []


def _inert_gate(settings: Settings) -> list[str]:
    found = []
    stale, idle, hours = (settings.gate_max_stale_hours, settings.gate_idle_minutes,
                          settings.gate_hours)
    if stale is not None and idle is None:
        found.append(
            f"DREAM_GATE_MAX_STALE_HOURS={stale:g} only ends an "
            "idle wait, and DREAM_GATE_IDLE_MINUTES is not set: it acts only for agents with "
            "their own gate_idle_minutes; set DREAM_GATE_IDLE_MINUTES to wait for quiet "
            "users everywhere, or drop DREAM_GATE_MAX_STALE_HOURS")
    elif stale is not None and stale <= hours:
        # Staleness counts from the last dream, and a scope is due only DREAM_GATE_HOURS after
        # it: by then it is stale already, and only a first dream ever waited for quiet.
        found.append(
            f"DREAM_GATE_MAX_STALE_HOURS={stale:g} is not above DREAM_GATE_HOURS={hours:g}: "
            "staleness counts from the last dream, so a scope that has dreamt is stale once it "
            "is due and never waits DREAM_GATE_IDLE_MINUTES for quiet (only a first dream "
            f"does); raise it above {hours:g} (the hours plus the longest wait), or drop "
            "DREAM_GATE_IDLE_MINUTES")
    if settings.gate_notes is not None and settings.gate_sessions == 0 < hours:
        # The changed notes are an alternative to the sessions, and 0 sessions are always
        # reached: the hours alone decide (with no hours either, one session or the notes do).
        found.append(
            f"DREAM_GATE_NOTES={settings.gate_notes} counts instead of the sessions, and "
            "DREAM_GATE_SESSIONS is 0, always reached: a scope is due every "
            f"DREAM_GATE_HOURS ({hours:g}) whatever changed; set DREAM_GATE_SESSIONS above 0 "
            "for the notes to count, or drop DREAM_GATE_NOTES")
    return found


def _inert_without_model(settings: Settings) -> list[str]:
    if settings.llm_provider != "none":
        found = []
    else:
        # Without a model the reviews are skipped: prune and archive archive as with none.
        found = [f"DREAM_{name}__REVIEW=llm asks a model, and DREAM_LLM_PROVIDER is 'none': "
                 "notes are archived unreviewed; set DREAM_LLM_PROVIDER, or drop "
                 f"DREAM_{name}__REVIEW"
                 for name, review in (("PRUNE", settings.prune.review),
                                      ("ARCHIVE", settings.archive.review)) if review == "llm"]
    if settings.llm_batch and settings.llm_provider != "openai":
        # Only the OpenAI-compatible client has the files and batches API; any other judge
        # asks online, so the half price the setting promises never comes.
        found.append(
            f"DREAM_LLM_BATCH=true batches through an OpenAI-compatible provider, and "
            f"DREAM_LLM_PROVIDER is {settings.llm_provider!r}: nothing is batched; set "
            "DREAM_LLM_PROVIDER=openai, or drop DREAM_LLM_BATCH")
    return found


def _inert_checker(settings: Settings) -> list[str]:
    prune = settings.prune
    if prune.checker == "sql" and not (prune.sql_agents or prune.sql_users
                                       or prune.sql_companies or prune.sql_conversations):
        return [
            "DREAM_PRUNE__CHECKER=sql reads the host tables DREAM_PRUNE__SQL_AGENTS, "
            "_SQL_USERS, _SQL_COMPANIES and _SQL_CONVERSATIONS name, and none is set: prune "
            "checks no reference (unless the host sets app.reference_checker); name the "
            "tables, or drop DREAM_PRUNE__CHECKER for the built-in registry"]
    tables = [f"DREAM_PRUNE__{name.upper()}" for name in
              ("sql_agents", "sql_users", "sql_companies", "sql_conversations")
              if getattr(prune, name)]
    if prune.checker == "registry" and tables:
        # Only the SQL checker reads the host's tables; the built-in registry ignores them.
        named = ", ".join(tables)
        what = "names a host table" if len(tables) == 1 else "name host tables"
        return [f"{named} {what} only DREAM_PRUNE__CHECKER=sql reads, and the checker is "
                "'registry': prune checks the built-in registry instead (unless the host sets "
                f"app.reference_checker); set DREAM_PRUNE__CHECKER=sql, or unset {named}"]
    return []


def section_key_twice(environ: Mapping[str, str], settings: type[Settings]) -> str | None:
    """A section given whole as JSON (``DREAM_CONSOLIDATE='{...}'``) naming a key twice, or
    naming a key a nested variable (``DREAM_CONSOLIDATE__THRESHOLD``) sets too: pydantic-settings
    reads the JSON with Python's json, which keeps the last value silently (a valid second value
    hid a refused first one), and lets the nested variable win silently over the JSON's."""
    sections = {f"DREAM_{name.upper()}" for name, field in settings.model_fields.items()
                if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)}
    nested = {name.upper(): name for name in environ}
    for name, value in sorted(environ.items()):
        if name.upper() not in sections:
            continue
        try:
            given = json.loads(value, object_pairs_hook=unique_keys)
        except DuplicateKey as exc:
            key = str(exc)[:64]
            return (f"invalid setting {name}: key {key!r} appears twice in its JSON (the last "
                    f"would be taken silently); give it once, or set it alone "
                    f"({name.upper()}__{key.upper()}=...), and retry")
        except (ValueError, RecursionError):
            continue  # not JSON: the settings' own line says so
        for key in sorted(given) if isinstance(given, dict) else ():
            if (other := nested.get(f"{name.upper()}__{key.upper()}")) is not None:
                return (f"invalid setting {name}: its JSON gives {key[:64]!r}, and {other} "
                        f"sets it too (that one would be taken silently); set it one way only: "
                        f"drop the key from {name} or unset {other}, and retry")
    return None
