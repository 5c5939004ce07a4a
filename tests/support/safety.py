"""Helpers for the safety tests: run rows, comparable note states, whole-database text dumps."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import select

from worker.app import App
from worker.domain.types import RunStatus, Scope, content_hash
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


def fuse_in_run(app: App, scope: Scope, run_id: str, ids: list[str], text: str, *, now: datetime,
                commented: bool = True) -> str:
    """What consolidation writes for one cluster of ``scope`` in run ``run_id``: a fused note,
    its lineage, the sources revoked into it (``commented``: each saying so). The fused id."""
    with app.uow() as uow:
        notes = {n.id: n for n in uow.notes.get_many(ids)}
        new_id = uow.notes.create_note(scope=scope, content=text, content_hash=content_hash(text),
                                       type="Preference", embedding=None, embedding_model=None,
                                       run_id=run_id, now=now, consolidation_generation=1)
        uow.notes.add_lineage(scope, ids, new_id, "consolidated", run_id, now)
        comment = {"comments": f"merged into {new_id}"} if commented else {}
        for nid in ids:
            assert uow.notes.change(notes[nid], run_id=run_id, reason="merged", now=now,
                                    status="revoked", consolidated_into_id=new_id, **comment)
        uow.commit()
    return new_id


def reweigh_in_run(app: App, scope: Scope, note_id: str, reason: str, *, now: datetime) -> str:
    """A finished run of its own that changed ``note_id``'s importance (a new version) and left
    it active; the run's id."""
    run_id = run_row(app, scope)
    with app.uow() as uow:
        (note,) = uow.notes.get_many([note_id])
        assert uow.notes.change(note, run_id=run_id, reason=reason, now=now, importance=0.9)
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
