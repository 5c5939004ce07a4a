"""The run statements that count the scope's notes themselves (the claimed run's insert, a
queued run's claim, the final update), on SQLite and PostgreSQL: the counts they store are the scope's real counts
(``count_by_status``), before and after, in the order readers saw them, and never another
scope's."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import PHASES, PhaseReport, RunStatus, Scope, StepStatus
from worker.runs import engine, service
from worker.runs.context import PhaseContext, Registry
from worker.store.models import NoteRow

SCOPE = Scope("agent-1")
OTHER = Scope("agent-2")


def _counts(app: App, scope: Scope) -> dict[str, int]:
    with app.uow() as uow:
        return uow.notes.count_by_status(scope)


def _set_status(app: App, scope: Scope, status: str, how_many: int) -> None:
    """``how_many`` of the scope's active notes moved to ``status`` (what a phase would do)."""
    with app.uow() as uow:
        ids = [n.id for n in uow.notes.load_scope(scope).notes][:how_many]
        uow.session.execute(update(NoteRow).where(NoteRow.id.in_(ids)).values(status=status))
        uow.commit()


def _totals(app: App, run_id: str) -> dict[str, Any]:
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        return dict(run.totals or {})


def test_the_run_totals_count_the_scope_before_and_after_as_count_by_status(app: App) -> None:
    """notes_before (the insert's own count, also the snapshot's, which the guard reads) and
    notes_after (the final update's own count) are the scope's counts at those moments, by
    status; another scope's notes are not in them; the totals keep the order they had."""
    add_notes(app, *({"content": f"note {k}"} for k in range(6)))
    add_notes(app, *({"content": f"other {k}", "agent_id": "agent-2"} for k in range(4)))
    _set_status(app, SCOPE, "archived", 2)
    before = _counts(app, SCOPE)
    assert before == {"active": 4, "archived": 2}
    snap = service.create_claimed_run(app, SCOPE, force=True)
    assert snap is not None
    assert snap.notes_before == before
    assert _totals(app, snap.run_id) == {"notes_before": before}

    def revoking(ctx: PhaseContext, step_id: str) -> PhaseReport:
        _set_status(app, SCOPE, "revoked", 1)
        return PhaseReport(phase="consolidate", status=StepStatus.SUCCEEDED.value)

    registry: Registry = {
        **{p: (lambda name: lambda ctx, step_id: PhaseReport(
            phase=name, status=StepStatus.NO_ITEMS.value))(p) for p in PHASES},
        "consolidate": revoking}
    assert engine.execute_run(app, snap, registry) == RunStatus.SUCCEEDED.value
    after = _counts(app, SCOPE)
    assert after == {"active": 3, "archived": 2, "revoked": 1}
    totals = _totals(app, snap.run_id)
    assert (totals["notes_before"], totals["notes_after"]) == (before, after)
    if app.engine.dialect.name == "sqlite":  # (PostgreSQL's JSONB never kept an order)
        assert list(totals)[:4] == ["notes_before", "notes_after", "tokens_in", "tokens_out"]
    assert totals["phases"] == {**dict.fromkeys(PHASES, StepStatus.NO_ITEMS.value),
                                "consolidate": StepStatus.SUCCEEDED.value}
    assert _counts(app, OTHER) == {"active": 4}


def test_a_scope_without_notes_counts_as_an_empty_object(app: App) -> None:
    """No note at all: {} before and after (what ``count_by_status`` returns), not null."""
    snap = service.create_claimed_run(app, SCOPE, force=True)
    assert snap is not None and snap.notes_before == {}
    quiet: Registry = {p: (lambda name: lambda ctx, step_id: PhaseReport(
        phase=name, status=StepStatus.NO_ITEMS.value))(p) for p in PHASES}
    assert engine.execute_run(app, snap, quiet) == RunStatus.SUCCEEDED.value
    totals = _totals(app, snap.run_id)
    assert (totals["notes_before"], totals["notes_after"]) == ({}, {})


def test_a_queued_runs_claim_counts_the_scope_it_claims(app: App) -> None:
    """A run created queued is counted by its claim (the claim's RETURNING): its first phase
    step records the counts (the guard's baseline) and its totals end with them as
    notes_before; another scope's notes are not in them."""
    add_notes(app, *({"content": f"note {k}"} for k in range(5)))
    add_notes(app, *({"content": f"other {k}", "agent_id": "agent-2"} for k in range(3)))
    _set_status(app, SCOPE, "archived", 1)
    before = _counts(app, SCOPE)
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    quiet: Registry = {p: (lambda name: lambda ctx, step_id: PhaseReport(
        phase=name, status=StepStatus.NO_ITEMS.value))(p) for p in PHASES}
    assert engine.execute_run(app, run_id, quiet) == RunStatus.SUCCEEDED.value
    with app.uow() as uow:
        first = uow.runs.steps(run_id)[0]
    assert (first.phase, (first.input or {}).get("notes_before")) == (PHASES[0], before)
    assert before == {"active": 4, "archived": 1}
    totals = _totals(app, run_id)
    assert (totals["notes_before"], totals["notes_after"]) == (before, before)
