"""Import of sessions: all-or-nothing and idempotent by id.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from worker.app import App
from worker.clock import SKEW, utcnow
from worker.ingest.fields import (
    opt_str,
    opt_time,
    parse_scope,
    unknown_fields,
)
from worker.ingest.jsonl import ImportResult, InputError, read_jsonl
from worker.ingest.record_ids import adopt_unkeyed, derived_id, import_key, unkeyed_id
from worker.ingest.same_record import refuse_twice
from worker.store.scope_locks import hold_scopes

SESSION_FIELDS = {"id", "agent_id", "user_id", "company_id", "started_at", "ended_at",
                  "recorded_at"}


def parse_session(obj: dict[str, Any], number: int, id_key: str,
                  present: datetime | None = None) -> dict[str, Any]:
    """One session line; with ``present``, one that started or ended later than it (and
    ``SKEW``) is refused: the gate counts a session once it has started, so one dated 2099 was
    stored and silently never counted, and an end dated ahead held the scope's idle wait then.
    ``id_key``: the database's, that the id of a line without one is derived with."""
    unknown_fields(obj, SESSION_FIELDS, number)
    scope = parse_scope(obj, number)
    started = opt_time(obj, "started_at", number)
    if started is None:
        raise InputError(f"line {number}: started_at is required")
    if present is not None and started > present + SKEW:
        raise InputError(f"line {number}: started_at {started.isoformat()} is later than the "
                         f"present time ({present.isoformat(timespec='seconds')}): a session is "
                         "recorded once it has started (the gate would not count it until "
                         "then); give the time it started")
    ended = opt_time(obj, "ended_at", number)
    if ended is not None and ended < started:
        raise InputError(f"line {number}: ended_at {ended.isoformat()} is before started_at "
                         f"{started.isoformat()}; give the time the session ended, or leave "
                         "ended_at out")
    if present is not None and ended is not None and ended > present + SKEW:
        raise InputError(f"line {number}: ended_at {ended.isoformat()} is later than the "
                         f"present time ({present.isoformat(timespec='seconds')}): a session's "
                         "end is recorded once it has ended (the gate's idle wait would take "
                         "it for activity then); give the time it ended, or leave ended_at "
                         "out while it goes on")
    return {
        "id": opt_str(obj, "id", number) or derived_id(id_key, scope.key, started.isoformat()),
        "scope_key": scope.key, **scope.as_dict(),
        "started_at": started, "ended_at": ended,
        "recorded_at": _recorded_at(obj, number, started, present or utcnow()),
    }


def _recorded_at(obj: dict[str, Any], number: int, started: datetime,
                 present: datetime) -> datetime | None:
    """When the store a line was exported from recorded the session (what its gate counts
    from), or None: this import's time. Recorded once started, and by ``present`` (and
    ``SKEW``): one dated ahead would count toward every dream until then."""
    recorded = opt_time(obj, "recorded_at", number)
    if recorded is None:
        return None
    if recorded < started - SKEW:
        raise InputError(f"line {number}: recorded_at {recorded.isoformat()} is before "
                         f"started_at {started.isoformat()}: a session is recorded once it has "
                         "started; give the time it was recorded, or leave recorded_at out")
    if recorded > present + SKEW:
        raise InputError(f"line {number}: recorded_at {recorded.isoformat()} is later than the "
                         f"present time ({present.isoformat(timespec='seconds')}); give the time "
                         "the session was recorded, or leave recorded_at out")
    return recorded


def import_sessions(app: App, lines: Iterable[str | bytes], *,
                    present: datetime | None = None) -> ImportResult:
    """All-or-nothing and idempotent by id; an id reused for another session is refused, and
    with ``present`` (the CLI's clock) so is a session that has not started yet. A stored
    session without an end gets the ``ended_at`` a line gives it (``_ends_to_record``); its
    ``recorded_at`` stays the store's. A new one keeps the line's ``recorded_at`` (an export's)
    unless a dream of this store began since (``SessionRepository.add_many``)."""
    result, key = ImportResult(), import_key(app)
    rows: dict[str, dict[str, Any]] = {}
    line_of: dict[str, int] = {}
    unkeyed: dict[str, str] = {}  # a line without an id: its id → the one derived before
    for number, obj in read_jsonl(lines):
        result.read += 1
        row = parse_session(obj, number, key, present)
        if obj.get("id") is None:
            unkeyed[row["id"]] = unkeyed_id(row["scope_key"], row["started_at"].isoformat())
        first = rows.setdefault(row["id"], row)
        line_of.setdefault(row["id"], number)
        if _session_identity(first) != _session_identity(row):
            raise InputError(f"line {number}: session id {row['id']!r} is also the id of line "
                             f"{line_of[row['id']]}, with another scope or start; give each "
                             "session its own id")
        if first["ended_at"] != row["ended_at"]:
            refuse_twice(number, "session", row["id"], line_of[row["id"]], "ended_at")
        if first["recorded_at"] is None:
            first["recorded_at"] = row["recorded_at"]
        elif row["recorded_at"] not in (None, first["recorded_at"]):
            refuse_twice(number, "session", row["id"], line_of[row["id"]], "recorded_at")
    with app.uow() as uow:
        hold_scopes(uow.session, {r["scope_key"] for r in rows.values()})
        adopt_unkeyed(rows, line_of, unkeyed, uow.sessions.records, "session")
        stored = uow.sessions.records(rows, ("scope_key", "started_at", "ended_at"))
        for session_id, was in sorted(stored.items(), key=lambda s: line_of[s[0]]):
            _refuse_conflict(rows[session_id], was, line_of[session_id])
        fresh = [r for r in rows.values() if r["id"] not in stored]
        ended = _ends_to_record(uow.sessions.ends(stored), rows, line_of, present or utcnow())
        uow.sessions.add_many(fresh)
        uow.sessions.set_ended(ended)
        uow.commit()
    result.inserted = len(fresh)
    result.ended = len(ended)
    result.duplicates = result.read - len(fresh) - len(ended)
    return result


class EndRecorded(InputError):
    """A line's ``ended_at`` for a session whose other end is stored (the stored one stands);
    ``dream sessions add`` words it with its own options."""

    def __init__(self, message: str, was: datetime, end: datetime) -> None:
        super().__init__(message)
        self.was, self.end = was, end


def _refuse_conflict(row: dict[str, Any], was: dict[str, Any], number: int) -> None:
    """A stored id is the same session (scope and start); its end is ``_ends_to_record``'s."""
    if _session_identity(was) != _session_identity(row):
        raise InputError(f"line {number}: session {row['id']!r} already exists with another "
                         "scope or start; give a new id")


def _ends_to_record(stored: dict[str, datetime | None], rows: dict[str, dict[str, Any]],
                    line_of: dict[str, int], present: datetime) -> dict[str, datetime]:
    """The ends of stored sessions these lines give and the store has not: a host records a
    session as it starts and again with ``ended_at`` once it ends (dropped as "already
    present", the end was never recorded, and the gate's idle wait dreamed mid-conversation).
    Another end than the one stored is refused (the stored end stands), and so is an end later
    than ``present`` (and ``SKEW``), whoever imports."""
    ends: dict[str, datetime] = {}
    for session_id, was in stored.items():
        end = rows[session_id]["ended_at"]
        if end is None or end == was:
            continue
        number = line_of[session_id]
        if was is not None:
            raise EndRecorded(f"line {number}: session {session_id!r} already ended at "
                              f"{was.isoformat()}, not {end.isoformat()}; give the end it "
                              "has, or leave ended_at out", was, end)
        if end > present + SKEW:
            raise InputError(f"line {number}: ended_at {end.isoformat()} is later than the "
                             f"present time ({present.isoformat(timespec='seconds')}); give "
                             "the time the session ended once it has")
        ends[session_id] = end
    return ends


def _session_identity(row: dict[str, Any]) -> tuple[str, datetime]:
    return row["scope_key"], row["started_at"]
