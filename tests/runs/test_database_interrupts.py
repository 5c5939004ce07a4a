"""A run its database cuts short, on the real PostgreSQL: a phase's write that waits on a scope
lock a stuck session holds ends at DREAM_DB_LOCK_TIMEOUT_SECONDS (it waited for ever), and a
backend terminated mid-phase (pg_terminate_backend) no longer fails the phase. Either way
`dream run` prints one line saying what happened and what to do, the run is given back as
interrupted with nothing of the phase written, and resuming it ends note for note where a run
never interrupted ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import Result
from sqlalchemy import text
from sqlalchemy.engine import Connection

from tests.cli.test_commands import dream, one_error_line
from tests.conftest import drop_postgres_app, make_postgres_app
from tests.integration.test_crash_recovery import exact_state
from tests.support.safety_store import NOW, RETIRE_ALLOWANCE, SCOPE, mixed_store
from worker.app import App
from worker.domain.types import PHASES, RunStatus, StepStatus
from worker.runs import service
from worker.store import scope_locks
from worker.store.migrate import upgrade

pytestmark = pytest.mark.postgres

RUN = ("run", "--agent", SCOPE.agent_id, "--user", str(SCOPE.user_id), "--force",
       "--allow-retire", str(RETIRE_ALLOWANCE), "--now", NOW.isoformat())


@pytest.fixture
def store(pg_app: App) -> App:
    mixed_store(pg_app)
    return pg_app


@pytest.fixture
def reference() -> Iterator[dict[str, tuple[Any, ...]]]:
    """Where the same run ends on the same store, never interrupted."""
    twin = make_postgres_app()
    try:
        mixed_store(twin)
        done = dream(twin.settings.database_url, *RUN)
        assert done.exit_code == 0, done.output
        yield exact_state(twin)
    finally:
        drop_postgres_app(twin)


def _hold_scope(holder: Connection) -> None:
    """The scope's write lock, held by another session until it ends (a stuck transaction)."""
    holder.execute(text("SELECT pg_advisory_xact_lock(:space, hashtext(:key))"),
                   {"space": scope_locks._SCOPE_LOCKS, "key": SCOPE.key})


def _waiting_backend(probe: Connection, seconds: float = 20.0) -> int:
    """The pid of the backend that waits on a lock (the run's phase write)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pid = probe.execute(text("SELECT pid FROM pg_stat_activity WHERE wait_event_type = "
                                 "'Lock' AND pid <> pg_backend_pid()")).scalar()
        probe.rollback()  # pg_stat_activity is read once per transaction
        if pid is not None:
            return int(pid)
        time.sleep(0.02)
    raise AssertionError("the run's write never waited for the held scope lock")


def _run_in_thread(url: str, **env: str) -> tuple[threading.Thread, list[Result]]:
    ran: list[Result] = []
    thread = threading.Thread(target=lambda: ran.append(dream(url, *RUN, **env)), daemon=True)
    thread.start()
    return thread, ran


def _interrupted(app: App, ran: list[Result], said: str) -> str:
    """The one error line, the run interrupted, its first phase's step interrupted saying
    ``said``, no phase done: the run id."""
    line = one_error_line(ran[0], 5)
    assert said in line and "`dream run --due` resumes it" in line, line
    with app.uow() as uow:
        run = uow.runs.active_for_scope(SCOPE)
        assert run is not None and run.status == RunStatus.INTERRUPTED.value
        parents = {s.phase: s for s in uow.runs.steps(run.id) if s.parent_id is None}
    assert {p: s.status for p, s in parents.items()} == dict.fromkeys(
        PHASES, StepStatus.INTERRUPTED.value)
    assert (parents["consolidate"].error or "").startswith(f"interrupted; {said}")
    assert run.id in line
    return run.id


def _resumed_like(app: App, run_id: str, reference: dict[str, tuple[Any, ...]]) -> None:
    assert service.execute_run(app, run_id) == RunStatus.SUCCEEDED.value
    with app.uow() as uow:
        run = uow.runs.get(run_id)
    assert run is not None and run.attempts == 2
    assert exact_state(app) == reference


def test_a_write_waiting_on_a_held_scope_lock_ends_busy_and_resumes(
        store: App, reference: dict[str, tuple[Any, ...]]) -> None:
    before = exact_state(store)
    with store.engine.connect() as holder:
        _hold_scope(holder)
        began = time.monotonic()
        thread, ran = _run_in_thread(store.settings.database_url,
                                     DREAM_DB_LOCK_TIMEOUT_SECONDS="0.5")
        thread.join(30)  # without a lock timeout it waits for the holder
        took = time.monotonic() - began
        holder.rollback()
    thread.join(30)
    assert ran and took < 15, took
    run_id = _interrupted(store, ran, "the database was busy (a lock wait timed out, "
                                      "SQLSTATE 55P03)")
    assert exact_state(store) == before
    _resumed_like(store, run_id, reference)


def test_a_backend_terminated_mid_phase_interrupts_the_run_which_resumes(
        store: App, reference: dict[str, tuple[Any, ...]]) -> None:
    """The operator (or a failover) ends the run's backend while its consolidate write waits:
    before, the phase was recorded failed and the run went on to end partial."""
    before = exact_state(store)
    with store.engine.connect() as holder, store.engine.connect() as probe:
        _hold_scope(holder)
        thread, ran = _run_in_thread(store.settings.database_url)
        try:
            pid = _waiting_backend(probe)
            assert probe.execute(text("SELECT pg_terminate_backend(:pid, 5000)"),
                                 {"pid": pid}).scalar_one()
            probe.rollback()
            thread.join(30)
        finally:
            holder.rollback()
    thread.join(30)
    assert ran, "the run did not end"
    run_id = _interrupted(store, ran, "the connection to the database was lost")
    assert exact_state(store) == before
    _resumed_like(store, run_id, reference)


def test_each_connection_bounds_its_lock_waits_and_statements() -> None:
    """The settings reach every pooled connection (0: the server's own, none)."""
    app = make_postgres_app(db_lock_timeout_seconds=0.25, db_statement_timeout_seconds=90)
    off = make_postgres_app(db_lock_timeout_seconds=0, db_statement_timeout_seconds=0)
    try:
        for each, said in ((app, ("250ms", "90s")), (off, ("0", "0"))):
            with each.engine.connect() as conn:
                assert (conn.execute(text("SHOW lock_timeout")).scalar_one(),
                        conn.execute(text("SHOW statement_timeout")).scalar_one()) == said
    finally:
        drop_postgres_app(app)
        drop_postgres_app(off)


def test_a_migration_outlasts_the_statement_timeout_a_run_would_meet(pg_app: App) -> None:
    """`dream db upgrade` waits on a table another session holds for longer than
    DREAM_DB_STATEMENT_TIMEOUT_SECONDS and still completes; an ordinary statement is cut off."""
    app = make_postgres_app(db_lock_timeout_seconds=0, db_statement_timeout_seconds=0.3)
    try:
        with pg_app.engine.connect() as holder:
            holder.execute(text(f"LOCK TABLE {_schema(app)}.alembic_version IN ACCESS "
                                "EXCLUSIVE MODE"))
            release = threading.Timer(1.5, holder.rollback)  # whatever happens meanwhile
            release.start()
            began = time.monotonic()
            with app.engine.connect() as conn, pytest.raises(Exception, match="statement timeout"):
                conn.execute(text("SELECT version_num FROM alembic_version")).all()
            before, after = upgrade(app.engine)  # waits from about 0.3 s to 1.5 s
            release.join()
        assert before == after and after is not None
        assert time.monotonic() - began >= 1.4  # it did wait for the lock
    finally:
        drop_postgres_app(app)


def _schema(app: App) -> str:
    return app.settings.database_url.split("search_path%3D")[1].split(",")[0]


@pytest.mark.parametrize(("task_name", "max_attempts"), [("run", 3), ("consolidate", 3),
                                                         ("run", 1)])
def test_a_celery_task_retries_the_run_its_database_interrupted(
        monkeypatch: pytest.MonkeyPatch, task_name: str, max_attempts: int) -> None:
    """The run task (or the chain's first phase task) whose write waits past the lock timeout
    gives the run back and asks to be retried, which resumes it; with no claims left it fails
    with the one line instead (the gate check hands the interrupted run out again)."""
    from celery.exceptions import Retry

    from worker import celery_app, tasks

    app = make_postgres_app(db_lock_timeout_seconds=0.3, max_attempts=max_attempts)
    monkeypatch.setattr(celery_app, "_resources", {"app": app})
    monkeypatch.setattr(tasks, "_schema_current", [app])
    try:
        mixed_store(app)
        run_id = service.create_run(app, SCOPE, force=True, clock=NOW,
                                    allow_retire=RETIRE_ALLOWANCE)
        assert run_id is not None
        task = getattr(tasks, task_name)
        with app.engine.connect() as holder:
            _hold_scope(holder)
            release = threading.Timer(15, holder.rollback)  # without a lock timeout: waits
            release.start()
            try:
                if max_attempts == 1:
                    from worker.runs.interruption import RunInterrupted

                    with pytest.raises(RunInterrupted, match="the database was busy"):
                        task(run_id)
                else:
                    with pytest.raises(Retry):
                        task(run_id)
            finally:
                release.cancel()
            holder.rollback()
        with app.uow() as uow:
            run = uow.runs.get(run_id)
        assert run is not None and (run.status, run.attempts) == (RunStatus.INTERRUPTED.value, 1)
        if task_name == "run" and max_attempts > 1:  # the retry resumes it
            assert task(run_id) == RunStatus.SUCCEEDED.value
    finally:
        drop_postgres_app(app)
