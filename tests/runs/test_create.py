"""Creating runs in bulk on SQLite and PostgreSQL: each scope gets the row ``create_run`` writes,
a scope the one-active-run index holds (R1) gets None without stopping the others, and the
inserts go in chunks inside one transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from tests.support.factories import NOW
from tests.support.sql import recorded_commits, recorded_statements
from worker.app import App
from worker.domain.types import RunStatus, Scope
from worker.runs import service
from worker.store.models import DreamRunRow
from worker.store.repositories.runs import CREATE_CHUNK

SCOPES = [Scope("bulk-a"), Scope("bulk-a", "u1"), Scope("bulk-a", "u1", "c1"), Scope("bulk-b"),
          Scope("bulk-b", None, "c2"), Scope("bulk-c", "u2"), Scope("bulk-d")]
# What differs between two runs by construction: identity, scope and creation time.
_OWN = {"id", "scope_key", "agent_id", "user_id", "company_id", "created_at", "enqueued_at"}


def _row(app: App, run_id: str) -> dict[str, Any]:
    with app.uow() as uow:
        row = uow.session.execute(select(DreamRunRow.__table__).where(
            DreamRunRow.id == run_id)).mappings().one()
        return dict(row)


def _active(app: App, scope: Scope) -> list[str]:
    with app.uow() as uow:
        return [r.id for r in uow.runs.list(scope)
                if r.status in (RunStatus.QUEUED.value, RunStatus.RUNNING.value,
                                RunStatus.INTERRUPTED.value)]


def test_create_runs_writes_the_row_create_run_writes_for_each_scope(app: App) -> None:
    """N scopes (users and companies among them) give N queued runs, one id each, in the order
    given; every row holds what ``create_run`` with the same arguments writes for one scope
    (status, trigger, force, phases, clock, allowance, counters), under its own scope."""
    options: dict[str, Any] = {"trigger": "beat", "force": True, "clock": NOW,
                               "allow_retire": 3, "phases": ["prune", "archive"]}
    runs = service.create_runs(app, SCOPES, **options)
    assert list(runs) == SCOPES
    ids = list(runs.values())
    assert all(ids) and len(set(ids)) == len(SCOPES)
    single = service.create_run(app, Scope("bulk-single"), **options)
    assert single is not None
    expected = {k: v for k, v in _row(app, single).items() if k not in _OWN}
    assert expected["status"] == RunStatus.QUEUED.value and expected["phases"] == [
        "prune", "archive"]
    for scope, run_id in runs.items():
        assert run_id is not None
        row = _row(app, run_id)
        assert {k: v for k, v in row.items() if k not in _OWN} == expected
        assert (row["scope_key"], row["agent_id"], row["user_id"], row["company_id"]) == (
            scope.key, scope.agent_id, scope.user_id, scope.company_id)
        assert row["created_at"] == row["enqueued_at"]
        assert _active(app, scope) == [run_id]


def test_a_scope_holding_an_active_run_gets_none_and_the_others_are_created(app: App) -> None:
    """R1 in bulk: scopes with a queued, a running and an interrupted run get None and keep
    that run; a scope whose run was cancelled is free again (the index is partial) and, like a
    scope with no run, gets a new one. No exception, no scope left out."""
    queued, running, interrupted, cancelled, fresh = (Scope(f"r1-{n}") for n in range(5))
    held = {}
    for scope in (queued, running, interrupted, cancelled):
        run_id = service.create_run(app, scope, force=True)
        assert run_id is not None
        held[scope] = run_id
    assert service.claim_run(app, held[running]) == 1
    with app.uow() as uow:
        uow.runs.set_status(held[interrupted], RunStatus.INTERRUPTED.value)
        uow.commit()
    service.cancel_run(app, held[cancelled])

    runs = service.create_runs(app, [queued, running, interrupted, cancelled, fresh],
                               trigger="beat")
    assert [runs[s] for s in (queued, running, interrupted)] == [None, None, None]
    for scope in (queued, running, interrupted):
        assert _active(app, scope) == [held[scope]]
    for scope in (cancelled, fresh):
        new = runs[scope]
        assert new is not None and new != held.get(scope)
        assert _active(app, scope) == [new]


def test_a_scope_given_twice_gets_one_run(app: App) -> None:
    """Duplicate scopes in the input: one run for the scope, its id under the scope."""
    a, b = Scope("dup-a"), Scope("dup-b", "u1")
    runs = service.create_runs(app, [a, b, a, Scope("dup-a")], trigger="beat")
    assert list(runs) == [a, b] and all(runs.values())
    assert _active(app, a) == [runs[a]] and _active(app, b) == [runs[b]]
    with app.uow() as uow:
        assert len(uow.runs.list(a)) == 1


def test_many_scopes_are_inserted_in_chunks_in_one_transaction(app: App) -> None:
    """Two and a half chunks of scopes: one INSERT per chunk and one writing commit; a scope in
    the middle chunk already holding a run gets None, and the rest of its chunk is inserted."""
    scopes = [Scope(f"chunk-{i:05d}") for i in range(2 * CREATE_CHUNK + CREATE_CHUNK // 2)]
    busy = scopes[CREATE_CHUNK + 7]
    held = service.create_run(app, busy)
    with recorded_statements(app) as seen, recorded_commits(app) as commits:
        runs = service.create_runs(app, scopes, trigger="beat")
    inserts = [s for s in seen if s.startswith("INSERT INTO dream_runs")]
    assert len(inserts) == 3 and all("ON CONFLICT DO NOTHING" in s for s in inserts)
    assert commits == [True]
    assert runs[busy] is None and _active(app, busy) == [held]
    assert sum(run_id is not None for run_id in runs.values()) == len(scopes) - 1
    with app.uow() as uow:
        stored = uow.session.scalars(select(DreamRunRow.scope_key).where(
            DreamRunRow.status == RunStatus.QUEUED.value)).all()
    assert sorted(stored) == sorted(s.key for s in scopes)
