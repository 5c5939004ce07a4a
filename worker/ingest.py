"""JSONL import of notes, sessions and entities: validate every line first, then write all at once.

A bad line anywhere means nothing is written (R22); the error names the line number.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from worker.app import App
from worker.clock import parse_timestamp, utcnow
from worker.domain.limits import (
    INT_MAX,
    MAX_NESTING,
    ident_problem,
    nesting_depth,
    scope_problem,
    text_problem,
)
from worker.domain.types import NoteStatus, NoteType, Protection, Scope, content_hash


class InputError(Exception):
    """Bad user input; the message is one line naming what and where."""


NOTE_FIELDS = {
    "id", "agent_id", "user_id", "company_id", "content", "type", "created_at", "updated_at",
    "last_accessed_at", "access_count", "importance", "expires_at", "is_auto_generated",
    "protection", "source_conversation_id", "embedding", "embedding_model", "metadata", "status",
    "valid_from", "valid_to",
}
_NOTE_TYPES = {t.value.lower(): t.value for t in NoteType}
_PROTECTIONS = {p.value for p in Protection}
_STATUSES = {s.value for s in NoteStatus}


@dataclass
class ImportResult:
    read: int = 0
    inserted: int = 0
    duplicates: int = 0


MAX_RETENTION_DAYS = 36_500  # a century; longer windows overflow date arithmetic


class _NotFinite(Exception):
    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal


def _refuse_constant(literal: str) -> float:
    raise _NotFinite(literal)  # NaN, Infinity, -Infinity: valid to Python's json, not to JSON


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e400 parses as inf
        raise _NotFinite(literal)
    return value


def _decoded(lines: Iterable[str | bytes]) -> Iterator[tuple[int, str]]:
    """Number each line and decode bytes as strict UTF-8, naming the line that is not."""
    number = 0
    iterator = iter(lines)
    while True:
        number += 1
        try:
            line = next(iterator)
        except StopIteration:
            return
        except UnicodeDecodeError:  # a text stream (stdin) decoding as it reads
            raise InputError(f"line {number}: not valid UTF-8; save the file as UTF-8") from None
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"line {number}: not valid UTF-8; save the file as UTF-8") from None
        yield number, line


def read_jsonl(lines: Iterable[str | bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object); refuse what either backend could not store the same way."""
    for number, line in _decoded(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line, parse_constant=_refuse_constant, parse_float=_finite_float)
        except json.JSONDecodeError as exc:
            raise InputError(f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except _NotFinite as exc:
            raise InputError(f"line {number}: {exc.literal[:20]} is not a finite number") from None
        except RecursionError:
            raise InputError(f"line {number}: nested more than {MAX_NESTING} levels deep") from None
        except ValueError:  # an integer literal longer than Python's 4300-digit limit
            raise InputError(f"line {number}: a number is too large") from None
        if not isinstance(obj, dict):
            raise InputError(f"line {number}: expected a JSON object, got {type(obj).__name__}")
        if nesting_depth(obj) > MAX_NESTING:
            raise InputError(f"line {number}: nested more than {MAX_NESTING} levels deep")
        _check_text(obj, number)
        yield number, obj


def _check_text(obj: dict[str, Any], number: int) -> None:
    """Every key and string value, at any depth: no NUL (PostgreSQL refuses it), no lone
    surrogate (no UTF-8 encoder can write it). Named by top-level field, never quoted."""
    for field, value in obj.items():
        if problem := text_problem(field):
            raise InputError(f"line {number}: a field name {problem}")
        stack: list[Any] = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                if problem := text_problem(item):
                    raise InputError(f"line {number}: {field} {problem}")
            elif isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)


def _unknown_fields(obj: dict[str, Any], allowed: set[str], number: int) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise InputError(f"line {number}: unknown field {unknown[0]!r}; allowed: "
                         f"{', '.join(sorted(allowed))}")


def _opt_str(obj: dict[str, Any], key: str, number: int) -> str | None:
    """An id: a non-empty string (or a whole number, taken as its digits) that fits the column."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise InputError(f"line {number}: {key} must be a non-empty string")
    text = str(value)
    if problem := ident_problem(text):
        raise InputError(f"line {number}: {key} {problem}")
    return text


def _opt_text(obj: dict[str, Any], key: str, number: int, max_chars: int) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"line {number}: {key} must be a string")
    if len(value) > max_chars:
        raise InputError(f"line {number}: {key} has {len(value)} characters; the limit is {max_chars}")
    return value


def _choice(obj: dict[str, Any], key: str, choices: Iterable[str], default: str,
            number: int) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"line {number}: {key} must be one of {', '.join(sorted(choices))}")
    return value


def _scope(obj: dict[str, Any], number: int) -> Scope:
    agent_id = _opt_str(obj, "agent_id", number)
    if agent_id is None:
        raise InputError(f"line {number}: agent_id is required")
    scope = Scope(agent_id, _opt_str(obj, "user_id", number), _opt_str(obj, "company_id", number))
    if problem := scope_problem(scope):
        raise InputError(f"line {number}: {problem}")
    return scope


def _opt_time(obj: dict[str, Any], key: str, number: int) -> datetime | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"line {number}: {key} must be an ISO-8601 string")
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise InputError(f"line {number}: {key}: {exc}") from None


def _opt_number(obj: dict[str, Any], key: str, number: int, default: float,
                lo: float | None = None, hi: float | None = None) -> float:
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"line {number}: {key} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"line {number}: {key} must be a finite number")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise InputError(f"line {number}: {key} must be between {lo} and {hi}")
    return value


def parse_note(obj: dict[str, Any], number: int, now: datetime, dims: int | None) -> dict[str, Any]:
    """One JSONL object → a full ``notes`` row dict, or InputError naming the line."""
    unknown = sorted(set(obj) - NOTE_FIELDS - {"consolidated_into_id", "comments", "lineage"})
    if unknown:
        raise InputError(f"line {number}: unknown field {unknown[0]!r}")
    content = obj.get("content")
    if not isinstance(content, str) or not content.strip():
        raise InputError(f"line {number}: content is required and must be a non-empty string")
    scope = _scope(obj, number)
    raw_type = obj.get("type", "Context")
    if not isinstance(raw_type, str) or raw_type.lower() not in _NOTE_TYPES:
        raise InputError(
            f"line {number}: type must be one of {', '.join(t.value for t in NoteType)}"
        )
    protection = _choice(obj, "protection", _PROTECTIONS, Protection.STANDARD.value, number)
    status = _choice(obj, "status", _STATUSES, NoteStatus.ACTIVE.value, number)
    auto = obj.get("is_auto_generated", True)
    if not isinstance(auto, bool):
        raise InputError(f"line {number}: is_auto_generated must be true or false")
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InputError(f"line {number}: metadata must be a JSON object")
    embedding = obj.get("embedding")
    vector = None
    if embedding is not None:
        if not isinstance(embedding, list) or not all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in embedding
        ):
            raise InputError(f"line {number}: embedding must be an array of numbers")
        if dims is not None and len(embedding) != dims:
            raise InputError(
                f"line {number}: embedding has {len(embedding)} dimensions, the configured "
                f"embedder uses {dims} (DREAM_EMBEDDING_DIMENSIONS); drop the field to re-embed"
            )
        # float64 first: a value beyond float32's range would silently become inf.
        try:
            wide = np.asarray(embedding, dtype=np.float64)
        except OverflowError:  # an integer beyond float range
            wide = np.asarray([math.inf])
        if not np.isfinite(wide).all() or (np.abs(wide) > np.finfo(np.float32).max).any():
            raise InputError(f"line {number}: embedding values must be finite float32 numbers")
        norm = float(np.linalg.norm(wide))
        if norm == 0:
            raise InputError(f"line {number}: embedding is all zeros")
        vector = (wide / norm).astype(np.float32)
    created = _opt_time(obj, "created_at", number) or now
    access_count = int(_opt_number(obj, "access_count", number, 0, lo=0, hi=INT_MAX))
    if access_count != _opt_number(obj, "access_count", number, 0):
        raise InputError(f"line {number}: access_count must be a whole number")
    note_id = _opt_str(obj, "id", number) or str(uuid.uuid4())
    model = _opt_text(obj, "embedding_model", number, 200)
    return {
        "id": note_id,
        "scope_key": scope.key,
        "agent_id": scope.agent_id,
        "user_id": scope.user_id,
        "company_id": scope.company_id,
        "source_conversation_id": _opt_str(obj, "source_conversation_id", number),
        "type": _NOTE_TYPES[raw_type.lower()],
        "content": content,
        "content_hash": content_hash(content),
        "embedding": vector,
        "embedding_model": (model or "imported") if vector is not None else None,
        "status": status,
        "is_auto_generated": auto,
        "protection": protection,
        "importance": _opt_number(obj, "importance", number, 0.5, lo=0.0, hi=1.0),
        "access_count": access_count,
        "last_accessed_at": _opt_time(obj, "last_accessed_at", number),
        "created_at": created,
        "updated_at": _opt_time(obj, "updated_at", number) or created,
        "expires_at": _opt_time(obj, "expires_at", number),
        "valid_from": _opt_time(obj, "valid_from", number) or created,
        "valid_to": _opt_time(obj, "valid_to", number),
        "consolidation_generation": 0,
        "meta": metadata,
        "version": 1,
    }


def import_notes(app: App, lines: Iterable[str | bytes]) -> ImportResult:
    """All-or-nothing, idempotent: same id, or same content hash in the same scope, adds no row."""
    now = utcnow()
    dims = app.embedder.dimensions  # checked per line so the error names the line (R22)
    result = ImportResult()
    rows: list[dict[str, Any]] = []
    first_line: dict[str, tuple[int, str, str]] = {}
    for number, obj in read_jsonl(lines):
        result.read += 1
        row = parse_note(obj, number, now, dims)
        first = first_line.setdefault(row["id"], (number, row["scope_key"], row["content_hash"]))
        if first[1:] != (row["scope_key"], row["content_hash"]):
            # 1 and "1" are the same id: keeping either line would drop the other silently.
            raise InputError(f"line {number}: id {row['id']!r} is also the id of line {first[0]}, "
                             "with other content or scope; give each note its own id")
        rows.append(row)
    explicit = [r for r in rows if r["embedding"] is not None]
    if explicit:
        # Vectors given in the file must match what this deployment embeds with.
        expected = app.embedder.dimensions
        for r in explicit:
            if r["embedding"].shape[0] != expected:
                raise InputError(
                    f"note {r['id']}: embedding has {r['embedding'].shape[0]} dimensions, the "
                    f"configured embedder uses {expected}; drop the field to re-embed"
                )
            if r["embedding_model"] == "imported":
                r["embedding_model"] = app.embedder.model_name
    with app.uow() as uow:
        stored = uow.notes.identities(r["id"] for r in rows)
        _refuse_id_conflicts(rows, stored, first_line)
        existing_ids = set(stored)
        by_scope: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_scope.setdefault(r["scope_key"], []).append(r)
        fresh: list[dict[str, Any]] = []
        seen: set[tuple[str, str]] = set()
        seen_ids: set[str] = set()
        for key, group in by_scope.items():
            known = uow.notes.find_by_hash(Scope.from_key(key), [r["content_hash"] for r in group])
            for r in group:
                mark = (key, r["content_hash"])
                if r["id"] in existing_ids or r["id"] in seen_ids or r["content_hash"] in known or mark in seen:
                    result.duplicates += 1
                    continue
                seen.add(mark)
                seen_ids.add(r["id"])
                fresh.append(r)
        _embed_missing(app, fresh)
        for start in range(0, len(fresh), 5000):
            uow.notes.insert_many(fresh[start : start + 5000])
        uow.commit()
    result.inserted = len(fresh)
    return result


def _refuse_id_conflicts(rows: list[dict[str, Any]], stored: dict[str, tuple[str, str]],
                         first_line: dict[str, tuple[int, str, str]]) -> None:
    """An id already stored counts as "already present" only for the same note; anything else
    would be a silent drop of the line (import never overwrites)."""
    for r in rows:
        if r["id"] not in stored:
            continue
        scope_key, hash_ = stored[r["id"]]
        number = first_line[r["id"]][0]
        if scope_key != r["scope_key"]:
            raise InputError(f"line {number}: id {r['id']!r} is already used by a note of another "
                             "scope; give this note a new id (or drop the id field)")
        if hash_ != r["content_hash"]:
            raise InputError(f"line {number}: note {r['id']!r} already exists with other content; "
                             "import never overwrites a note: give a new id (or drop the id "
                             "field) to add it")


def _embed_missing(app: App, rows: list[dict[str, Any]]) -> None:
    todo = [r for r in rows if r["embedding"] is None]
    if not todo:
        return
    texts = [r["content"] for r in todo]
    vectors = app.embedder.embed(texts)
    for r, v in zip(todo, vectors, strict=True):
        r["embedding"] = v
        r["embedding_model"] = app.embedder.model_name


SESSION_FIELDS = {"id", "agent_id", "user_id", "company_id", "started_at", "ended_at"}


def parse_session(obj: dict[str, Any], number: int) -> dict[str, Any]:
    _unknown_fields(obj, SESSION_FIELDS, number)
    scope = _scope(obj, number)
    started = _opt_time(obj, "started_at", number)
    if started is None:
        raise InputError(f"line {number}: started_at is required")
    ended = _opt_time(obj, "ended_at", number)
    if ended is not None and ended < started:
        raise InputError(f"line {number}: ended_at is before started_at")
    return {
        "id": _opt_str(obj, "id", number) or str(uuid.uuid4()),
        "scope_key": scope.key, **scope.as_dict(),
        "started_at": started, "ended_at": ended,
    }


def import_sessions(app: App, lines: Iterable[str | bytes]) -> ImportResult:
    """All-or-nothing and idempotent by id; an id reused for another session is refused."""
    result = ImportResult()
    rows: dict[str, dict[str, Any]] = {}
    line_of: dict[str, int] = {}
    for number, obj in read_jsonl(lines):
        result.read += 1
        row = parse_session(obj, number)
        first = rows.setdefault(row["id"], row)
        line_of.setdefault(row["id"], number)
        if _session_identity(first) != _session_identity(row):
            raise InputError(f"line {number}: session id {row['id']!r} is also the id of line "
                             f"{line_of[row['id']]}, with another scope or start; give each "
                             "session its own id")
    with app.uow() as uow:
        stored = uow.sessions.identities(rows)
        for session_id, identity in stored.items():
            if identity != _session_identity(rows[session_id]):
                raise InputError(f"line {line_of[session_id]}: session {session_id!r} already "
                                 "exists with another scope or start; give a new id")
        fresh = [r for r in rows.values() if r["id"] not in stored]
        uow.sessions.add_many(fresh)
        uow.commit()
    result.inserted = len(fresh)
    result.duplicates = result.read - len(fresh)
    return result


def _session_identity(row: dict[str, Any]) -> tuple[str, datetime]:
    return row["scope_key"], row["started_at"]


_ENTITY_KINDS = {"agent", "user", "company", "conversation"}
_ENTITY_STATUSES = {"active", "disabled", "deleted"}
_ENTITY_FIELDS = {"kind", "id", "status", "deleted_at"}
_KIND_FIELDS = {
    "agent": {"name", "note_retention_days", "example_retention_days", "auto_archive_enabled",
              "gate_hours", "gate_sessions", "gate_notes", "gate_idle_minutes",
              "gate_max_stale_hours"},
    "user": set(),
    "company": set(),
    "conversation": {"deleted_reason"},
}


def parse_entity(obj: dict[str, Any], number: int) -> tuple[str, dict[str, Any]]:
    kind = _choice(obj, "kind", _ENTITY_KINDS, "", number)
    _unknown_fields(obj, _ENTITY_FIELDS | _KIND_FIELDS[kind], number)
    entity_id = _opt_str(obj, "id", number)
    if entity_id is None:
        raise InputError(f"line {number}: id is required")
    status = _choice(obj, "status", _ENTITY_STATUSES, "active", number)
    row: dict[str, Any] = {"id": entity_id, "status": status,
                           "deleted_at": _opt_time(obj, "deleted_at", number)}
    if kind == "agent":
        for key, default in (("note_retention_days", 90), ("example_retention_days", 180)):
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
        row["name"] = _opt_text(obj, "name", number, 200)
        row.update(_agent_gate(obj, number))
    if kind == "conversation":
        row["deleted_reason"] = _opt_text(obj, "deleted_reason", number, 32)
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
    return result


EXAMPLE_FIELDS = {
    "id", "agent_id", "user_id", "company_id", "input", "output", "success_score",
    "is_auto_generated", "status", "access_count", "last_accessed_at", "created_at", "expires_at",
}


def parse_example(obj: dict[str, Any], number: int, now: datetime) -> dict[str, Any]:
    """One JSONL object → an ``examples`` row dict, or InputError naming the line."""
    unknown = sorted(set(obj) - EXAMPLE_FIELDS)
    if unknown:
        raise InputError(f"line {number}: unknown field {unknown[0]!r}")
    scope = _scope(obj, number)
    for key in ("input", "output"):
        if not isinstance(obj.get(key), str) or not obj[key].strip():
            raise InputError(f"line {number}: {key} is required and must be a non-empty string")
    score = obj.get("success_score")
    if score is not None:
        score = _opt_number(obj, "success_score", number, 0.0, lo=0.0, hi=100.0)
    auto = obj.get("is_auto_generated", True)
    if not isinstance(auto, bool):
        raise InputError(f"line {number}: is_auto_generated must be true or false")
    status = _choice(obj, "status", (NoteStatus.ACTIVE.value, NoteStatus.ARCHIVED.value),
                     NoteStatus.ACTIVE.value, number)
    access_count = _opt_number(obj, "access_count", number, 0, lo=0, hi=INT_MAX)
    if access_count != int(access_count):
        raise InputError(f"line {number}: access_count must be a whole number")
    return {
        "id": _opt_str(obj, "id", number) or str(uuid.uuid4()),
        "scope_key": scope.key, **scope.as_dict(),
        "input": obj["input"], "output": obj["output"], "success_score": score,
        "is_auto_generated": auto, "status": status, "access_count": int(access_count),
        "last_accessed_at": _opt_time(obj, "last_accessed_at", number),
        "created_at": _opt_time(obj, "created_at", number) or now,
        "expires_at": _opt_time(obj, "expires_at", number), "version": 1,
    }


def import_examples(app: App, lines: Iterable[str | bytes]) -> ImportResult:
    """All-or-nothing and idempotent by id: a bad line anywhere writes nothing (R22); an id
    reused for another example is refused, never dropped."""
    from worker.store.repositories.examples import ExampleRepository

    now = utcnow()
    result = ImportResult()
    rows: dict[str, dict[str, Any]] = {}
    line_of: dict[str, int] = {}
    for number, obj in read_jsonl(lines):
        result.read += 1
        row = parse_example(obj, number, now)
        first = rows.setdefault(row["id"], row)
        line_of.setdefault(row["id"], number)
        if _example_identity(first) != _example_identity(row):
            raise InputError(f"line {number}: example id {row['id']!r} is also the id of line "
                             f"{line_of[row['id']]}, with other content or scope; give each "
                             "example its own id")
    with app.uow() as uow:
        repo = ExampleRepository(uow.session)
        stored = repo.identities(rows)
        for example_id, identity in stored.items():
            if identity != _example_identity(rows[example_id]):
                raise InputError(f"line {line_of[example_id]}: example {example_id!r} already "
                                 "exists with other content or scope; import never overwrites: "
                                 "give a new id")
        fresh = [r for r in rows.values() if r["id"] not in stored]
        for start in range(0, len(fresh), 5000):
            repo.insert_many(fresh[start : start + 5000])
        uow.commit()
    result.inserted = len(fresh)
    result.duplicates = result.read - len(fresh)
    return result


def _example_identity(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["scope_key"], row["input"], row["output"]
