"""Helpers for the safety tests: run rows, comparable note states, whole-database text dumps."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from worker.app import App
from worker.domain.types import RunStatus, Scope
from worker.runs import service
from worker.store.models import Base, NoteRow

# What "the same memory" means for equality checks: everything a reader sees, not the version.
STATE_FIELDS = ("status", "content", "consolidated_into_id", "comments", "importance", "flags",
                "valid_to", "protection", "scope_key")


def run_row(app: App, scope: Scope, status: str = RunStatus.SUCCEEDED.value) -> str:
    """A finished run row to attribute hand-written changes to."""
    run_id = service.create_run(app, scope, force=True)
    assert run_id is not None
    with app.uow() as uow:
        uow.runs.set_status(run_id, status)
        uow.commit()
    return run_id


def note_states(app: App) -> dict[str, dict[str, Any]]:
    with app.uow() as uow:
        rows = uow.session.scalars(select(NoteRow)).all()
        return {r.id: {f: getattr(r, f) for f in STATE_FIELDS} for r in rows}


def all_rows_text(app: App) -> str:
    """Every row of every table as text (embeddings included as repr)."""
    parts: list[str] = []
    with app.engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            for row in conn.execute(table.select()):
                parts.append(json.dumps([repr(v) if not isinstance(v, str | int | float | None)
                                         else v for v in row], ensure_ascii=False))
    return "\n".join(parts)
