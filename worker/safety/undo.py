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
fields, like a host's content edit, are kept).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from worker.app import App
from worker.clock import utcnow
from worker.domain.types import ACTIVE_RUN_STATUSES, ERASED_USER, NoteStatus, RunStatus, Scope
from worker.errors import RunError, RunNotFound
from worker.store.models import OperationLogRow
from worker.store.repositories.note_writes import TRACKED_FIELDS
from worker.store.uow import UnitOfWork
from worker.text.plural import counted

log = structlog.get_logger(__name__)

_DATETIME_FIELDS = ("valid_to", "last_checked_at")
ERASE_PREFIX = "erase-"  # operation-log id of an erasure's restorations (worker.safety.erase)
FUSE_PREFIX = "fuse-"  # operation-log id of a host fuse (worker.host.fusion)
REMEMBER_PREFIX = "remember-"  # of a host remember that superseded a note (worker.host.remember)
# Writes with no run row that `dream undo` takes by their operation-log id.
LOGGED_WITHOUT_RUN = (ERASE_PREFIX, FUSE_PREFIX, REMEMBER_PREFIX)


class UndoRefused(RunError):
    """A note the run changed has changed since; the message names it and the way out."""


@dataclass
class UndoResult:
    run_ids: list[str]  # the run itself last; cascaded later runs first
    restored: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    overwritten: list[str] = field(default_factory=list)  # host edits replaced (force_cascade)
    missing: list[str] = field(default_factory=list)  # erased since; nothing to restore
    examples: list[str] = field(default_factory=list)  # examples given their status back
    judgements: int = 0  # verdict-memory rows the run(s) recorded, deleted
    reviews: int = 0  # review rows (``reviews``: flagged for a person) they recorded, deleted
    review_items_withdrawn: int = 0  # their open proposals, declined (kept, not deleted)
    review_items_undone: int = 0  # items they applied (an approval's run), now ``undone``

    def as_dict(self) -> dict[str, Any]:
        """What the API and the MCP tool answer (the CLI's ``summary`` says the same)."""
        return {"run_ids": self.run_ids, "restored": self.restored, "retired": self.retired,
                "overwritten": self.overwritten, "missing": self.missing,
                "examples": self.examples, "judgements": self.judgements,
                "reviews": self.reviews, "review_items_withdrawn": self.review_items_withdrawn,
                "review_items_undone": self.review_items_undone}

    def settle(self) -> None:
        """Each note once, as the undo leaves it: a cascade gives a later run's note back its
        before-image, then retires it when the run asked about had created it."""
        self.retired, self.missing, self.examples, self.overwritten = (
            list(dict.fromkeys(ids))
            for ids in (self.retired, self.missing, self.examples, self.overwritten))
        retired = set(self.retired)
        self.restored = [n for n in dict.fromkeys(self.restored) if n not in retired]

    def summary(self) -> str:
        """One line of what was done, each count under its ``as_dict`` field's words; counts
        of nothing left out (a run that only archived reads "restored 3 notes")."""
        examples = len(self.examples)
        parts = [
            (len(self.restored), f"restored {counted(len(self.restored), 'note')}"),
            (len(self.retired), f"retired {counted(len(self.retired), 'note')} the run(s) created"),
            (len(self.overwritten), f"overwrote {counted(len(self.overwritten), 'host edit')}"),
            (len(self.missing), f"{counted(len(self.missing), 'note')} already erased"),
            (examples, f"gave {counted(examples, 'example')} "
                       f"{'its' if examples == 1 else 'their'} status back"),
            (self.judgements, f"removed {counted(self.judgements, 'judgement')} the run(s) recorded"),
            (self.reviews, f"removed {counted(self.reviews, 'review')} the run(s) recorded"),
            (self.review_items_withdrawn,
             f"withdrew {counted(self.review_items_withdrawn, 'open review item')}"),
            (self.review_items_undone,
             f"marked {counted(self.review_items_undone, 'applied review item')} undone"),
        ]
        said = [text for count, text in parts if count]
        return "; ".join(said) if said else "nothing to revert: the run(s) changed nothing"


def undo_run(app: App, run_id: str, force_cascade: bool = False,
             by: str = "unknown") -> UndoResult:
    """Revert every change ``run_id`` made, or raise ``UndoRefused`` and change nothing.
    ``by``: who asked (``cli:<login>``, ``api:<token>``, ``mcp:<scope>``), recorded with the
    time on each undone run's ``status_reason``, before what it said."""
    now = utcnow()
    with app.uow() as uow:
        _hold(uow, run_id)
        result = UndoResult(run_ids=[])
        _undo(uow, run_id, force_cascade, now, result,
              _Undoer(by, run_id, now.isoformat(timespec="seconds")))
        uow.commit()
    result.settle()
    log.info("undo.finished", run_id=run_id, runs=len(result.run_ids),
             restored=len(result.restored), retired=len(result.retired),
             overwritten=len(result.overwritten), judgements=result.judgements,
             reviews=result.reviews, review_items_withdrawn=result.review_items_withdrawn,
             review_items_undone=result.review_items_undone)
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
    if run.user_id == ERASED_USER:
        # Its notes and its operation log went with the user: "undone" would claim a revert
        # that never happened and rewrite the record of what ran.
        raise RunError(f"run {run_id} was a run of a user since erased: what it changed was "
                       "erased with the user, so nothing is left to undo")
    return str(run.status)


@dataclass(frozen=True)
class _Undoer:
    """Who undid, the run they asked to undo, and when: what an undone run's reason says."""

    by: str
    asked: str
    at: str

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
    conflicts = _conflicts(uow, by_note, last_id, set(result.run_ids))
    examples = uow.safety.example_state(by_example)
    edited = {eid: v for eid, (v, _, _) in examples.items()
              if v != max(int((r.after or {}).get("version", 0)) for r in by_example[eid])}
    if edited and not force:
        example_id, version = sorted(edited.items())[0]
        raise UndoRefused(
            f"cannot undo run {run_id}: example {example_id} was changed since (version "
            f"{version}); pass --force-cascade to give it back its status anyway"
        )
    later = uow.safety.log_after(conflicts, last_id) if conflicts else []
    _refuse_unfinished(uow, later, undoer.asked)
    if conflicts and not force:
        note_id, why = next(iter(sorted(conflicts.items())))
        raise UndoRefused(
            f"cannot undo run {run_id}: note {note_id} {why} ({len(conflicts)} note(s) changed "
            "since); undo the later run first or pass --force-cascade"
        )
    if conflicts:
        _cascade(uow, later, now, result, undoer)
        remaining = _conflicts(uow, by_note, last_id, set(result.run_ids))
        result.overwritten.extend(sorted(remaining))
    _restore_notes(uow, run_id, by_note, now, result)
    _restore_examples(uow, run_id, by_example, examples, now, result)
    judged, reviewed = uow.safety.forget_run_records(run_id)
    result.judgements += judged
    result.reviews += reviewed
    result.review_items_withdrawn += uow.review.withdraw_run(run_id, now)
    result.review_items_undone += uow.review.undo_applied(run_id)
    run = uow.runs.get(run_id)
    if run is not None:
        # ``undone_from``: what the run ended as stays countable (/metrics counts the runs that
        # ended blocked; a counter must never go back).
        uow.runs.set_status(run_id, RunStatus.UNDONE.value, status_reason=undoer.reason(run),
                            totals={**(run.totals or {}), "undone_from": run.status})
    result.run_ids.append(run_id)


def _cascade(uow: UnitOfWork, later: list[OperationLogRow], now: datetime,
             result: UndoResult, undoer: _Undoer) -> None:
    """--force-cascade: undo the later finished runs that touched a conflicting note (``later``:
    their log rows), newest first, so this run's before-images are laid back over their
    changes, not under them."""
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


def _refuse_unfinished(uow: UnitOfWork, later: list[OperationLogRow], asked: str) -> None:
    """A later run that changed a conflicting note and is not finished (running, or
    interrupted to resume) can be neither undone first nor overwritten (that would be a
    run's change, not a host's edit, and leave what it built from this run's notes standing):
    the undo waits for it, whether or not it cascades."""
    for r in later:
        run = uow.runs.get(r.run_id) if r.run_id else None
        if run is not None and run.status in ACTIVE_RUN_STATUSES and r.op != "undo":
            raise UndoRefused(
                f"cannot undo run {asked}: run {run.id}, which changed note {r.entity_id} "
                f"since, is {run.status}; wait for it to finish (or stop it with `dream runs "
                f"cancel {run.id}`), then undo again")


def _is_undone(uow: UnitOfWork, run_id: str) -> bool:
    """A run marked undone, or an erase/fuse/remember id (no run row) whose undo is logged."""
    run = uow.runs.get(run_id)
    if run is not None:
        return run.status == RunStatus.UNDONE.value
    return run_id.startswith(LOGGED_WITHOUT_RUN) and uow.safety.undo_logged(run_id)


def _restore_notes(uow: UnitOfWork, run_id: str, by_note: dict[str, list[OperationLogRow]],
                   now: datetime, result: UndoResult) -> None:
    """A note the run inserted is revoked; one it changed gets its before-image back."""
    state = uow.safety.note_state(by_note)
    for note_id, note_rows in sorted(by_note.items()):
        current = state.get(note_id)
        if current is None:
            result.missing.append(note_id)
            continue
        if any(r.op == "insert" for r in note_rows):
            values: dict[str, Any] = {"status": NoteStatus.REVOKED.value,
                                      "comments": f"undone run {run_id}"}
            result.retired.append(note_id)
        else:
            values = _before_image(note_rows)
            result.restored.append(note_id)
        before = {f: _jsonable(getattr(current, f)) for f in values}
        before["version"] = current.version
        if not uow.safety.restore(note_id, current.version, {**values, "updated_at": now}):
            raise _moved(uow, run_id, f"note {note_id}")
        uow.notes.log(run_id=None, scope=Scope.from_key(current.scope_key), entity_id=note_id,
                      op="undo", before=before,
                      after={**{f: _jsonable(v) for f, v in values.items()},
                             "version": current.version + 1},
                      reason=f"undo of run {run_id}", now=now)


def _restore_examples(uow: UnitOfWork, run_id: str,
                      by_example: dict[str, list[OperationLogRow]],
                      examples: dict[str, tuple[int, str, str]], now: datetime,
                      result: UndoResult) -> None:
    for example_id, example_rows in sorted(by_example.items()):
        if example_id not in examples:
            result.missing.append(example_id)  # erased since (dream erase --user)
            continue
        version, status, scope_key = examples[example_id]
        before_status = next((r.before or {}).get("status") for r in example_rows)
        if before_status is None:
            continue
        if not uow.safety.restore_example(example_id, version, before_status):
            raise _moved(uow, run_id, f"example {example_id}")
        uow.notes.log(run_id=None, scope=Scope.from_key(scope_key), entity_id=example_id,
                      op="undo", entity="example",
                      before={"status": status, "version": version},
                      after={"status": before_status, "version": version + 1},
                      reason=f"undo of run {run_id}", now=now)
        result.examples.append(example_id)


def _moved(uow: UnitOfWork, run_id: str, what: str) -> RunError:
    """A guarded restore matched no row: ``what`` changed after this undo read it (a host
    write, or another undo of the same id). Raised, so the whole undo rolls back."""
    named = run_id if run_id.startswith(LOGGED_WITHOUT_RUN) else f"run {run_id}"
    if _is_undone(uow, run_id):
        return RunError(f"{named} is already undone")
    return UndoRefused(f"cannot undo {named}: {what} changed while the undo was being written; "
                       "nothing was undone; run the undo again to see what changed")


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
        if row.version == expected and not foreign:
            continue
        bumps = sum(1 for r in changes
                    if (r.after or {}).get("version") != (r.before or {}).get("version"))
        if foreign:
            who = f"run {foreign[-1].run_id}" if foreign[-1].run_id else "the host"
            out[note_id] = f"was changed since by {who} (version {row.version}, expected {expected})"
        elif row.version != expected + bumps:
            out[note_id] = f"was edited since (version {row.version}, expected {expected})"
    return out


def _before_image(rows: list[OperationLogRow]) -> dict[str, Any]:
    """The earliest before-value of every tracked field the run changed."""
    values: dict[str, Any] = {}
    for r in rows:
        for f, v in (r.before or {}).items():
            if f in TRACKED_FIELDS and f not in values:
                values[f] = datetime.fromisoformat(v) if f in _DATETIME_FIELDS and v else v
    return values


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value
