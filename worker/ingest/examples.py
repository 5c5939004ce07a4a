"""Import of examples (input/output pairs): all-or-nothing and idempotent by id.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from worker.app import App
from worker.clock import utcnow
from worker.domain.limits import INT_MAX, visible_problem
from worker.domain.types import NoteStatus
from worker.ingest.fields import (
    choice,
    opt_number,
    opt_str,
    opt_time,
    parse_scope,
    unknown_fields,
)
from worker.ingest.jsonl import ImportResult, InputError, read_jsonl
from worker.ingest.record_ids import adopt_unkeyed, derived_id, import_key, unkeyed_id
from worker.ingest.same_record import first_difference, refuse_later, refuse_twice
from worker.store.scope_locks import hold_scopes

# What a stored example and a line of its id must agree on (besides scope, input, output); its
# status may only be the line's or later (archived), its reads anything.
_FIXED = ("success_score", "is_auto_generated", "created_at", "expires_at")
_STORED_FIELDS = (*_FIXED, "status")
EXAMPLE_FIELDS = {
    "id", "agent_id", "user_id", "company_id", "input", "output", "success_score",
    "is_auto_generated", "status", "access_count", "last_accessed_at", "created_at", "expires_at",
}


def parse_example(obj: dict[str, Any], number: int, now: datetime,
                  id_key: str) -> dict[str, Any]:
    """One JSONL object → an ``examples`` row dict, or InputError naming the line; ``id_key``:
    the database's, that the id of a line without one is derived with (``record_ids``)."""
    unknown_fields(obj, EXAMPLE_FIELDS, number)  # names the allowed ones, as every importer does
    scope = parse_scope(obj, number)
    for key in ("input", "output"):  # what a model is shown as an example, and a reviewer
        if not isinstance(obj.get(key), str) or not obj[key].strip():
            raise InputError(f"line {number}: {key} is required and must be a non-empty string")
        if problem := visible_problem(obj[key]):
            raise InputError(f"line {number}: {key} {problem}")
    score = obj.get("success_score")
    if score is not None:
        score = opt_number(obj, "success_score", number, 0.0, lo=0.0, hi=100.0)
    auto = obj.get("is_auto_generated", True)
    if not isinstance(auto, bool):
        raise InputError(f"line {number}: is_auto_generated must be true or false")
    status = choice(obj, "status", (NoteStatus.ACTIVE.value, NoteStatus.ARCHIVED.value),
                     NoteStatus.ACTIVE.value, number)
    access_count = opt_number(obj, "access_count", number, 0, lo=0, hi=INT_MAX)
    if access_count != int(access_count):
        raise InputError(f"line {number}: access_count must be a whole number")
    created, expires = (opt_time(obj, "created_at", number),
                        opt_time(obj, "expires_at", number))
    if created is not None and expires is not None and expires < created:
        # Two dates of the line that contradict each other (swapped, a wrong year), refused as
        # a note's are: the next dream archived the example as expired. A line without
        # created_at is recorded at the import's time, and may come already expired.
        raise InputError(
            f"line {number}: expires_at {expires.isoformat()} is before created_at "
            f"{created.isoformat()}; an example cannot expire before it was written: fix "
            "expires_at or created_at, or drop expires_at")
    return {
        "id": opt_str(obj, "id", number) or derived_id(id_key, scope.key, obj["input"],
                                                       obj["output"]),
        "scope_key": scope.key, **scope.as_dict(),
        "input": obj["input"], "output": obj["output"], "success_score": score,
        "is_auto_generated": auto, "status": status, "access_count": int(access_count),
        "last_accessed_at": opt_time(obj, "last_accessed_at", number),
        "created_at": created or now, "expires_at": expires, "version": 1,
    }


def import_examples(app: App, lines: Iterable[str | bytes]) -> ImportResult:
    """All-or-nothing and idempotent by id: a bad line anywhere writes nothing (R22); an id
    reused for another example is refused, never dropped."""
    from worker.store.repositories.examples import ExampleRepository

    now, key = utcnow(), import_key(app)
    result = ImportResult()
    rows: dict[str, dict[str, Any]] = {}
    line_of: dict[str, int] = {}
    undated: set[str] = set()  # lines without created_at (the import's time)
    unkeyed: dict[str, str] = {}  # a line without an id: its id → the one derived before
    for number, obj in read_jsonl(lines):
        result.read += 1
        row = parse_example(obj, number, now, key)
        if obj.get("id") is None:
            unkeyed[row["id"]] = unkeyed_id(*_example_identity(row))
        first = rows.setdefault(row["id"], row)
        line_of.setdefault(row["id"], number)
        if _example_identity(first) != _example_identity(row):
            raise InputError(f"line {number}: example id {row['id']!r} is also the id of line "
                             f"{line_of[row['id']]}, with other content or scope; give each "
                             "example its own id")
        if differs := first_difference(first, row, row):
            refuse_twice(number, "example", row["id"], line_of[row["id"]], differs)
        if obj.get("created_at") is None:
            undated.add(row["id"])
    with app.uow() as uow:
        repo = ExampleRepository(uow.session)
        hold_scopes(uow.session, {r["scope_key"] for r in rows.values()})
        moved = adopt_unkeyed(rows, line_of, unkeyed, repo.records, "example")
        undated = {moved.get(i, i) for i in undated}
        stored = repo.records(rows, ("scope_key", "input", "output", *_STORED_FIELDS))
        for example_id, was in sorted(stored.items(), key=lambda s: line_of[s[0]]):
            _refuse_conflict(rows[example_id], was, line_of[example_id], example_id in undated)
        fresh = [r for r in rows.values() if r["id"] not in stored]
        for start in range(0, len(fresh), 5000):
            repo.insert_many(fresh[start : start + 5000])
        uow.commit()
    result.inserted = len(fresh)
    result.duplicates = result.read - len(fresh)
    return result


def _refuse_conflict(row: dict[str, Any], was: dict[str, Any], number: int, undated: bool) -> None:
    """A stored id is already present for the same example or an earlier state of it: the store
    may have archived it since (a line active, the stored one archived) and counted its reads
    (``access_count``, ``last_accessed_at``: the host's). Another example under the id, or a
    later state (the line archived, the stored one active), is refused (``same_record``)."""
    if _example_identity(was) != _example_identity(row):
        raise InputError(f"line {number}: example {row['id']!r} already exists with other "
                         "content or scope; import never overwrites: give a new id")
    fields = [f for f in _FIXED if not (undated and f == "created_at")]
    if differs := first_difference(was, row, fields):
        refuse_later(number, "example", row["id"], differs, "another example under its id")
    if row["status"] != was["status"] and row["status"] == NoteStatus.ARCHIVED.value:
        refuse_later(number, "example", row["id"], "status", "a later state of it (archived, "
                     "the stored one active)")


def _example_identity(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["scope_key"], row["input"], row["output"]
