"""R8, R11, R17 as a hypothesis state machine over random stores, host writes and phase failures.

Each example gets two fresh scopes in one SQLite database (scopes isolate, so the database is
reused across examples); after every step the invariants of tests.support.safety_store hold.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from sqlalchemy import func, select, update

from tests.conftest import make_sqlite_app
from tests.support.factories import NOW, days_ago
from tests.support.safety_store import check_invariants
from worker.domain.types import Scope
from worker.ingest import import_notes
from worker.runs import service
from worker.safety import crashpoints
from worker.safety.undo import undo_run
from worker.store.models import NoteRow, OperationLogRow

_APP: dict[str, Any] = {}
_COUNTER = itertools.count()

SUBJECTS = ["dark mode", "green tea", "metric units"]
TEMPLATES = ["User prefers {s}", "User prefers {s} in the editor",
             "User prefers {s} in the editor at night", "User no longer prefers {s}",
             "User prefers {s} every day"]
FAILABLE = ["consolidate.after_insert", "consolidate.after_half_revocations",
            "contradictions.after_revoke", "prune.after_archive", "archive.after_archive"]


def _app() -> Any:
    if "app" not in _APP:
        _APP["app"] = make_sqlite_app(Path(tempfile.mkdtemp(prefix="dream-hyp-")))
    return _APP["app"]


class _PlantedFailure(Exception):
    pass


def _fail() -> None:
    raise _PlantedFailure("planted phase failure")


class DreamMachine(RuleBasedStateMachine):
    """Random notes in two scopes, host edits, runs with random phase failures, undo."""

    def __init__(self) -> None:
        super().__init__()
        self.app = _app()
        n = next(_COUNTER)
        self.scopes = [Scope(f"hyp-{n}", "u1"), Scope(f"hyp-{n}", "u2")]
        self.last_run: tuple[str, dict[str, Any]] | None = None  # run id, state before it

    @initialize(notes=st.lists(st.tuples(st.integers(0, 1), st.sampled_from(SUBJECTS),
                                         st.sampled_from(TEMPLATES),
                                         st.sampled_from(["standard", "standard", "protected",
                                                          "immutable"]),
                                         st.integers(1, 60)),
                               min_size=2, max_size=10))
    def seed(self, notes: list[tuple[int, str, str, str, int]]) -> None:
        self.add(notes)

    def add(self, notes: list[tuple[int, str, str, str, int]]) -> None:
        lines = [json.dumps({"agent_id": self.scopes[k].agent_id, "user_id": self.scopes[k].user_id,
                             "content": t.format(s=s), "protection": p,
                             "created_at": days_ago(age)})
                 for k, s, t, p, age in notes]
        import_notes(self.app, lines)

    def state(self) -> dict[str, Any]:
        with self.app.uow() as uow:
            rows = uow.session.scalars(select(NoteRow).where(
                NoteRow.scope_key.in_([s.key for s in self.scopes]))).all()
            return {r.id: (r.status, r.content, r.consolidated_into_id, r.comments, r.importance,
                           r.flags) for r in rows}

    def dream(self, scope: Scope, fail_at: str | None) -> str:
        crashpoints.disarm_all()
        if fail_at:
            crashpoints.arm(fail_at, _fail)
        try:
            run_id = service.create_run(self.app, scope, force=True, clock=NOW)
            assert run_id is not None
            service.execute_run(self.app, run_id)
        finally:
            crashpoints.disarm_all()
        return run_id

    @rule(notes=st.lists(st.tuples(st.integers(0, 1), st.sampled_from(SUBJECTS),
                                   st.sampled_from(TEMPLATES), st.just("standard"),
                                   st.integers(1, 60)), min_size=1, max_size=3))
    def host_adds(self, notes: list[tuple[int, str, str, str, int]]) -> None:
        self.add(notes)
        self.last_run = None

    @rule(data=st.data())
    def host_edits(self, data: st.DataObject) -> None:
        """The host rewrites one active note (content + version bump) between runs."""
        with self.app.uow() as uow:
            ids = sorted(uow.session.scalars(select(NoteRow.id).where(
                NoteRow.scope_key.in_([s.key for s in self.scopes]), NoteRow.status == "active")))
            if not ids:
                return
            # An index drawn alone, not a choice among ids the store holds: what a step draws
            # must not depend on the store (its ids are random, so the same draws can leave
            # another number of active notes), or Hypothesis calls the strategy flaky.
            nid = ids[data.draw(st.integers(0, 9)) % len(ids)]
            uow.session.execute(update(NoteRow).where(NoteRow.id == nid).values(
                content=NoteRow.content + " (edited)", version=NoteRow.version + 1))
            uow.commit()
        self.last_run = None

    @rule(k=st.integers(0, 1), fail_at=st.one_of(st.none(), st.sampled_from(FAILABLE)))
    def run(self, k: int, fail_at: str | None) -> None:
        before = self.state()
        run_id = self.dream(self.scopes[k], fail_at)
        self.last_run = (run_id, before)

    @rule(k=st.integers(0, 1))
    def second_run_changes_nothing(self, k: int) -> None:
        """R8: once a run found nothing left to do, another run on unchanged data changes nothing."""
        for _ in range(2):  # a fused note may itself be mergeable; the store settles quickly
            first = self.dream(self.scopes[k], None)
            if self._changes(first) == 0:
                break
        again = self.dream(self.scopes[k], None)
        assert self._changes(again) == 0
        self.last_run = None

    def _changes(self, run_id: str) -> int:
        with self.app.uow() as uow:
            return int(uow.session.execute(select(func.count()).select_from(OperationLogRow)
                                           .where(OperationLogRow.run_id == run_id)).scalar_one())

    @precondition(lambda self: self.last_run is not None)
    @rule()
    def undo_last(self) -> None:
        """R17: undoing the last run restores every note it found exactly; its new notes retire."""
        assert self.last_run is not None
        run_id, before = self.last_run
        undo_run(self.app, run_id)
        after = self.state()
        assert {k: v for k, v in after.items() if k in before} == before
        assert all(v[0] == "revoked" for k, v in after.items() if k not in before)
        self.last_run = None

    @invariant()
    def invariants_hold(self) -> None:
        """R8/R9/R11 after every step (the checks cover every scope in the database)."""
        check_invariants(self.app)


DreamMachine.TestCase.settings = DreamMachine.TestCase.settings.__class__(
    DreamMachine.TestCase.settings, stateful_step_count=5)
test_r08_r11_r17_invariants_under_random_runs = DreamMachine.TestCase
