"""Undo a run from its operation log, in one transaction (R17).

Every change a run made is in ``operation_log`` with the before/after image of the tracked
fields. Undo restores the before-images of the notes and examples the run updated, retires
(status ``revoked``, comment "undone run X") the notes it inserted — nothing is deleted, so
erasure can still follow lineage afterwards — and deletes the judgement (verdict memory) and
review rows the run recorded, so no decision of an undone run outlives it; its open review
items are withdrawn (declined) and an item it applied reads ``undone``, not approved — items
are kept, not deleted, and the result counts each of the three apart. The restorations an
erasure made, a host fuse and a host remember that superseded a note are logged under an
``erase-…``, ``fuse-…`` or ``remember-…`` id and undone the same way (there is no run row).

A note is *changed since* when its version moved past the run's after-image by anything other
than a later run that was itself undone (and that undo): a later run's change, or a host edit
(which bumps the version without a log row, or logs with no run id). Then undo refuses, naming
the note. ``force_cascade`` first undoes, newest first, every later run that touched such a
note, then restores anyway; host edits to the fields the run changed are overwritten (other
fields, like a host's content edit, are kept). A host's fuse or remember that built on such a
note is never undone by a cascade: the undo is refused, naming it. Nor, forced or not, one that
would retire a note into no active note (``worker.safety.undo_lost``, R8), nor one pinned or
taken over since that it leaves retired (a cascade may retire one on its way that it gives back).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from worker.app import App
from worker.clock import utcnow
from worker.domain.limits import stored_ident_problem
from worker.domain.types import ACTIVE_RUN_STATUSES, ERASED_USER, NoteStatus, RunStatus, Scope
from worker.errors import InvalidRun, RunError, RunNotFound
from worker.review.propose import settle_stale
from worker.safety.undo_holds import (
    annotated_since,
    carry_apart,
    changed_since,
    earlier_undos,
    held_at_end,
    held_beyond_cascade,
    held_since,
    refusal_line,
    refusals,
    unfinished_since,
    way_out,
)
from worker.safety.undo_lost import (
    lost_facts,
    lost_refusal,
    restores_into_nothing,
    would_lose,
)
from worker.safety.undo_restore import before_image, jsonable, restore_examples, undo_log
from worker.safety.undo_result import OVERWROTE, NoteOutcome, UndoResult, outcome_entry
from worker.store.models import OperationLogRow
from worker.store.scope_locks import lock_scopes
from worker.store.uow import UnitOfWork

__all__ = ["UndoRefused", "UndoResult", "logged_scopes", "undo_run"]

log = structlog.get_logger(__name__)

ERASE_PREFIX = "erase-"  # operation-log id of an erasure's restorations (worker.safety.erase)
FUSE_PREFIX = "fuse-"  # operation-log id of a host fuse (worker.host.fusion)
REMEMBER_PREFIX = "remember-"  # of a host remember that superseded a note (worker.host.remember)
# Writes with no run row that `dream undo` takes by their operation-log id.
LOGGED_WITHOUT_RUN = (ERASE_PREFIX, FUSE_PREFIX, REMEMBER_PREFIX)


class UndoRefused(RunError):
    """A note the run changed has changed since; the message names it and the way out, ``refused``
    lists every note (and example) that refuses it and why (``--json``, the API's 409 carry it)."""

    def __init__(self, message: str, refused: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.refused = refused or []

    def details(self) -> dict[str, Any]:
        return {"refused": self.refused}


def undo_run(app: App, run_id: str, force_cascade: bool = False,
             by: str = "unknown") -> UndoResult:
    """Revert every change ``run_id`` made, or raise ``UndoRefused`` and change nothing.
    ``by``: who asked (``cli:<login>``, ``api:<token>``, ``mcp:<scope>``), recorded with the
    time on each undone run's ``status_reason``, before what it said."""
    if problem := stored_ident_problem(run_id):  # a surrogate was the driver's traceback
        raise InvalidRun(f"run id {problem}")
    now = utcnow()
    with app.uow() as uow:
        # The scopes' locks first, as a phase's write takes them: the undo and a dream's write
        # on the same scope wait for each other whole, never each for notes the other holds.
        scopes = _scopes_of(uow, run_id)
        lock_scopes(uow.session, scopes)
        uow.session.expire_all()  # what was read before the lock is read again
        _hold(uow, run_id)
        result = UndoResult(run_ids=[])
        undoer = _Undoer(by, run_id, now.isoformat(timespec="seconds"))
        _undo(uow, run_id, force_cascade, now, result, undoer)
        if held := held_at_end(uow, undoer.held, _named(run_id), _named):
            raise UndoRefused(*held)  # a pinned or manual note a cascade's step left retired
        if lost := lost_facts(uow, result):  # R8: forced or not, never a fact in no note
            raise UndoRefused(*lost_refusal(uow, _named(run_id), lost))
        touched = list(result.outcomes)  # the notes and examples the undo wrote
        result.review_items_applied = [{"id": i, "run_id": r}
                                       for i, r in uow.review.applied_of(run_id)]
        for key in sorted(scopes):  # another run's open items over a note given back: stale
            result.review_items_stale += len(settle_stale(
                uow, Scope.from_key(key), now, f"the undo of {_named(run_id)}", by="undo",
                naming=touched))
        uow.commit()
    result.settle()
    log.info("undo.finished", run_id=run_id, runs=len(result.run_ids),
             restored=len(result.restored), retired=len(result.retired),
             overwritten=len(result.overwritten), judgements=result.judgements,
             reviews=result.reviews, review_items_withdrawn=result.review_items_withdrawn,
             review_items_undone=result.review_items_undone,
             review_items_stale=result.review_items_stale)
    return result


def logged_scopes(app: App, log_id: str) -> set[str]:
    """The scopes a write logged without a run (an ``erase-…`` or ``fuse-…`` id) touched; empty
    for any other id (a caller limited to one scope may undo it only when that is all)."""
    # These ids are a prefix and a UUID: anything else (a NUL, a lone surrogate) names none.
    if not log_id.startswith(LOGGED_WITHOUT_RUN) or len(log_id) > 64 or not log_id.isascii() \
            or "\x00" in log_id:
        return set()
    with app.uow() as uow:
        return {row.scope_key for row in uow.safety.run_log(log_id)}


def _scopes_of(uow: UnitOfWork, run_id: str) -> set[str]:
    """The scope of ``run_id``'s run, or every scope its log names (an ``erase-…`` id may name
    several; a cascade only reaches later runs of these scopes)."""
    run = uow.runs.get(run_id)
    if run is not None:
        return {run.scope_key}
    return {row.scope_key for row in uow.safety.run_log(run_id)}


def _hold(uow: UnitOfWork, run_id: str) -> None:
    """Check that ``run_id`` may be undone and lock its run row for this transaction, so a
    second undo of it at the same moment is refused as already undone instead of writing its
    undo over the first's (an id logged without a run has no row: its restores' version
    guards refuse the second instead, ``_moved``)."""
    for _ in range(2):
        status = _check_undoable(uow, run_id)
        if status is None or uow.safety.hold_run(run_id, status):
            return
        uow.session.expire_all()  # moved since we read it: the next check says what it is now
    raise RunError(f"run {run_id} changed while it was being undone; run the undo again")


def _check_undoable(uow: UnitOfWork, run_id: str) -> str | None:
    """Raise why ``run_id`` cannot be undone; else the run's status (None: no run row)."""
    run = uow.runs.get(run_id)
    if run is None and run_id.startswith(LOGGED_WITHOUT_RUN) and uow.safety.run_log(run_id):
        if uow.safety.undo_logged(run_id):
            raise RunError(f"{run_id} is already undone")
        return None
    if run is None:
        raise RunNotFound(run_id)
    if run.status in ACTIVE_RUN_STATUSES:
        # An interrupted run still owns its scope and resumes its remaining phases: undoing
        # half of it under a resuming executor would leave neither state.
        raise RunError(f"run {run_id} is {run.status}; wait for it to finish (or stop it with "
                       f"`dream runs cancel {run_id}`) before undoing it")
    if run.status == RunStatus.UNDONE.value:
        raise RunError(f"run {run_id} is already undone")
    if run.dry_run:  # it stays as it ran (before, it was marked undone, "nothing to revert")
        raise RunError(f"run {run_id} was a dry run: it changed nothing; nothing to undo")
    if run.user_id == ERASED_USER:
        # Its notes and its operation log went with the user: "undone" would claim a revert
        # that never happened and rewrite the record of what ran.
        raise RunError(f"run {run_id} was a run of a user since erased: what it changed was "
                       "erased with the user, so nothing is left to undo")
    return str(run.status)


@dataclass(frozen=True)
class _Undoer:
    """Who undid, the run they asked to undo, and when: what an undone run's reason says; and
    each pinned or manual note a cascade's step retired → (the step, why): ``held_at_end``."""

    by: str
    asked: str
    at: str
    held: dict[str, tuple[str, str]] = field(default_factory=dict)

    def reason(self, run: Any) -> str:
        said = f"undone by {self.by} at {self.at}"
        if run.id != self.asked:
            said += f" (a later run, with the undo of {self.asked})"
        return f"{said}; was {run.status}" + (f": {run.status_reason}" if run.status_reason
                                              else "")


def _undo(uow: UnitOfWork, run_id: str, force: bool, now: datetime, result: UndoResult,
          undoer: _Undoer) -> None:
    rows = uow.safety.run_log(run_id)
    by_note: dict[str, list[OperationLogRow]] = defaultdict(list)
    by_example: dict[str, list[OperationLogRow]] = defaultdict(list)
    for row in rows:
        if row.entity == "note":
            by_note[row.entity_id].append(row)
        elif row.entity == "example":
            by_example[row.entity_id].append(row)
    last_id = max((r.id for r in rows), default=0)
    if not force and (lost := would_lose(uow, by_note)):  # R8: --force-cascade would not help
        raise UndoRefused(*lost_refusal(uow, _named(run_id), lost))
    conflicts = _conflicts(uow, by_note, last_id, set(result.run_ids))
    examples = uow.safety.example_state(by_example)
    edited = {eid: v for eid, (v, _, _) in examples.items()
              if v != max(int((r.after or {}).get("version", 0)) for r in by_example[eid])}
    if edited and not force:
        example_id, version = sorted(edited.items())[0]
        raise UndoRefused(
            f"cannot undo run {run_id}: example {example_id} was changed since (version "
            f"{version}); pass --force-cascade to give it back its status anyway",
            refusals("example", {e: f"was changed since (version {v})"
                                  for e, v in edited.items()}) + refusals("note", conflicts))
    later = uow.safety.log_after(conflicts, last_id) if conflicts else []
    if waits := unfinished_since(uow, later, undoer.asked):
        raise UndoRefused(*waits)
    _refuse_host_writes(uow, undoer.asked, later)  # with or without --force-cascade
    if conflicts and not force:
        if held := held_beyond_cascade(uow, by_note, last_id):  # --force-cascade is no way out
            raise UndoRefused(*refusal_line(_named(run_id), held))
        note_id, why = next(iter(sorted(conflicts.items())))
        runs = [r.run_id for r in later if r.run_id and r.op != "undo"
                and not _is_undone(uow, r.run_id)]
        raise UndoRefused(f"cannot undo run {run_id}: note {note_id} {why} ({len(conflicts)} "
                          f"note(s) changed since); "
                          f"{way_out(runs, earlier_undos(later), restores_into_nothing(uow, runs))}",
                          refusals("note", conflicts))
    remaining: dict[str, str] = {}
    if conflicts:
        _cascade(uow, later, now, result, undoer)
        remaining = _conflicts(uow, by_note, last_id, set(result.run_ids))
        result.overwritten.extend(sorted(remaining))
    was = _restore_notes(uow, run_id, by_note, now, result, set(remaining), undoer)
    carry_apart(uow, by_note, was, now)
    if moved := restore_examples(uow, run_id, by_example, examples, now, result):
        raise _moved(uow, run_id, "example", moved)
    judged, reviewed = uow.safety.forget_run_records(run_id)
    result.judgements += judged
    result.reviews += reviewed
    result.review_items_withdrawn += uow.review.withdraw_run(run_id, now)
    result.review_items_undone += uow.review.undo_applied(run_id)
    run = uow.runs.get(run_id)
    if run is not None:
        uow.runs.mark_undone(run, undoer.reason(run))
    result.run_ids.append(run_id)


def _cascade(uow: UnitOfWork, later: list[OperationLogRow], now: datetime,
             result: UndoResult, undoer: _Undoer) -> None:
    """--force-cascade: undo the later finished runs that touched a conflicting note (``later``:
    their log rows), newest first, so this run's before-images are laid over their changes."""
    scopes = {r.scope_key for r in later}
    newest_first: list[str] = []
    for r in sorted(later, key=lambda r: r.id, reverse=True):
        if r.run_id and r.run_id not in newest_first and r.op != "undo":
            newest_first.append(r.run_id)
    for later_run in newest_first:
        run = uow.runs.get(later_run)
        if later_run in result.run_ids or _is_undone(uow, later_run):
            continue
        # An erase of a user may have restored notes in several scopes: undoing it from here
        # would reach another tenant's notes, so only one confined to these scopes cascades.
        if run is not None or (later_run.startswith(LOGGED_WITHOUT_RUN)
                               and {r.scope_key for r in uow.safety.run_log(later_run)} <= scopes):
            _undo(uow, later_run, True, now, result, undoer)


def _refuse_host_writes(uow: UnitOfWork, run_id: str, later: list[OperationLogRow]) -> None:
    """A host's fuse or remember that built on a note of the run since is the host's fact: a
    cascade never undoes it (that revoked the host's newer note, unsaid). Refused, naming it:
    the host's write stays unless its own undo is asked for first."""
    host: dict[str, str] = {}  # the host write → the first note of the run it superseded
    for r in later:
        if r.run_id and r.run_id.startswith((FUSE_PREFIX, REMEMBER_PREFIX)) and r.op != "undo" \
                and not _is_undone(uow, r.run_id):
            host.setdefault(r.run_id, r.entity_id)
    if host:
        write, note_id = sorted(host.items())[0]
        what = "fuse" if write.startswith(FUSE_PREFIX) else "remember"
        raise UndoRefused(
            f"cannot undo run {run_id}: note {note_id} was superseded since by the host's "
            f"{what} {write}, which a cascade never undoes; to give back both, undo it first "
            f"(`dream undo {write}`), then this run", refusals("note", {
                n: f"was superseded since by the host's write {w}"
                for w, n in host.items()}))


def _is_undone(uow: UnitOfWork, run_id: str) -> bool:
    """A run marked undone, or an erase/fuse/remember id (no run row) whose undo is logged."""
    run = uow.runs.get(run_id)
    if run is not None:
        return run.status == RunStatus.UNDONE.value
    return run_id.startswith(LOGGED_WITHOUT_RUN) and uow.safety.undo_logged(run_id)


def _restore_notes(uow: UnitOfWork, run_id: str, by_note: dict[str, list[OperationLogRow]],
                   now: datetime, result: UndoResult, overwritten: set[str],
                   undoer: _Undoer) -> dict[str, int]:
    """A note the run inserted is revoked; one it changed gets its before-image back; each
    outcome on the undo's log row and in ``result`` (``overwritten``: notes whose host edit it
    replaces, marked so). A pinned or manual note it retires refuses it, or in a cascade's step
    is left to ``undoer.held``. One guarded write per set of columns and one log insert for the
    whole run. Returns each active note's version before the undo."""
    state = uow.safety.note_state(by_note)
    if (held := held_since(state, by_note)) and run_id == undoer.asked:  # nothing after it
        raise UndoRefused(*refusal_line(_named(run_id), held))
    undoer.held.update((note_id, (run_id, why)) for note_id, why in held.items())
    writes: list[tuple[str, int, dict[str, Any]]] = []
    log: list[dict[str, Any]] = []
    for note_id, note_rows in sorted(by_note.items()):
        current = state.get(note_id)
        if current is None:
            result.missing.append(note_id)
            result.note(outcome_entry("note", note_id, NoteOutcome.MISSING,
                                      why="erased since; nothing to restore"))
            continue
        if any(r.op == "insert" for r in note_rows):
            values: dict[str, Any] = {"status": NoteStatus.REVOKED.value,
                                      "comments": f"undone run {run_id}"}
            outcome, listed = NoteOutcome.RETIRED, result.retired
        else:
            values = before_image(note_rows)
            outcome, listed = NoteOutcome.RESTORED, result.restored
        listed.append(note_id)
        version, was = current.version, current.status
        before = {f: jsonable(getattr(current, f)) for f in values}
        before["version"] = version
        writes.append((note_id, version, {**values, "updated_at": now}))
        mark = {OVERWROTE: True} if note_id in overwritten else {}
        log.append(undo_log(run_id, current.scope_key, "note", note_id, before,
                             {**{f: jsonable(v) for f, v in values.items()},
                              "version": version + 1, **mark}, now))
        result.note(outcome_entry("note", note_id, outcome, was=was,
                                  status=values.get("status", was),
                                  overwrote=bool(mark)))
    if moved := uow.safety.restore_notes(writes, {i: bool(r.is_auto_generated)
                                                  for i, r in state.items() if i not in held}):
        raise _moved(uow, run_id, "note", moved[0])
    uow.writes.add_log(log)
    return {i: r.version for i, r in state.items() if r.status == NoteStatus.ACTIVE.value}


def _moved(uow: UnitOfWork, run_id: str, entity: str, entity_id: str) -> RunError:
    """A guarded restore matched no row: the note or example changed after this undo read it
    (a host write, or another undo of the same id). Raised, so the whole undo rolls back."""
    named = _named(run_id)
    if _is_undone(uow, run_id):
        return RunError(f"{named} is already undone")
    return UndoRefused(f"cannot undo {named}: {entity} {entity_id} changed while the undo was "
                       "being written; nothing was undone; run the undo again to see what "
                       "changed", refusals(entity, {entity_id: "changed while the undo was "
                                                                "being written"}))


def _named(run_id: str) -> str:
    return run_id if run_id.startswith(LOGGED_WITHOUT_RUN) else f"run {run_id}"


def _conflicts(uow: UnitOfWork, by_note: dict[str, list[OperationLogRow]],
               last_id: int, undone_now: set[str]) -> dict[str, str]:
    """Notes changed since the run, with why; an undone later run (and its undo) is no change."""
    state = uow.safety.note_state(by_note)
    later: dict[str, list[OperationLogRow]] = defaultdict(list)
    for r in uow.safety.log_after(by_note, last_id):
        later[r.entity_id].append(r)
    undone = undone_now | {
        rid for rid in {r.run_id for rows in later.values() for r in rows if r.run_id}
        if _is_undone(uow, rid)
    }
    out: dict[str, str] = {}
    for note_id, rows in by_note.items():
        row = state.get(note_id)
        if row is None:
            continue  # erased since; nothing to restore or to conflict with
        expected = max(int((r.after or {}).get("version", 0)) for r in rows)
        changes = later.get(note_id, [])
        foreign = [r for r in changes if r.op != "undo" and r.run_id not in undone]
        # A later run's annotation (flags, comments) keeps the version but is still a change
        # that restoring this run's before-image would silently overwrite.
        if row.version == expected and not foreign and not earlier_undos(changes):
            if field := annotated_since(row, rows):
                out[note_id] = f"was edited since (its {field}, by the host)"
            continue
        if why := changed_since(row.version, expected, changes, foreign, _named):
            out[note_id] = why
    return out
