"""Import of agents, users, companies and conversations: upsert by (kind, id), with an agent's
retention and gate settings checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from worker.app import App
from worker.domain.limits import INT_MAX, user_problem
from worker.domain.types import DEFAULT_NOTE_RETENTION_DAYS
from worker.ingest.fields import (
    choice,
    opt_str,
    opt_text,
    opt_time,
    unknown_fields,
)
from worker.ingest.jsonl import ImportResult, InputError, read_jsonl

if TYPE_CHECKING:
    from worker.config import Settings

APPLY_MODES = ("auto", "propose", "safe_auto")  # worker.review.items.ApplyMode
MAX_RETENTION_DAYS = 36_500  # a century; longer windows overflow date arithmetic


_ENTITY_KINDS = {"agent", "user", "company", "conversation"}
_ENTITY_STATUSES = {"active", "disabled", "deleted"}
_ENTITY_FIELDS = {"kind", "id", "status", "deleted_at"}
_KIND_FIELDS = {
    "agent": {"name", "note_retention_days", "example_retention_days", "auto_archive_enabled",
              "gate_hours", "gate_sessions", "gate_notes", "gate_idle_minutes",
              "gate_max_stale_hours", "apply_mode"},
    "user": set(),
    "company": set(),
    "conversation": {"deleted_reason"},
}


def parse_entity(obj: dict[str, Any], number: int) -> tuple[str, dict[str, Any]]:
    kind = choice(obj, "kind", _ENTITY_KINDS, "", number)
    unknown_fields(obj, _ENTITY_FIELDS | _KIND_FIELDS[kind], number)
    entity_id = opt_str(obj, "id", number)
    if entity_id is None:
        raise InputError(f"line {number}: id is required")
    if kind == "user" and (problem := user_problem(entity_id)):
        raise InputError(f"line {number}: id {problem}")
    status = choice(obj, "status", _ENTITY_STATUSES, "active", number)
    row: dict[str, Any] = {"id": entity_id, "status": status,
                           "deleted_at": opt_time(obj, "deleted_at", number)}
    if kind == "agent":
        for key, default in (("note_retention_days", DEFAULT_NOTE_RETENTION_DAYS),
                             ("example_retention_days", 180)):
            value = obj.get(key, default)
            if (isinstance(value, bool) or not isinstance(value, int)
                    or not 1 <= value <= MAX_RETENTION_DAYS):
                raise InputError(f"line {number}: {key} must be a whole number of days from 1 "
                                 f"to {MAX_RETENTION_DAYS}")
            row[key] = value
        enabled = obj.get("auto_archive_enabled", True)
        if enabled is not None and not isinstance(enabled, bool):
            raise InputError(f"line {number}: auto_archive_enabled must be true, false or null")
        row["auto_archive_enabled"] = enabled
        row["name"] = opt_text(obj, "name", number, 200)
        row.update(_agent_gate(obj, number))
        mode = obj.get("apply_mode")
        if mode is not None and mode not in APPLY_MODES:
            raise InputError(f"line {number}: apply_mode must be one of {', '.join(APPLY_MODES)} "
                             "(or null for the deployment's DREAM_APPLY_MODE)")
        row["apply_mode"] = mode
    if kind == "conversation":
        row["deleted_reason"] = opt_text(obj, "deleted_reason", number, 32)
    return kind, row


# An agent's own gate (NULL = the deployment's DREAM_GATE_*): (key, whole number?, lowest, above?).
_AGENT_GATE = (("gate_hours", False, 0, False), ("gate_sessions", True, 0, False),
               ("gate_notes", True, 1, False), ("gate_idle_minutes", False, 0, True),
               ("gate_max_stale_hours", False, 0, True))


# Highest accepted value: a century of hours/minutes (timedelta arithmetic must not overflow),
# a 32-bit count (PostgreSQL Integer).
_GATE_HIGHEST = {"gate_hours": MAX_RETENTION_DAYS * 24, "gate_max_stale_hours": MAX_RETENTION_DAYS * 24,
                 "gate_idle_minutes": MAX_RETENTION_DAYS * 24 * 60, "gate_sessions": INT_MAX,
                 "gate_notes": INT_MAX}


def _agent_gate(obj: dict[str, Any], number: int) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for key, whole, lowest, strictly_above in _AGENT_GATE:
        value = obj.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float)
            or (whole and value != int(value))
            or value < lowest or (strictly_above and value == lowest)
        ):
            kind = "a whole number" if whole else "a number"
            bound = f"above {lowest}" if strictly_above else f"at least {lowest}"
            raise InputError(f"line {number}: {key} must be {kind} {bound} (or null for the "
                             "deployment default)")
        if value is not None and value > _GATE_HIGHEST[key]:
            raise InputError(f"line {number}: {key} must be at most {_GATE_HIGHEST[key]}")
        row[key] = None if value is None else (int(value) if whole else float(value))
    return row


def import_entities(app: App, lines: Iterable[str | bytes]) -> ImportResult:
    """Upserts by (kind, id): the file's values replace stored ones. One id given twice with
    different values is refused rather than letting the later line win silently."""
    result = ImportResult()
    grouped: dict[str, dict[str, dict[str, Any]]] = {}
    line_of: dict[tuple[str, str], int] = {}
    for number, obj in read_jsonl(lines):
        result.read += 1
        kind, row = parse_entity(obj, number)
        first = grouped.setdefault(kind, {}).setdefault(row["id"], row)
        line_of.setdefault((kind, row["id"]), number)
        if first != row:
            raise InputError(f"line {number}: {kind} {row['id']!r} is also line "
                             f"{line_of[(kind, row['id'])]}, with other values; keep one line")
    with app.uow() as uow:
        for kind, rows in grouped.items():
            uow.entities.upsert(kind, list(rows.values()))
        uow.commit()
    result.inserted = sum(len(r) for r in grouped.values())
    result.warnings = [f"line {line_of[('agent', a)]}: agent {a!r} {problem}"
                       for a, row in grouped.get("agent", {}).items()
                       for problem in _inert_agent_settings(app.settings, row)]
    return result


def _inert_agent_settings(settings: Settings, row: dict[str, Any]) -> list[str]:
    """What an agent's own settings leave undone as the deployment's stand, one clause each
    (imported still: the deployment may change)."""
    found = []
    if (settings.gate_idle_minutes is None and row["gate_max_stale_hours"] is not None
            and row["gate_idle_minutes"] is None):
        found.append("has gate_max_stale_hours but no gate_idle_minutes, and "
                     "DREAM_GATE_IDLE_MINUTES is not set: a maximum staleness only ends an idle "
                     "wait, so it does nothing; give the agent gate_idle_minutes too")
    protected = settings.archive.protected_inactive_days
    if row["note_retention_days"] >= protected:
        # Archive takes a protected note once unread past both (worker.phases.archive.core).
        found.append(f"has note_retention_days {row['note_retention_days']}, not below "
                     f"DREAM_ARCHIVE__PROTECTED_INACTIVE_DAYS ({protected}): archive takes a "
                     "protected note once it is unread past both, so its protected notes go as "
                     "soon as any other; give it fewer days, or raise "
                     "DREAM_ARCHIVE__PROTECTED_INACTIVE_DAYS")
    return found
