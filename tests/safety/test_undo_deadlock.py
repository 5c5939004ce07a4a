"""An undo racing a dream's guarded write on the same scope, on the real PostgreSQL: two threads,
two engines (two connections), many rounds. Both always finish without a deadlock error, and the
end state is consistent: the undo either restored every note of its run or was refused, naming
the notes (R17, R10, R4)."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from tests.support.factories import add_notes, days_ago
from tests.support.safety import run_row
from worker.app import App, build_app
from worker.clock import utcnow
from worker.config import Settings
from worker.domain.types import Scope
from worker.phases.kit import Change, Member, NewNote, WriteTarget, open_write
from worker.phases.kit import ChangeKind as Kind
from worker.runs import service
from worker.safety.undo import UndoRefused, undo_run
from worker.store.models import NoteRow

pytestmark = pytest.mark.postgres

ROUNDS = 40
MERGED = 3  # notes run A merged into a new one (run B leaves them alone)
# What run A annotated (left active, version kept) for run B to retire, by B's phase: the archive
# phase archives expired notes, then (a group of its own) notes unused past retention, so it
# updates the expired ones (ids "m-x…") before the idle ones ("m-a…"), against the ids' order;
# consolidation merges pairs of identical notes, cluster by cluster.
PAIRS = ("User owns a red bicycle", "User speaks fluent Portuguese", "User is allergic to peanuts")


def _annotated(phase: str) -> list[dict[str, Any]]:
    if phase == "consolidate":
        return [{"id": f"m-{uuid.uuid4().hex[:8]}", "content": PAIRS[k // 2]}
                for k in range(2 * len(PAIRS))]
    return [*({"id": f"m-x{uuid.uuid4().hex[:8]}", "content": f"Reminder {k} for the trip",
               "expires_at": days_ago(1)} for k in range(3)),
            *({"id": f"m-a{uuid.uuid4().hex[:8]}", "content": f"Old remark {k} on the weather",
               "created_at": days_ago(200), "access_count": 1,
               "last_accessed_at": days_ago(200)}  # read once, long ago: idle
              for k in range(3))]


@pytest.fixture
def twin(pg_app: App) -> Iterator[App]:
    """A second App (its own engine and connections) on the same PostgreSQL schema."""
    other = build_app(Settings(database_url=pg_app.settings.database_url, llm_provider="none"))
    yield other
    other.dispose()


def _run_a(app: App, scope: Scope, phase: str) -> tuple[str, list[str], list[str], str]:
    """A finished run A, written through the phase kit: it annotated ``noted`` (what run B's
    ``phase`` retires) and merged ``merged`` into a new note ``fused``."""
    annotated = _annotated(phase)
    noted = [n["id"] for n in annotated]
    merged = [f"s-{uuid.uuid4().hex[:8]}" for _ in range(MERGED)]
    add_notes(app, *({**n, "agent_id": scope.agent_id} for n in annotated),
              *({"id": i, "agent_id": scope.agent_id, "content": f"User likes tea, way {k}"}
                for k, i in enumerate(merged)))
    run_id = run_row(app, scope)
    fused = f"f-{uuid.uuid4().hex[:8]}"
    changes = [Change(kind=Kind.ANNOTATE, name=i, members=(Member(i, 1),), comment="checked",
                      append_comment=True, reason="annotated") for i in noted]
    changes.append(Change(kind=Kind.SUPERSEDE, name="merge", members=tuple(Member(i, 1)
                                                                          for i in merged),
                          new_note=NewNote(fused, "User likes tea", "Preference"),
                          relation="consolidated", reason="merged", comment="merged"))
    with open_write(WriteTarget(app=app, scope=scope, now=utcnow(), log_id=run_id)) as w:
        assert all(r.applied for r in w.apply(changes))
    return run_id, noted, merged, fused


@contextmanager
def _interleaved(undo_app: App, dream_app: App) -> Iterator[None]:
    """Make the two writes overlap: the undo pauses a moment before each note it restores,
    and run B's write waits to start until the undo has restored a random 1 to 3 notes (or
    for a short while, when the undo writes none): B then updates its clusters' notes while
    the undo holds some and wants others, the case where two lock orders make a cycle."""
    undo_writing = threading.Event()
    restored = [0]
    wanted = random.randint(1, 3)

    def undo_side(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().startswith("UPDATE notes"):
            restored[0] += 1
            if restored[0] > wanted:
                undo_writing.set()
            time.sleep(random.uniform(0.001, 0.005))

    def dream_side(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        # The write's first statement inserts the merged notes (the phase's earlier
        # ``UPDATE notes SET embedding`` is a transaction of its own, before it plans).
        if statement.lstrip().startswith("INSERT INTO notes"):
            undo_writing.wait(0.2)

    event.listen(undo_app.engine, "before_cursor_execute", undo_side)
    event.listen(dream_app.engine, "before_cursor_execute", dream_side)
    try:
        yield
    finally:
        event.remove(undo_app.engine, "before_cursor_execute", undo_side)
        event.remove(dream_app.engine, "before_cursor_execute", dream_side)


def _race(pg_app: App, twin: App, scope: Scope, phase: str, undo_of: str) -> dict[str, Any]:
    """Run B (``phase``, in-process, on ``twin``) and the undo of run A (on ``pg_app``) at
    once; what each ended with."""
    b = service.create_run(twin, scope, force=True, phases=[phase])
    assert b is not None
    out: dict[str, Any] = {"b": b}
    start = threading.Barrier(2)

    def dream() -> None:
        start.wait()
        time.sleep(random.uniform(0, 0.01))
        out["b_status"] = service.execute_run(twin, b)

    def undo() -> None:
        start.wait()
        time.sleep(random.uniform(0, 0.01))
        try:
            out["undo"] = undo_run(pg_app, undo_of, by="test")
        except UndoRefused as refused:
            out["refused"] = refused

    threads = [threading.Thread(target=dream), threading.Thread(target=undo)]
    with _interleaved(pg_app, twin):
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads), "a side is still waiting on a lock"
    return out


def _states(app: App, ids: list[str]) -> dict[str, tuple[str, str | None]]:
    with app.uow() as uow:
        rows = uow.session.query(NoteRow).filter(NoteRow.id.in_(ids)).all()
        return {r.id: (r.status, r.comments) for r in rows}


def _check(pg_app: App, out: dict[str, Any], run_a: tuple[str, list[str], list[str], str],
           retired: str) -> str:
    """Both ended cleanly and the store tells one story; which side won."""
    run_id, noted, merged, fused = run_a
    assert out["b_status"] == "succeeded", out
    with pg_app.uow() as uow:
        steps = uow.runs.steps(out["b"])
        a_status = uow.runs.get(run_id).status  # type: ignore[union-attr]
    assert not [s.error for s in steps if s.error], "run B's phase failed"
    state = _states(pg_app, [*noted, *merged, fused])
    if "undo" in out:  # the undo won: every note of run A is back as before it
        result = out["undo"]
        assert a_status == "undone"
        assert sorted(result.restored) == sorted([*noted, *merged])
        assert result.retired == [fused] and not result.missing
        assert all(state[i] == ("active", None) for i in merged)
        assert state[fused][0] == "revoked"
        # Run B planned on the annotated versions: stale after the undo, so the notes are
        # as the undo left them, or retired by a plan B made after the undo committed.
        assert all(state[i] == ("active", None) or state[i][0] == retired for i in noted)
        return "undo"
    refused = out["refused"]
    assert a_status == "succeeded"  # nothing undone, nothing written by the undo
    assert refused.refused and {e["id"] for e in refused.refused} <= set(noted)
    assert all(e["outcome"] == "refused" and e["why"] for e in refused.refused)
    assert all(state[i][0] == "revoked" for i in merged) and state[fused][0] == "active"
    assert all(state[i][0] == retired for i in noted)  # run B retired them
    return "refused"


@pytest.mark.parametrize(("phase", "retired"), [("archive", "archived"),
                                               ("consolidate", "revoked")])
def test_an_undo_and_a_dreams_write_on_one_scope_never_deadlock(
        pg_app: App, twin: App, phase: str, retired: str) -> None:
    """ROUNDS rounds, each a fresh scope: run A annotated six notes and merged three others;
    run B's ``phase`` retires the six while run A is undone (the archive phase updates its
    expired notes before its idle ones, so its lock order is not the ids'). PostgreSQL aborts
    one side of a lock cycle with "deadlock detected": that must never happen (both finish,
    run B `succeeded` with no failed step), and either the undo restored every note of run A
    (B's stale plan wrote nothing over it) or it was refused, naming the notes B changed,
    with nothing of it written."""
    won = []
    for k in range(ROUNDS):
        scope = Scope(f"agent-{k}")
        run_a = _run_a(pg_app, scope, phase)
        won.append(_check(pg_app, _race(pg_app, twin, scope, phase, run_a[0]), run_a, retired))
    assert len(won) == ROUNDS
