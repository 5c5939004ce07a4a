"""Import of notes: parse each line into a ``notes`` row (embedding checks included), then insert
the new ones and their lineage all at once, skipping notes already present by id, or by content
hash where a live note of the scope holds the text (``_present``).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from worker.app import App
from worker.clock import next_write_seq, utcnow
from worker.domain.limits import INT_MAX, NOTE_CHARS_MAX, ident_problem, visible_problem
from worker.domain.types import (
    NoteStatus,
    NoteType,
    Protection,
    Scope,
    content_hash,
    conversations_of,
)
from worker.ingest.fields import (
    choice,
    opt_number,
    opt_str,
    opt_text,
    opt_time,
    parse_scope,
    seq_value,
    unknown_fields,
)
from worker.ingest.jsonl import ImportResult, InputError, read_jsonl
from worker.ingest.note_again import (
    Holders,
    held,
    restate_stored,
)
from worker.ingest.note_apart import parse_apart, record_apart
from worker.ingest.note_links import (
    EdgeDates,
    Edges,
    check_references,
    lineage_rows,
    parse_links,
    references,
)
from worker.ingest.note_statements import parse_statements, record_statements
from worker.ingest.note_states import check_links, check_state
from worker.ingest.note_vectors import check_vectors, embed_missing, parse_embedding
from worker.ingest.same_record import first_difference, refuse_later, refuse_twice
from worker.store.repositories.said_dates import Statements
from worker.store.scope_locks import hold_scopes
from worker.store.uow import UnitOfWork

NOTE_FIELDS = {
    "id", "agent_id", "user_id", "company_id", "content", "type", "created_at", "updated_at",
    "last_accessed_at", "access_count", "importance", "expires_at", "is_auto_generated",
    "protection", "source_conversation_id", "embedding", "embedding_model", "metadata", "status",
    "valid_from", "valid_to", "consolidated_into_id", "comments", "lineage",
    "consolidation_generation", "flags", "last_checked_at", "lineage_conversation_ids",
    "kept_apart", "write_seq", "statements",
}
MAX_FLAGS = 32  # a run adds one or two ("injection", "contradiction_review")
_NOTE_TYPES = {t.value.lower(): t.value for t in NoteType}
_PROTECTIONS = {p.value for p in Protection}
_STATUSES = {s.value for s in NoteStatus}
# What ``remember`` also takes for "already in the scope": a note of these statuses stands in
# for a line of any status; a retired one only for a retired line, never for a live one.
_LIVE = frozenset({NoteStatus.ACTIVE.value, NoteStatus.PENDING.value})


_TO_NUMBER = object()
# What a line of a stored id is compared on when it is a later state than the store's (its
# ``updated_at`` after the stored one's): every column an export writes but the note's text and
# scope (compared first), its ``updated_at`` (the clock), ``write_seq`` (numbered by the import
# when a line leaves it out; it moves with ``created_at``) and the vector (this store's own).
_STORED_FIELDS = ("type", "status", "protection", "is_auto_generated", "importance",
                  "access_count", "last_accessed_at", "created_at", "expires_at", "valid_from",
                  "valid_to", "last_checked_at", "source_conversation_id", "consolidated_into_id",
                  "comments", "consolidation_generation", "flags", "lineage_conversation_ids",
                  "meta")  # a line without ``write_seq``: numbered once the file is read


def _write_seq(obj: dict[str, Any], number: int) -> object:
    """An export's recorded order, kept (null: none was recorded); left out, ``_TO_NUMBER``."""
    if "write_seq" not in obj:
        return _TO_NUMBER
    return seq_value(obj["write_seq"], number, hint=" (the file's line order is then used)")


def _flags(value: object, number: int) -> list[str] | None:
    """The marks runs leave on a note they keep (``injection``: held out of clustering), as the
    export writes them; absent or empty (an older export) is none."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_FLAGS:
        raise InputError(f"line {number}: flags must be an array of at most {MAX_FLAGS} "
                         'strings, e.g. ["injection"]')
    for flag in value:
        if not isinstance(flag, str) or (problem := ident_problem(flag)):
            what = problem if isinstance(flag, str) else "must be a non-empty string"
            raise InputError(f"line {number}: a flag {what}")
    if len(set(value)) != len(value):
        raise InputError(f"line {number}: flags names a flag twice; give each once")
    return list(value) or None


def _content(value: object, number: int) -> str:
    """A note's text: a string with something to read in it."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"line {number}: content is required and must be a non-empty string")
    if problem := visible_problem(value):
        raise InputError(f"line {number}: content {problem}")
    if len(value) > NOTE_CHARS_MAX:
        raise InputError(f"line {number}: content has {len(value):,} characters; a note holds at "
                         f"most {NOTE_CHARS_MAX:,}: split the text into notes of one fact each")
    return value


def parse_note(obj: dict[str, Any], number: int, now: datetime, dims: int | None) -> dict[str, Any]:
    """One JSONL object → a full ``notes`` row dict, or InputError naming the line."""
    unknown_fields(obj, NOTE_FIELDS, number)  # names the allowed ones, as every importer does
    content = _content(obj.get("content"), number)
    scope = parse_scope(obj, number)
    raw_type = obj.get("type", "Context")
    if not isinstance(raw_type, str) or raw_type.lower() not in _NOTE_TYPES:
        raise InputError(
            f"line {number}: type must be one of {', '.join(t.value for t in NoteType)}"
        )
    protection = choice(obj, "protection", _PROTECTIONS, Protection.STANDARD.value, number)
    status = choice(obj, "status", _STATUSES, NoteStatus.ACTIVE.value, number)
    auto = obj.get("is_auto_generated", True)
    if not isinstance(auto, bool):
        raise InputError(f"line {number}: is_auto_generated must be true or false")
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InputError(f"line {number}: metadata must be a JSON object")
    vector = parse_embedding(obj.get("embedding"), number, dims)
    created = opt_time(obj, "created_at", number) or now
    access_count = int(opt_number(obj, "access_count", number, 0, lo=0, hi=INT_MAX))
    if access_count != opt_number(obj, "access_count", number, 0):
        raise InputError(f"line {number}: access_count must be a whole number")
    note_id = opt_str(obj, "id", number) or str(uuid.uuid4())
    model = opt_text(obj, "embedding_model", number, 200)
    return {
        "id": note_id,
        "scope_key": scope.key,
        "agent_id": scope.agent_id,
        "user_id": scope.user_id,
        "company_id": scope.company_id,
        "source_conversation_id": opt_str(obj, "source_conversation_id", number),
        "type": _NOTE_TYPES[raw_type.lower()],
        "content": content,
        "content_hash": content_hash(content),
        "embedding": vector,
        "embedding_model": model if vector is not None else None,
        "status": status,
        "is_auto_generated": auto,
        "protection": protection,
        "importance": opt_number(obj, "importance", number, 0.5, lo=0.0, hi=1.0),
        "access_count": access_count,
        "last_accessed_at": opt_time(obj, "last_accessed_at", number),
        "created_at": created,
        "updated_at": opt_time(obj, "updated_at", number) or created,
        "expires_at": opt_time(obj, "expires_at", number),
        # Left out: valid from its creation. An export's null (a host's row without one) stays.
        "valid_from": opt_time(obj, "valid_from", number) if "valid_from" in obj else created,
        "valid_to": opt_time(obj, "valid_to", number),
        "meta": metadata,
        "flags": _flags(obj.get("flags"), number),
        "last_checked_at": opt_time(obj, "last_checked_at", number),
        "version": 1,
        "write_seq": _write_seq(obj, number),
        **parse_links(obj, number),
    }


@dataclass
class _Lines:
    """A file's rows in line order, with what the rows themselves do not carry."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    first_line: dict[str, tuple[int, str, str]] = field(default_factory=dict)
    anonymous: set[str] = field(default_factory=set)  # ids made up here: the line had none
    stored: set[str] = field(default_factory=set)  # the lines' ids the store already holds
    undated: set[str] = field(default_factory=set)  # lines without created_at (the import's time)
    lineage: dict[str, Edges] = field(default_factory=dict)
    edge_dates: dict[str, EdgeDates] = field(default_factory=dict)  # the dates edges give
    apart: dict[str, list[list[str]]] = field(default_factory=dict)  # ``kept_apart`` sets
    said: dict[str, Statements] = field(default_factory=dict)  # ``statements``
    # Each id's first line, all it gives (``same_record``: a later line of the id must match).
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    stamped: set[str] = field(default_factory=set)  # lines giving updated_at or created_at


def import_notes(app: App, lines: Iterable[str | bytes]) -> ImportResult:
    """All-or-nothing, idempotent: a stored id adds no row, nor does a line whose content its
    scope already holds (see ``_present``)."""
    dims = app.embedder.dimensions  # checked per line so the error names the line (R22)
    result = ImportResult()
    parsed = _parse_lines(lines, utcnow(), dims, result)
    result.warnings.extend(check_vectors(app, parsed.rows))
    with app.uow() as uow:
        planned = _planned(uow, parsed)
    # Embedded before the write holds the store (a remote model may be slow), then what was
    # fresh is looked at again under it: an import of the same lines committed meanwhile
    # makes them present (what was present stays so: an import never removes a note).
    embed_missing(app, planned)
    line_of = {i: first[0] for i, first in parsed.first_line.items()}
    with app.uow() as uow:
        hold_scopes(uow.session, {r["scope_key"] for r in parsed.rows})
        fresh = _planned(uow, parsed, planned)  # a subset of ``planned``: embedded already
        edges = lineage_rows(uow, fresh, parsed.lineage, line_of, parsed.edge_dates)
        for start in range(0, len(fresh), 5000):
            uow.notes.insert_many(fresh[start : start + 5000])
        record_statements(uow, fresh, parsed.said, utcnow())  # before the re-datings below
        # A line without a date says nothing of when the fact was said again.
        inserted = {r["id"] for r in fresh}
        result.restated = len(restate_stored(
            uow, parsed.rows, inserted | parsed.stored | parsed.undated, utcnow()) - inserted)
        for start in range(0, len(edges), 5000):  # after the notes: their foreign keys
            uow.notes.insert_lineage(edges[start : start + 5000])
        record_apart(uow, parsed.apart, set(parsed.first_line), line_of, utcnow())
        uow.commit()
    result.inserted = len(fresh)
    result.duplicates = result.read - len(fresh)
    return result


def _planned(uow: UnitOfWork, parsed: _Lines,
             rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The rows to insert of ``rows`` (default: all), refusing an id the store holds for
    another note and a pointer or parent at no note (``check_references``)."""
    rows = parsed.rows if rows is None else rows
    stored = uow.notes.records((r["id"] for r in rows),
                               ("scope_key", "content_hash", "updated_at", *_STORED_FIELDS))
    parsed.stored |= set(stored)
    _refuse_id_conflicts(rows, stored, parsed)
    # Every line checked whole before any is found already present (and so never inserted).
    check_references(uow, rows, parsed.lineage,
                     {i: first[0] for i, first in parsed.first_line.items()}, parsed.rows)
    return _fresh(uow, parsed, set(stored), rows)


def _parse_lines(lines: Iterable[str | bytes], now: datetime, dims: int | None,
                 result: ImportResult) -> _Lines:
    parsed = _Lines()
    for number, obj in read_jsonl(lines):
        result.read += 1
        row = parse_note(obj, number, now, dims)
        edges, dates = row.pop("lineage"), row.pop("lineage_dates")
        if obj.get("id") is None:
            parsed.anonymous.add(row["id"])
        if obj.get("created_at") is None:
            parsed.undated.add(row["id"])
        first = parsed.first_line.setdefault(
            row["id"], (number, row["scope_key"], row["content_hash"]))
        if first[1:] != (row["scope_key"], row["content_hash"]):
            # 1 and "1" are the same id: keeping either line would drop the other silently.
            raise InputError(f"line {number}: id {row['id']!r} is also the id of line {first[0]}, "
                             "with other content or scope; give each note its own id")
        check_state(row, edges, number, dated=obj.get("created_at") is not None)
        apart = parse_apart(obj.get("kept_apart"), row["id"], number)
        said = parse_statements(obj.get("statements"), row["created_at"], number)
        whole = {**row, "lineage": edges, "lineage_dates": dates, "kept_apart": apart,
                 "statements": said}
        if (seen := parsed.seen.setdefault(row["id"], whole)) is not whole and (
                differs := first_difference(seen, whole, whole)):
            refuse_twice(number, "note", row["id"], first[0], differs)
        if obj.get("updated_at") is not None or obj.get("created_at") is not None:
            parsed.stamped.add(row["id"])
        parsed.lineage.setdefault(row["id"], edges)
        parsed.edge_dates.setdefault(row["id"], dates)
        if apart:
            parsed.apart.setdefault(row["id"], apart)
        if said:
            parsed.said.setdefault(row["id"], said)
        parsed.rows.append(row)
    check_links(parsed.rows, parsed.lineage, {i: f[0] for i, f in parsed.first_line.items()})
    _number(parsed.rows)
    return parsed


def _number(rows: list[dict[str, Any]]) -> None:
    """``write_seq`` for the lines that leave it out: the order each scope's notes were said in,
    what orders two notes of one ``created_at``. A file lists a history oldest first, or newest
    first (a table read by date, descending): the scope's own lines say which, by how many are
    dated after the line before and how many before it (half as many again one way: a file
    written attribute by attribute, each oldest first, still reads as oldest first); with nothing
    to tell (one date, or none given) it is read from the top. A scope whose lines go both ways
    alike is in no order: its notes get none, as notes written before the store kept one (a
    tie between two of them stays a tie). Numbered the wrong way, a same-day correction would
    lose to the statement it corrects."""
    by_scope: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["write_seq"] is _TO_NUMBER:
            r["write_seq"] = None
            by_scope.setdefault(r["scope_key"], []).append(r)
    for said in by_scope.values():
        later = sum(b["created_at"] > a["created_at"] for a, b in itertools.pairwise(said))
        earlier = sum(b["created_at"] < a["created_at"] for a, b in itertools.pairwise(said))
        if 2 * earlier > 3 * later:
            said.reverse()
        elif earlier and 2 * later <= 3 * earlier:
            continue
        for r in said:
            r["write_seq"] = next_write_seq()


def _fresh(uow: UnitOfWork, parsed: _Lines, stored_ids: set[str],
           rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows to insert: those of ``rows`` not already present (``_present``), in file
    order. One hash query per scope."""
    by_scope: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_scope.setdefault(r["scope_key"], []).append(r)
    named = {target for r in parsed.rows for _, target in references(r, parsed.lineage)}
    fresh: list[dict[str, Any]] = []
    seen = set(stored_ids)
    for key, group in by_scope.items():
        stored = uow.notes.statuses_by_hash(Scope.from_key(key), [r["content_hash"] for r in group])
        earlier: Holders = {}
        for r in group:
            if r["id"] in seen or _present(r, parsed, named, stored, earlier):
                continue  # a live one dates the note holding its text (``restate_stored``)
            seen.add(r["id"])
            held_in = conversations_of(r["source_conversation_id"], r["lineage_conversation_ids"])
            earlier.setdefault(r["content_hash"], {}).setdefault(held_in, set()).add(r["status"])
            fresh.append(r)
    return fresh


def _present(row: dict[str, Any], parsed: _Lines, named: set[str],
             stored: Holders, earlier: Holders) -> bool:
    """Whether the content of a line whose id is new makes it already present. A line with an id:
    when it is live and a stored live note of its scope holds its text (no live twin), unless
    another line points at it. Distinct ids in one file are distinct notes: a fused note and the
    revoked source whose words it kept are both restored. A line without an id gets a new UUID on
    each import, so re-importing the file must find it by content: present when its scope holds
    the text, stored or earlier in the file, in a live note, or in any note when it is retired.
    A retired note never stands in for a live line, nor a note said in one conversation for a
    line of another (``note_again.held``)."""
    live = row["status"] in _LIVE
    if row["id"] not in parsed.anonymous:
        return live and bool(held(stored, row) & _LIVE) and row["id"] not in named
    holding = held(stored, row) | held(earlier, row)
    return bool(holding & _LIVE) or (bool(holding) and not live)


def _refuse_id_conflicts(rows: list[dict[str, Any]], stored: dict[str, dict[str, Any]],
                         parsed: _Lines) -> None:
    """An id already stored counts as "already present" only for the same note, or an earlier
    state of it (``same_record``); anything else would be a silent drop of the line (import
    never overwrites)."""
    for r in rows:
        if (was := stored.get(r["id"])) is None:
            continue
        number = parsed.first_line[r["id"]][0]
        if was["scope_key"] != r["scope_key"]:
            raise InputError(f"line {number}: id {r['id']!r} is already used by a note of another "
                             "scope; give this note a new id (or drop the id field)")
        if was["content_hash"] != r["content_hash"]:
            raise InputError(f"line {number}: note {r['id']!r} already exists with other content; "
                             "import never overwrites a note: give a new id (or drop the id "
                             "field) to add it")
        # Stored at its line's state or changed since (a dream stamps its write): present.
        if r["id"] not in parsed.stamped or r["updated_at"] <= was["updated_at"]:
            continue
        made_up = ("created_at", "valid_from") if r["id"] in parsed.undated else ()
        if differs := first_difference(was, r, (f for f in _STORED_FIELDS if f not in made_up)):
            refuse_later(number, "note", r["id"], differs, "a later state of it (its updated_at "
                         f"{r['updated_at'].isoformat()} is after the stored "
                         f"{was['updated_at'].isoformat()})")
