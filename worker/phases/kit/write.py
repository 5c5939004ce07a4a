"""One guarded write transaction per phase per scope.

``PhaseWrite.apply`` checks every member of every change against the run's carried state (or,
without one, re-reads them in one locked SELECT), skips stale items one by one, asks the
blast-radius guard once, and writes what is left with one executemany per table (each UPDATE
guarded, so what moved since the state was read starts the write over under the lock);
verdict memory, reviews and steps queued on the write go in with it, the steps last and
fenced by the lease epoch (``StaleLease`` when another attempt owns the run: the
whole write rolls back, so a write planned under a lost lease writes nothing). Nothing commits
until the block ends without an exception. On PostgreSQL the scope's lock
(``worker.store.scope_locks``), which an undo and an erasure of the scope take too, comes
before any row the write locks: within its first note UPDATE (the notes it inserts follow
their sources' update), else as a statement of its own before the first statement that
touches a row another transaction may hold.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from worker.domain.types import Note, NoteStatus, Scope, StepStatus
from worker.phases.kit.apart import carried_apart
from worker.phases.kit.carry import ScopeLoad
from worker.phases.kit.changes import Change, ChangeKind, ItemResult, ItemStatus
from worker.phases.kit.evaluate import GuardLimits, State, evaluate
from worker.phases.kit.rows import RowBuilder
from worker.phases.kit.snapshot import APART_KINDS, Memory, RunJournal, journal_of
from worker.review.propose import settle_stale
from worker.runs.context import Held, HeldWrite
from worker.runs.steps import ChildStep, StepRecorder
from worker.safety.guard import GUARD_STEP
from worker.store.scope_locks import lock_scopes
from worker.store.uow import StaleLease, UnitOfWork


class WriteConflict(Exception):
    """A row changed between the state the write checked and its update (a host write, which
    holds no lease)."""


@dataclass(frozen=True)
class WriteTarget:
    """Who writes, where and when; a run's phase, or a host call (``run_id`` None)."""

    app: Any
    scope: Scope
    now: datetime
    run_id: str | None = None
    epoch: int | None = None
    phase: str = ""
    parent_step_id: str | None = None
    steps: StepRecorder | None = None
    dry_run: bool = False
    allow_retire: int | None = None
    notes_before: dict[str, int] | None = None  # the run's counts before its first phase
    held: HeldWrite | None = None  # the engine commits the write, with the phase's finish
    # A host write with no run: the id its operation log, lineage and verdicts carry, which
    # `dream undo` takes as it takes a run id (``fuse-…``); None: a host write not undoable.
    log_id: str | None = None
    # The scope had open review items when the run read its agent: the items naming a note
    # this write changes are recorded stale with it (an auto run after a propose run's).
    settle_items: bool = False

    @property
    def logged_as(self) -> str | None:
        """The run id the write's log, lineage and verdict rows carry."""
        return self.run_id or self.log_id

    @classmethod
    def of(cls, ctx: Any, phase: str, parent_step_id: str | None) -> WriteTarget:
        """The target of a phase's write, from its ``PhaseContext``."""
        return cls(app=ctx.app, scope=ctx.scope, now=ctx.now, run_id=ctx.run_id,
                   epoch=ctx.epoch, phase=phase, parent_step_id=parent_step_id,
                   steps=ctx.steps, dry_run=ctx.dry_run, allow_retire=ctx.allow_retire,
                   notes_before=ctx.notes_before, held=ctx.held,
                   settle_items=ctx.had_open_items)


@contextmanager
def open_write(target: WriteTarget) -> Iterator[PhaseWrite]:
    """``with open_write(target) as w:`` … ``w.apply(changes)``, ``w.step(...)`` …; commits at
    the end of the block, rolls back everything on any exception (a crash commits nothing).

    A run's phase executed by the engine (``target.held``) leaves its steps and the commit to
    the engine, which inserts them with the phase's parent-step finish (``HeldWrite``)."""
    held = target.held  # (an earlier held write ends as this one's unit of work begins)
    with ExitStack() as close:
        uow = close.enter_context(target.app.uow())
        write = PhaseWrite(uow, target)
        yield write
        steps = write.flush(steps=held is None)
        if held is not None:
            held.hold(Held(uow, close.pop_all(), steps, write.flush))
        else:
            uow.commit()
    if target.steps is not None:
        target.steps.committed.extend(steps)


def guard_limits(uow: UnitOfWork, target: WriteTarget, journal: RunJournal | None, *,
                 each: bool = True, totals: dict[str, Any] | None = None) -> GuardLimits:
    """The guard's inputs for a run's phase: what the run retired so far, the scope's active
    notes at its start (``notes_before``, else the run's totals), and the settings."""
    assert target.run_id is not None
    if journal is None:
        journal = journal_of(uow.writes.journal(target.run_id, target.scope.key))
    before = target.notes_before
    if before is None:
        totals = totals if totals is not None else uow.writes.run_totals(target.run_id)
        before = totals.get("notes_before")
    if before and "active" in before:
        baseline = int(before["active"])
    else:  # no snapshot (a phase executed on its own): active now plus what the run retired
        baseline = uow.writes.active_count(target.scope.key) + len(journal.retired)
    s = target.app.settings.guard
    return GuardLimits(frozenset(journal.retired), baseline, s.max_retire_share,
                       s.min_scope_size, target.allow_retire, each)


class PhaseWrite:
    def __init__(self, uow: UnitOfWork, target: WriteTarget) -> None:
        self.uow, self.target = uow, target
        self._totals: dict[str, Any] | None = None
        # A run's write is fenced by its steps insert, last; ``fenced``: by the fence UPDATE
        # already (taken first when the re-read must be current at the write, see ``apply``).
        self.fenced = target.run_id is None or target.epoch is None
        # An apply of this write wrote (its transaction holds more than the scope's lock).
        self.wrote = False
        # The scope's lock is held (SQLite: the transaction's own write lock stands for it).
        self.locked = uow.session.get_bind().dialect.name != "postgresql"
        # A statement reads as of the write lock (SQLite: a writer's read is never older than
        # its lock), so the first guarded UPDATE's keep-apart check is current for the write.
        self._reads_at_lock = self.locked
        self.state: State = {}
        self.tripped: str | None = None
        self._steps: list[dict[str, Any]] = []
        self._judgements: list[dict[str, Any]] = []
        self._reviews: list[dict[str, Any]] = []
        self._apart_seen: int | None = None  # keep-aparts in the known state's memory
        self._carried: list[Any] | None = None  # the known state's verdict-memory rows

    # ---- the changes ---------------------------------------------------------------------
    def apply(self, changes: Sequence[Change], *, vectors: dict[str, np.ndarray] | None = None,
              journal: RunJournal | None = None, guard_each: bool = True,
              also: Sequence[str] = (), known: ScopeLoad | None = None) -> list[ItemResult]:
        """Apply ``changes`` in order; each result says applied, stale, guarded or dry run.

        ``also``: more ids to re-read with the members (``current`` answers for them after).
        ``known``: the run's carried scope (``carry.known``), kept current by every write of
        the run: the changes are checked against it instead of a re-read, and each UPDATE's
        own guard catches what moved since (then the write starts over with the re-read)."""
        t = self.target
        if t.dry_run:
            return [ItemResult(c, ItemStatus.DRY_RUN) for c in changes]
        if not changes and not also:
            return []
        if not self.fenced and self.wrote:
            self.fence()  # an earlier apply wrote: a retry below could not redo its part
        ids = [*(i for c in changes for i in c.ids()), *also]
        state = self._known_state(changes, also, known)
        self._apart_seen = _apart_rows(known)
        self._carried = known.memory.rows if known is not None and known.memory else None
        try:
            return self._apply(changes, ids, vectors, journal, guard_each, state)
        except WriteConflict:
            if self.fenced:
                raise
        # A note changed since the plan's state was read (the host holds no lease; on SQLite
        # the re-read comes before the write lock; nothing of this write is kept): again,
        # with the lock taken first and the members re-read under it.
        self.uow.rollback()
        self.locked = False  # the rollback released it
        self.fence()
        return self._apply(changes, ids, vectors, journal, guard_each, None)

    def _known_state(self, changes: Sequence[Change], also: Sequence[str],
                     known: ScopeLoad | None) -> State | None:
        """The members' state as ``known`` has it, or None: re-read them (a write that is
        fenced already could not start over; a member the load did not have; two notes
        kept, which one UPDATE cannot check)."""
        if known is None:
            return None
        known.current = False  # until keep_current follows this write
        if self.fenced or any(len(c.keep) > 1 for c in changes):
            return None
        return known.notes.state([*(i for c in changes if c.entity == "note"
                                    for i in c.ids()), *also])

    def lock_scope(self) -> None:
        """The scope's lock as a statement of its own, unless held (``worker.store.scope_locks``):
        an undo or an erasure of the scope waits for this write, or this write for it, never
        each for the other's notes."""
        if not self.locked:
            lock_scopes(self.uow.session, [self.target.scope.key])
            self.locked = True

    def _lock_within(self) -> str | None:
        """The scope key for the next statement to take the scope's lock in (None: held)."""
        if self.locked:
            return None
        self.locked = True
        return self.target.scope.key

    def fence(self) -> None:
        """The lease check as a statement of its own (an UPDATE of the run row guarded by the
        epoch): it takes SQLite's write lock and PostgreSQL's run-row lock until the commit,
        after the scope's lock (an erasure takes the scope's, then stops the scope's runs)."""
        t = self.target
        assert t.run_id is not None and t.epoch is not None
        self.lock_scope()
        self._totals = self.uow.writes.fence(t.run_id, t.epoch)
        if self._totals is None:
            raise StaleLease(f"run {t.run_id} lost its lease (epoch {t.epoch})")
        self.fenced = True

    def _apply(self, changes: Sequence[Change], ids: list[str],
               vectors: dict[str, np.ndarray] | None, journal: RunJournal | None,
               guard_each: bool, known: State | None) -> list[ItemResult]:
        t = self.target
        if known is None:
            self.lock_scope()
        self.state = known if known is not None else self.uow.writes.lock_state(ids)
        guard = self._guard_limits(changes, journal, guard_each)
        # From a known state the plan read the keep-aparts with it, and each UPDATE checks
        # none was recorded since (``apart``); after a re-read they are read again here.
        seen = self._apart_seen if known is not None and self._supersedes(changes) else None
        results, self.tripped = evaluate(changes, self._before_images(), guard,
                                         frozenset() if seen is not None
                                         else self._kept_apart(changes))
        rows = RowBuilder(t.scope, t.logged_as, t.now, self.state,
                          getattr(t.app.embedder, "model_name", None), vectors or {})
        for r in results:
            if r.status == ItemStatus.APPLIED:
                rows.add(r.change)
        # From a known state each UPDATE also checks what can change without a version (see
        # ``WriteRepository.update_notes``); after the locked re-read, id and version suffice.
        # The sources first: their update takes the scope's lock (no foreign key needs the
        # notes inserted for them to exist yet).
        apart = tuple(sorted(APART_KINDS)) if seen is not None else ()
        checked = False  # a keep-apart check read after the lock (see add_log_unless_apart)
        for keys, batch in rows.update_batches():
            if apart:
                batch = [{**r, "a_scope": t.scope.key, "a_count": seen} for r in batch]
            if self.uow.writes.update_notes(keys, batch, unversioned=known is not None,
                                            lock_scope=self._lock_within(),
                                            apart=apart) != len(batch):
                raise WriteConflict("a note changed while this write held it; nothing was written")
            checked = checked or (bool(apart) and self._reads_at_lock)
        if rows.notes:
            self.lock_scope()
            self.uow.writes.insert_notes(rows.notes)
        self._archive_examples(results)
        self.uow.writes.add_lineage(rows.lineage)
        if not apart or checked:
            self.uow.writes.add_log(rows.log)
        elif not self.uow.writes.add_log_unless_apart(rows.log, apart, t.scope.key, int(seen or 0)):
            raise WriteConflict("a keep-apart was recorded while this write waited; nothing was "
                                "written")
        for row in carried_apart(self.uow, t.scope, results, self.state, rows.after,
                                 self._carried if known is not None else None):
            self.judgement(row.kind, row.fingerprint, row.note_ids, row.verdict, row.reason)
        self.state = rows.after
        self.wrote = True
        self._settle_items(results)
        return results

    def _settle_items(self, results: list[ItemResult]) -> None:
        """The open review items naming a note this run's write changed, recorded stale in
        the same transaction (``settle_items``), not left open for an approval to find so."""
        t = self.target
        if t.settle_items and t.run_id is not None and (changed := {
                i for r in results if r.status == ItemStatus.APPLIED for i in r.change.ids()}):
            settle_stale(self.uow, t.scope, t.now, f"run {t.run_id}", by="run",
                         naming=sorted(changed))

    def _supersedes(self, changes: Sequence[Change]) -> bool:
        """A run's write that retires a note in favour of another (a host's own fuse or update
        is its decision): what a keep-apart forbids."""
        return self.target.run_id is not None and any(
            c.kind == ChangeKind.SUPERSEDE and c.entity == "note" for c in changes)

    def _kept_apart(self, changes: Sequence[Change]) -> frozenset[frozenset[str]]:
        """The pairs of this write's notes kept apart at their versions now (one read), for a
        run's write that retires a note in favour of another."""
        if not self._supersedes(changes):
            return frozenset()
        rows = self.uow.judgements.of_kinds(self.target.scope, APART_KINDS)
        notes = [Note(id=i, scope=self.target.scope, content="", version=v["version"])
                 for i, v in self.state.items()] if rows else []
        return frozenset(Memory(rows=rows).kept_apart(notes))

    def _before_images(self) -> State:
        return {k: dict(v) for k, v in self.state.items()}

    def _guard_limits(self, changes: Sequence[Change], journal: RunJournal | None,
                      each: bool) -> GuardLimits | None:
        t = self.target
        if t.run_id is None or not any(c.retires and c.entity == "note" for c in changes):
            return None  # a host call is its own decision, not a run's blast radius
        return guard_limits(self.uow, t, journal, each=each, totals=self._totals)

    def _archive_examples(self, results: list[ItemResult]) -> None:
        """Examples (archive's only other entity) through their own guarded update, one call
        per reason; an example changed since the plan is left alone (stale)."""
        from worker.store.repositories.examples import ExampleRepository
        from worker.store.repositories.retention import ArchiveItem

        by_reason: dict[str, list[ItemResult]] = {}
        for r in results:
            if r.status == ItemStatus.APPLIED and r.change.entity != "note":
                by_reason.setdefault(r.change.reason, []).append(r)
        t = self.target
        repo = ExampleRepository(self.uow.session)
        if by_reason:
            self.lock_scope()
        for reason, todo in by_reason.items():
            items = [ArchiveItem(m.id, m.version, r.change.comment,
                                 tuple((r.change.expect.get(m.id) or {}).items()))
                     for r in todo for m in r.change.members]
            done = set(repo.archive(t.scope, items, run_id=t.run_id, reason=reason, now=t.now))
            for r in todo:
                missing = [m.id for m in r.change.members if m.id not in done]
                if missing:
                    r.status, r.stale_ids = ItemStatus.STALE, missing

    # ---- what is recorded with them -------------------------------------------------------
    def step(self, step: ChildStep) -> None:
        t = self.target
        assert t.steps is not None and t.parent_step_id is not None
        self._steps.append(t.steps.child_row(t.parent_step_id, t.phase, step))

    def judgement(self, kind: str, fingerprint: str, note_ids: Sequence[str], verdict: str,
                  reason: str | None, *, ordered: bool = False) -> None:
        """Verdict memory; ``ordered`` keeps ``note_ids`` as given (a held-back retirement)."""
        if self.target.dry_run:
            return
        self._judgements.append({
            "scope_key": self.target.scope.key, "kind": kind, "fingerprint": fingerprint,
            "note_ids": list(note_ids) if ordered else sorted(note_ids), "verdict": verdict,
            "reason": reason, "run_id": self.target.logged_as, "created_at": self.target.now})

    def review(self, kind: str, note_ids: Sequence[str], reason: str | None) -> None:
        self._reviews.append({"scope_key": self.target.scope.key, "kind": kind,
                              "note_ids": sorted(note_ids), "reason": reason,
                              "run_id": self.target.logged_as, "created_at": self.target.now})

    def trip(self, reason: str, note_ids: Sequence[str]) -> None:
        """Why the guard stopped the phase: a skipped child step and an open review (R20, R27)."""
        self.step(ChildStep(name=GUARD_STEP, status=StepStatus.SKIPPED.value,
                            input={"note_ids": list(note_ids)},
                            output={"reason": reason, "guard": True}))
        self.review("blast_radius", note_ids, reason)

    def current(self, note_id: str) -> tuple[int, str] | None:
        """(version, status) as this write leaves it, for ids it re-read."""
        row = self.state.get(note_id)
        return None if row is None else (int(row["version"]), str(row["status"]))

    def active_at(self, note_id: str) -> int | None:
        cur = self.current(note_id)
        return cur[0] if cur is not None and cur[1] == NoteStatus.ACTIVE.value else None

    def flush(self, *, steps: bool = True) -> list[dict[str, Any]]:
        """Write what was queued on the write, the steps last and fenced (or the fence on its
        own when no step was queued); the step rows. StaleLease: nothing is kept.

        ``steps=False``: the steps stay queued (a later ``flush()`` writes them) for the engine
        to insert with the phase's finish, fenced, as the transaction's last statement."""
        # The lock before these rows (a held write's steps, inserted by the engine with the
        # phase's finish, need none: a write that touched no shared row cannot wait in a cycle).
        if steps or self._judgements or self._reviews:
            self.lock_scope()
        self.uow.writes.add_judgements(self._judgements)
        self.uow.writes.add_reviews(self._reviews)
        self._judgements, self._reviews = [], []
        if not steps:
            return list(self._steps)
        rows, t = self._steps, self.target
        self._steps = []
        if self.fenced:
            self.uow.writes.add_steps(rows)
        elif not rows:
            self.fence()
        elif not self.uow.writes.add_steps_fenced(rows, str(t.run_id), int(t.epoch or 0)):
            raise StaleLease(f"run {t.run_id} lost its lease (epoch {t.epoch})")
        return rows


def _apart_rows(known: ScopeLoad | None) -> int | None:
    """How many keep-apart rows (a host's, a declined review's) the carried memory holds: what
    the scope holds now unless one was recorded since the plan read it; None without one."""
    if known is None or known.memory is None:
        return None
    return sum(1 for r in known.memory.rows if r.kind in APART_KINDS)
