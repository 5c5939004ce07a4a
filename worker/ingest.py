"""JSONL import of notes, sessions and entities: validate every line first, then write all at once.

A bad line anywhere means nothing is written (R22); the error names the line number.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from worker.app import App
from worker.clock import parse_timestamp, utcnow
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


def read_jsonl(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise InputError(f"line {number}: expected a JSON object, got {type(obj).__name__}")
        yield number, obj


def _opt_str(obj: dict[str, Any], key: str, number: int) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str | int) or isinstance(value, bool) or str(value).strip() == "":
        raise InputError(f"line {number}: {key} must be a non-empty string")
    return str(value)


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
    agent_id = _opt_str(obj, "agent_id", number)
    if agent_id is None:
        raise InputError(f"line {number}: agent_id is required")
    scope = Scope(agent_id, _opt_str(obj, "user_id", number), _opt_str(obj, "company_id", number))
    raw_type = obj.get("type", "Context")
    if not isinstance(raw_type, str) or raw_type.lower() not in _NOTE_TYPES:
        raise InputError(
            f"line {number}: type must be one of {', '.join(t.value for t in NoteType)}"
        )
    protection = obj.get("protection", Protection.STANDARD.value)
    if protection not in _PROTECTIONS:
        raise InputError(f"line {number}: protection must be one of {', '.join(sorted(_PROTECTIONS))}")
    status = obj.get("status", NoteStatus.ACTIVE.value)
    if status not in _STATUSES:
        raise InputError(f"line {number}: status must be one of {', '.join(sorted(_STATUSES))}")
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
        vector = np.asarray(embedding, dtype=np.float32)
        norm = float(np.linalg.norm(vector))
        if norm == 0:
            raise InputError(f"line {number}: embedding is all zeros")
        vector = vector / norm
    created = _opt_time(obj, "created_at", number) or now
    access_count = int(_opt_number(obj, "access_count", number, 0, lo=0))
    if access_count != _opt_number(obj, "access_count", number, 0):
        raise InputError(f"line {number}: access_count must be a whole number")
    note_id = _opt_str(obj, "id", number) or str(uuid.uuid4())
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
        "embedding_model": (obj.get("embedding_model") or "imported") if vector is not None else None,
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


def import_notes(app: App, lines: Iterable[str]) -> ImportResult:
    """All-or-nothing, idempotent: same id, or same content hash in the same scope, adds no row."""
    now = utcnow()
    dims = app.embedder.dimensions  # checked per line so the error names the line (R22)
    result = ImportResult()
    rows: list[dict[str, Any]] = []
    for number, obj in read_jsonl(lines):
        result.read += 1
        rows.append(parse_note(obj, number, now, dims))
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
        existing_ids = uow.notes.existing_ids(r["id"] for r in rows)
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


def _embed_missing(app: App, rows: list[dict[str, Any]]) -> None:
    todo = [r for r in rows if r["embedding"] is None]
    if not todo:
        return
    texts = [r["content"] for r in todo]
    vectors = app.embedder.embed(texts)
    for r, v in zip(todo, vectors, strict=True):
        r["embedding"] = v
        r["embedding_model"] = app.embedder.model_name


def parse_session(obj: dict[str, Any], number: int) -> dict[str, Any]:
    agent_id = _opt_str(obj, "agent_id", number)
    if agent_id is None:
        raise InputError(f"line {number}: agent_id is required")
    scope = Scope(agent_id, _opt_str(obj, "user_id", number), _opt_str(obj, "company_id", number))
    started = _opt_time(obj, "started_at", number)
    if started is None:
        raise InputError(f"line {number}: started_at is required")
    return {
        "id": _opt_str(obj, "id", number) or str(uuid.uuid4()),
        "scope_key": scope.key, **scope.as_dict(),
        "started_at": started, "ended_at": _opt_time(obj, "ended_at", number),
    }


def import_sessions(app: App, lines: Iterable[str]) -> ImportResult:
    result = ImportResult()
    rows = []
    for number, obj in read_jsonl(lines):
        result.read += 1
        rows.append(parse_session(obj, number))
    with app.uow() as uow:
        existing = uow.sessions.existing_ids(r["id"] for r in rows)
        fresh = [r for r in {r["id"]: r for r in rows}.values() if r["id"] not in existing]
        uow.sessions.add_many(fresh)
        uow.commit()
    result.inserted = len(fresh)
    result.duplicates = result.read - len(fresh)
    return result


_ENTITY_KINDS = {"agent", "user", "company", "conversation"}
_ENTITY_STATUSES = {"active", "disabled", "deleted"}


def parse_entity(obj: dict[str, Any], number: int) -> tuple[str, dict[str, Any]]:
    kind = obj.get("kind")
    if kind not in _ENTITY_KINDS:
        raise InputError(f"line {number}: kind must be one of agent, user, company, conversation")
    entity_id = _opt_str(obj, "id", number)
    if entity_id is None:
        raise InputError(f"line {number}: id is required")
    status = obj.get("status", "active")
    if status not in _ENTITY_STATUSES:
        raise InputError(f"line {number}: status must be one of active, disabled, deleted")
    row: dict[str, Any] = {"id": entity_id, "status": status,
                           "deleted_at": _opt_time(obj, "deleted_at", number)}
    if kind == "agent":
        for key, default in (("note_retention_days", 90), ("example_retention_days", 180)):
            value = obj.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"line {number}: {key} must be a positive whole number of days")
            row[key] = value
        enabled = obj.get("auto_archive_enabled", True)
        if enabled is not None and not isinstance(enabled, bool):
            raise InputError(f"line {number}: auto_archive_enabled must be true, false or null")
        row["auto_archive_enabled"] = enabled
        row["name"] = obj.get("name")
        row.update(_agent_gate(obj, number))
    if kind == "conversation":
        reason = obj.get("deleted_reason")
        if reason is not None and not isinstance(reason, str):
            raise InputError(f"line {number}: deleted_reason must be a string")
        row["deleted_reason"] = reason
    return kind, row


# An agent's own gate (NULL = the deployment's DREAM_GATE_*): (key, whole number?, lowest, above?).
_AGENT_GATE = (("gate_hours", False, 0, False), ("gate_sessions", True, 0, False),
               ("gate_notes", True, 1, False), ("gate_idle_minutes", False, 0, True),
               ("gate_max_stale_hours", False, 0, True))


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
        row[key] = None if value is None else (int(value) if whole else float(value))
    return row


def import_entities(app: App, lines: Iterable[str]) -> ImportResult:
    result = ImportResult()
    grouped: dict[str, dict[str, dict[str, Any]]] = {}
    for number, obj in read_jsonl(lines):
        result.read += 1
        kind, row = parse_entity(obj, number)
        grouped.setdefault(kind, {})[row["id"]] = row
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
    agent_id = _opt_str(obj, "agent_id", number)
    if agent_id is None:
        raise InputError(f"line {number}: agent_id is required")
    scope = Scope(agent_id, _opt_str(obj, "user_id", number), _opt_str(obj, "company_id", number))
    for key in ("input", "output"):
        if not isinstance(obj.get(key), str) or not obj[key].strip():
            raise InputError(f"line {number}: {key} is required and must be a non-empty string")
    score = obj.get("success_score")
    if score is not None:
        score = _opt_number(obj, "success_score", number, 0.0, lo=0.0, hi=100.0)
    auto = obj.get("is_auto_generated", True)
    if not isinstance(auto, bool):
        raise InputError(f"line {number}: is_auto_generated must be true or false")
    status = obj.get("status", NoteStatus.ACTIVE.value)
    if status not in (NoteStatus.ACTIVE.value, NoteStatus.ARCHIVED.value):
        raise InputError(f"line {number}: status must be active or archived")
    access_count = _opt_number(obj, "access_count", number, 0, lo=0)
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


def import_examples(app: App, lines: Iterable[str]) -> ImportResult:
    """All-or-nothing and idempotent by id: a bad line anywhere writes nothing (R22)."""
    from worker.store.repositories.examples import ExampleRepository

    now = utcnow()
    result = ImportResult()
    rows: dict[str, dict[str, Any]] = {}
    for number, obj in read_jsonl(lines):
        result.read += 1
        row = parse_example(obj, number, now)
        rows.setdefault(row["id"], row)
    with app.uow() as uow:
        repo = ExampleRepository(uow.session)
        existing = repo.existing_ids(rows)
        fresh = [r for r in rows.values() if r["id"] not in existing]
        for start in range(0, len(fresh), 5000):
            repo.insert_many(fresh[start : start + 5000])
        uow.commit()
    result.inserted = len(fresh)
    result.duplicates = result.read - len(fresh)
    return result
