"""``RunRepository.interrupt_steps`` and ``stop_steps`` over more run ids than a statement
binds (an erasure interrupting or cancelling every run of a user's scopes), and
``NotesRepository.get_many``'s order: one statement per chunk of ids (worker.store.chunks),
the runs that exist found among them; the notes in id order whatever the ids' order."""

from __future__ import annotations

import pytest

from tests.support.bind_limits import bind_limit
from tests.support.factories import NOW, add_notes
from worker.app import App
from worker.domain.types import PHASES, Scope, StepStatus
from worker.runs import service


def _running_runs(app: App, count: int) -> list[str]:
    """``count`` runs created claimed (each with its four phase steps open), one per scope."""
    runs = []
    for k in range(count):
        snap = service.create_claimed_run(app, Scope(f"agent-{k}"), trigger="cli", force=True)
        assert snap is not None
        runs.append(snap.run_id)
    return runs


def _step_errors(app: App, run_id: str) -> dict[str, tuple[str, str | None]]:
    with app.uow() as uow:
        return {s.phase: (s.status, s.error) for s in uow.runs.steps(run_id)
                if s.parent_id is None}


@pytest.mark.parametrize("stop", [False, True], ids=["interrupt_steps", "stop_steps"])
def test_steps_of_more_runs_than_a_statement_binds_are_ended(app: App, stop: bool) -> None:
    """Two real runs among one id more than the backend binds in a statement (SQLite lowered
    to 999, PostgreSQL 65,535): each run's first open phase step says "interrupted; why", the
    later ones "not started; why" (before: "too many SQL variables", or psycopg refusing the
    parameters, and the erasure that asked failed)."""
    real = _running_runs(app, 2)
    with bind_limit(app) as limit:
        asked = [real[0], *(f"no-run-{k:05d}" for k in range(limit - 1)), real[1]]
        with app.uow() as uow:
            if stop:
                uow.runs.stop_steps(asked, "stopped for good", NOW)
            else:
                uow.runs.interrupt_steps(asked, "stopped for good", NOW)
            uow.commit()
    for run_id in real:
        steps = _step_errors(app, run_id)
        assert set(steps) == set(PHASES)
        assert steps[PHASES[0]] == (StepStatus.INTERRUPTED.value,
                                    "interrupted; stopped for good")
        assert all(steps[p] == (StepStatus.INTERRUPTED.value, "not started; stopped for good")
                   for p in PHASES[1:]), steps


def test_get_many_answers_in_id_order_whatever_the_order_asked(app: App) -> None:
    """The notes come back sorted by id, in one chunk or over several, so two calls with the
    same ids in another order give the same list (before: each chunk in whatever order the
    backend found its rows)."""
    ids = [f"n{k:03d}" for k in range(12)]
    add_notes(app, *({"id": i, "content": f"fact number {i}"} for i in reversed(ids)))
    with app.uow() as uow:
        asked = [ids[k] for k in (7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 6, 4)]
        assert [n.id for n in uow.notes.get_many(asked)] == ids
        assert [n.id for n in uow.notes.get_many(reversed(ids))] == ids


def test_unreleased_batches_of_more_runs_than_a_statement_binds(app: App) -> None:
    """The provider batches left by the runs an erasure stopped, asked for one run id more
    than a statement binds: answered (none here), where one IN of them all failed."""
    real = _running_runs(app, 1)
    with bind_limit(app) as limit:
        asked = [*(f"no-run-{k:05d}" for k in range(limit)), *real]
        with app.uow() as uow:
            assert uow.batches.unreleased(asked) == []


def test_erasing_a_user_of_more_scopes_than_a_statement_binds(sqlite_app: App) -> None:
    """A user with notes in one scope more than SQLite binds in a statement (lowered to 999):
    the erasure removes every note and its scopes' records, a statement per chunk of scopes
    (before: "too many SQL variables" as it deleted the scopes' operation log). SQLite only:
    PostgreSQL would need 65,536 scopes."""
    from worker.safety.erase import erase

    with bind_limit(sqlite_app) as limit:
        add_notes(sqlite_app, *({"id": f"u{k:05d}", "agent_id": f"agent-{k}", "user_id": "ana",
                                 "content": f"Ana's fact number {k}"} for k in range(limit + 1)))
        result = erase(sqlite_app, user_id="ana")
    assert len(result.note_ids) == limit + 1
    with sqlite_app.uow() as uow:
        assert uow.notes.get_many([f"u{k:05d}" for k in range(limit + 1)]) == []
