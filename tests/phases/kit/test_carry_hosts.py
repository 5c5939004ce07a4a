"""The carried scope against host writes that keep a note's version, on SQLite and PostgreSQL:
what archive decides on (a note's expiry, its last use) changed by the host between phases must
count in an in-process run as it does in a run whose phases each read afresh (Celery)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from tests.support.factories import NOW, add_notes, days_ago
from worker.app import App
from worker.domain.types import PHASES, PhaseReport, RunStatus, Scope
from worker.runs import service
from worker.runs.context import PhaseContext
from worker.store.models import NoteRow


def _notes(app: App, agent: str) -> None:
    add_notes(app, *({"agent_id": agent, "id": f"{agent}-{k}", **fields} for k, fields in (
        ("x", {"content": "Sale ends Friday", "expires_at": days_ago(1)}),
        ("k", {"content": "User lives in Berlin"}),
        ("j", {"content": "User plays chess on Sundays"}),
    )))


def _after_consolidate(then: Callable[[App, str, Any], None]) -> Any:
    """The real registry, with ``then`` (the host) acting once consolidation finished."""
    real = service.phase_registry()

    def wrapped(ctx: PhaseContext, parent_step_id: str) -> PhaseReport:
        report = real["consolidate"](ctx, parent_step_id)
        then(ctx.app, ctx.scope.agent_id, ctx.now)
        return report

    return {**real, "consolidate": wrapped}


def _renew(app: App, agent: str, now: Any) -> None:
    """The host renews the expiring note: a later expiry, straight to the table, no version."""
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == f"{agent}-x")
                            .values(expires_at=now + timedelta(days=30)))
        uow.commit()


def _status(app: App, agent: str) -> str:
    with app.uow() as uow:
        return str(uow.session.scalar(select(NoteRow.status)
                                      .where(NoteRow.id == f"{agent}-x")))


def test_a_note_the_host_renewed_between_phases_is_kept_in_process_as_under_celery(
        app: App) -> None:
    registry = _after_consolidate(_renew)
    _notes(app, "inproc")
    _notes(app, "celery")
    run_id = service.create_run(app, Scope("inproc"), force=True, clock=NOW)
    assert run_id
    assert service.execute_run(app, run_id, registry) == RunStatus.SUCCEEDED.value
    run_id = service.create_run(app, Scope("celery"), force=True, clock=NOW)
    assert run_id
    for phase in PHASES:
        service.execute_phase(app, run_id, phase, registry)
    assert service.finalize_run(app, run_id) == RunStatus.SUCCEEDED.value
    assert _status(app, "celery") == "active"  # read afresh: renewed, kept
    assert _status(app, "inproc") == "active"


def _pin(app: App, agent: str, now: Any) -> None:
    """The host pins the expiring note immutable: the column alone, no version."""
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == f"{agent}-x")
                            .values(protection="immutable"))
        uow.commit()


def test_a_note_the_host_pinned_between_phases_is_preserved_in_process_as_under_celery(
        app: App) -> None:
    registry = _after_consolidate(_pin)
    statuses = {}
    for agent in ("inproc", "celery"):
        _notes(app, agent)
        add_notes(app, {"agent_id": agent, "id": f"{agent}-y", "content": "Coupon valid today",
                        "expires_at": days_ago(2)})
    run_id = service.create_run(app, Scope("celery"), force=True, clock=NOW)
    assert run_id
    for phase in PHASES:
        service.execute_phase(app, run_id, phase, registry)
    statuses["celery"] = service.finalize_run(app, run_id)
    run_id = service.create_run(app, Scope("inproc"), force=True, clock=NOW)
    assert run_id
    statuses["inproc"] = service.execute_run(app, run_id, registry)
    assert _status(app, "celery") == "active"  # the pin seen: preserved
    assert _status(app, "inproc") == "active"  # never archived over the pin (the write's guard)
    with app.uow() as uow:
        archived = {r for r in uow.session.scalars(select(NoteRow.id).where(
            NoteRow.status == "archived"))}
    assert statuses["celery"] == RunStatus.SUCCEEDED.value and "celery-y" in archived
    assert (statuses["inproc"], "inproc-y" in archived) == (RunStatus.SUCCEEDED.value, True)


def test_an_unchanged_expiring_note_is_archived_from_the_carried_scope_without_a_conflict(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The UPDATE's guard holds expires_at and last_accessed_at at the carried values: equal to
    the stored ones (no false mismatch, no start-over) when the host wrote nothing."""
    from worker.store.repositories.writes import WriteRepository

    short: list[tuple[int, int]] = []
    real = WriteRepository.update_notes

    def spy(self: WriteRepository, keys: Any, rows: Any, **kw: Any) -> int:
        done = real(self, keys, rows, **kw)
        if done != len(rows):
            short.append((done, len(rows)))
        return done

    monkeypatch.setattr(WriteRepository, "update_notes", spy)
    _notes(app, "quiet")
    add_notes(app, {"agent_id": "quiet", "id": "quiet-y", "content": "Coupon valid today",
                    "expires_at": days_ago(2.123456), "last_accessed_at": days_ago(3.5)})
    run_id = service.create_run(app, Scope("quiet"), force=True, clock=NOW)
    assert run_id
    assert service.execute_run(app, run_id, service.phase_registry()) == RunStatus.SUCCEEDED.value
    with app.uow() as uow:
        archived = set(uow.session.scalars(select(NoteRow.id).where(
            NoteRow.status == "archived")))
    assert archived == {"quiet-x", "quiet-y"}
    assert short == []
