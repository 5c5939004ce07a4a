"""Crash safety and duplicate execution (R3, R4, R5, R9, R18) with real processes and databases."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import event

from tests.conftest import drop_postgres_app, make_postgres_app, make_sqlite_app
from tests.support.safety_store import NOW, SCOPE, canonical_state, check_invariants, mixed_store
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import RunStatus
from worker.runs import service
from worker.safety.crashpoints import KNOWN

DREAM = str(Path(sys.executable).parent / "dream")


@pytest.fixture
def twin(app: App, tmp_path: Path) -> Iterator[App]:
    """A second, empty database of the same kind: where the crash-free reference run goes."""
    if app.engine.dialect.name == "sqlite":
        other = make_sqlite_app(tmp_path / "reference")
        yield other
        other.dispose()
    else:
        other = make_postgres_app()
        yield other
        drop_postgres_app(other)


def _dream_run(app: App, crash_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
           "DREAM_LLM_PROVIDER": "none", "DREAM_LOG_FORMAT": "json"}
    env.pop("DREAM_CRASH_AT", None)
    if crash_at:
        env["DREAM_CRASH_AT"] = crash_at
    return subprocess.run(
        [DREAM, "run", "--agent", SCOPE.agent_id, "--user", str(SCOPE.user_id), "--force",
         "--now", NOW.isoformat()],
        env=env, capture_output=True, text=True, timeout=120,
    )


def _recover(app: App) -> str:
    """What beat does after the lease expires: interrupted → claimed again → completed."""
    later = utcnow() + timedelta(seconds=app.settings.lease_seconds + 60)
    result = service.gate_check(app, now=later)
    assert len(result.retried) == 1, result
    return service.execute_run(app, result.retried[0])


_REFERENCE: dict[str, object] = {}


def _reference(twin: App) -> object:
    """The crash-free result of the mixed store, computed once per backend."""
    dialect = twin.engine.dialect.name
    if dialect not in _REFERENCE:
        mixed_store(twin)
        done = _dream_run(twin, None)
        assert done.returncode == 0, done.stderr[-2000:]
        check_invariants(twin)
        _REFERENCE[dialect] = canonical_state(twin)
    return _REFERENCE[dialect]


@pytest.mark.parametrize("point", KNOWN)
def test_r03_sigkill_at_each_crash_point_then_rerun_equals_crash_free(
    app: App, twin: App, point: str,
) -> None:
    """R3/R9: a real `dream run` process SIGKILLed at each named crash point leaves a store that
    keeps every invariant (no half-applied cluster), and re-running gives the same final state as
    a run that never crashed."""
    mixed_store(app)
    crashed = _dream_run(app, point)
    assert crashed.returncode == -9, f"crash point {point} was not reached: {crashed.stdout[-500:]}"
    check_invariants(app)
    assert _recover(app) in (RunStatus.SUCCEEDED.value, RunStatus.PARTIAL.value)
    check_invariants(app)
    assert canonical_state(app) == _reference(twin)


def test_r04_same_run_twice_in_a_row_and_concurrently(app: App, twin: App) -> None:
    """R4: executing one run id twice in a row, or from two threads at once, gives the same
    database state as executing it once."""
    mixed_store(app)
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW)
    assert run_id
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def execute() -> None:
        try:
            barrier.wait()
            service.execute_run(app, run_id)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=execute) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    service.execute_run(app, run_id)  # and once more, in a row
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.status == RunStatus.SUCCEEDED.value and run.attempts == 1
        parents = [s for s in uow.runs.steps(run_id) if s.parent_id is None]
    assert sorted(s.phase for s in parents) == sorted(["consolidate", "contradictions", "prune",
                                                      "archive"])
    check_invariants(app)
    assert canonical_state(app) == _reference(twin)


def test_r05_always_crashing_run_ends_failed(app: App) -> None:
    """R5: a run whose worker dies every time is retried, then marked failed after max_attempts
    (the redelivery loop ends), and the scope is free for a new run."""
    mixed_store(app)
    crashed = _dream_run(app, "run.before_finalize")
    assert crashed.returncode == -9
    with app.uow() as uow:
        run = uow.runs.active_for_scope(SCOPE)
        assert run is not None
        run_id = run.id
    env = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
           "DREAM_CRASH_AT": "run.before_finalize"}
    code = "import sys; from worker.app import build_app; from worker.runs.service import " \
           "execute_run; execute_run(build_app(), sys.argv[1])"
    later = utcnow()
    for _attempt in range(app.settings.max_attempts):
        later += timedelta(seconds=app.settings.lease_seconds + 60)
        result = service.gate_check(app, now=later)
        if run_id in result.failed:
            break
        assert result.retried == [run_id]
        proc = subprocess.run([sys.executable, "-c", code, run_id], env=env, timeout=120,
                              capture_output=True, text=True)
        assert proc.returncode == -9
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        assert run.status == RunStatus.FAILED.value, run.status
        assert run.attempts == app.settings.max_attempts
        assert "gave up after" in (run.error or "")
    assert service.create_run(app, SCOPE, force=True) is not None
    check_invariants(app)


def test_r18_no_delete_on_notes_during_a_run(app: App) -> None:
    """R18: a statement hook sees every SQL statement of a full run; none deletes from notes
    (retiring is an UPDATE with a reason; only `dream erase` deletes)."""
    mixed_store(app)
    statements: list[str] = []

    def spy(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        statements.append(statement)

    event.listen(app.engine, "before_cursor_execute", spy)
    try:
        run_id = service.create_run(app, SCOPE, force=True, clock=NOW)
        assert run_id
        service.execute_run(app, run_id)
    finally:
        event.remove(app.engine, "before_cursor_execute", spy)
    assert any("UPDATE notes" in s for s in statements)  # the hook saw the run's writes
    deletes = [s for s in statements if s.lstrip().upper().startswith("DELETE")
               and "NOTES" in s.upper().split("WHERE")[0]]
    assert deletes == []
