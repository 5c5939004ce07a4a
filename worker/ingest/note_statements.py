"""``statements`` of an imported note: when its fact was said, as ``dream notes export`` writes
it for a note dated at a later statement (its own first date, then each later statement no note
holds, with the conversation it was said in). Written back as the exporting store's log held
them, so an erasure in this store dates the note back as the exporting store's would have.
Without them, a note dated at a statement of c2 kept that date when c2 was erased here."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from worker.domain.types import Said
from worker.ingest.fields import opt_str, opt_time, seq_value
from worker.ingest.jsonl import InputError
from worker.ingest.note_again import IMPORT_STATED_AGAIN
from worker.store.repositories.note_writes import SAID_IN
from worker.store.repositories.said_dates import FIRST_SAID, Statements
from worker.store.uow import UnitOfWork

MAX_AGAIN = 10_000  # later statements of one fact
_SHAPE = ('statements must be an object {"first": {"created_at": …, "write_seq": …}, "again": '
          '[{"created_at": …, "write_seq": …, "source_conversation_id": …}, …]}, as dream notes '
          'export writes it')


def parse_statements(value: object, created_at: datetime, number: int) -> Statements | None:
    """The line's ``statements``, none later than its own ``created_at``; absent: None."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"first", "again"} or "first" not in value:
        raise InputError(f"line {number}: {_SHAPE}")
    again = value.get("again")
    again = [] if again is None else again
    if not isinstance(again, list) or len(again) > MAX_AGAIN:
        raise InputError(f"line {number}: statements.again must be an array of at most "
                         f"{MAX_AGAIN} statements")
    first = _said(value["first"], number, {"created_at", "write_seq"})
    later = [(_said(s, number, {"created_at", "write_seq", "source_conversation_id"}),
              opt_str(s, "source_conversation_id", number)) for s in again]
    if any(when is not None and when > created_at for when, _ in [first, *(s for s, _ in later)]):
        raise InputError(f"line {number}: statements: a statement is dated after the note's "
                         "created_at; the note carries the date of its latest statement")
    return Statements(first, later)


def _said(value: object, number: int, keys: set[str]) -> Said:
    if not isinstance(value, dict) or set(value) - keys:
        raise InputError(f"line {number}: {_SHAPE}")
    when = opt_time(value, "created_at", number)
    if when is None:
        raise InputError(f"line {number}: statements: every statement needs its created_at")
    return when, seq_value(value.get("write_seq"), number, "statements: ")


def record_statements(uow: UnitOfWork, inserted: list[dict[str, Any]],
                      said: dict[str, Statements], now: datetime) -> None:
    """For each note inserted with ``statements``, the log rows the exporting store held: its
    first date (``FIRST_SAID``: a record, no statement), then each later statement as an
    ``import: stated again`` re-dating with its conversation. One insert for the import."""
    rows: list[dict[str, Any]] = []
    for note in inserted:
        found = said.get(note["id"])
        if found is None:
            continue
        rows.append(_row(note, found.first, (note["created_at"], note["write_seq"]), FIRST_SAID,
                         None, now))
        before = found.first
        for at, conversation in found.again:
            rows.append(_row(note, before, at, IMPORT_STATED_AGAIN, conversation, now))
            before = at
    uow.writes.add_log(rows)


def _row(note: dict[str, Any], before: Said, after: Said, reason: str,
         conversation: str | None, now: datetime) -> dict[str, Any]:
    image = _image(after)
    if conversation is not None:
        image[SAID_IN] = conversation
    return {"run_id": None, "scope_key": note["scope_key"], "entity": "note",
            "entity_id": note["id"], "op": "update", "before": _image(before), "after": image,
            "reason": reason, "created_at": now}


def _image(said: Said) -> dict[str, Any]:
    when, seq = said
    return {"created_at": when.isoformat() if when is not None else None, "write_seq": seq}
