"""The undo's writes: examples given back their status, the undo's operation-log rows, and the
before-images it restores (``worker.safety.undo`` restores the notes)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from worker.safety.undo_result import NoteOutcome, UndoResult, outcome_entry
from worker.store.models import OperationLogRow
from worker.store.repositories.note_writes import TRACKED_FIELDS
from worker.store.uow import UnitOfWork

DATETIME_FIELDS = ("valid_to", "last_checked_at", "created_at", "expires_at")


def restore_examples(uow: UnitOfWork, run_id: str,
                     by_example: dict[str, list[OperationLogRow]],
                     examples: dict[str, tuple[int, str, str]], now: datetime,
                     result: UndoResult) -> str | None:
    """Each example the run archived gets its status back (one guarded write, one log insert);
    the first id that changed meanwhile, if any (the caller rolls the whole undo back)."""
    writes: list[tuple[str, int, dict[str, Any]]] = []
    log: list[dict[str, Any]] = []
    for example_id, example_rows in sorted(by_example.items()):
        if example_id not in examples:
            result.missing.append(example_id)  # erased since (dream erase --user)
            result.note(outcome_entry("example", example_id, NoteOutcome.MISSING,
                                      why="erased since; nothing to restore"))
            continue
        version, status, scope_key = examples[example_id]
        before_status = next((r.before or {}).get("status") for r in example_rows)
        if before_status is None:
            continue
        writes.append((example_id, version, {"status": before_status}))
        log.append(undo_log(run_id, scope_key, "example", example_id,
                             {"status": status, "version": version},
                             {"status": before_status, "version": version + 1}, now))
        result.examples.append(example_id)
        result.note(outcome_entry("example", example_id, NoteOutcome.RESTORED, was=status,
                                  status=before_status))
    if moved := uow.safety.restore_examples(writes):
        return moved[0]
    uow.writes.add_log(log)
    return None


def undo_log(run_id: str, scope_key: str, entity: str, entity_id: str,
              before: dict[str, Any], after: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The operation-log row of one note's or example's undo (no run id: the undo is no run)."""
    return {"run_id": None, "scope_key": scope_key, "entity": entity, "entity_id": entity_id,
            "op": "undo", "before": before, "after": after, "reason": f"undo of run {run_id}",
            "created_at": now}


def before_image(rows: list[OperationLogRow]) -> dict[str, Any]:
    """The earliest before-value of every tracked field the run changed."""
    values: dict[str, Any] = {}
    for r in rows:
        for f, v in (r.before or {}).items():
            if f in TRACKED_FIELDS and f not in values:
                values[f] = datetime.fromisoformat(v) if f in DATETIME_FIELDS and v else v
    return values


def jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value
