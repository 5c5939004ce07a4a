"""What an undo may not do to a fact (R8): leave a note it retires in no active note. An
erasure gives back the other sources of a note it erased, their pointer to it cleared; undoing
that erasure retired them again into nothing (the erased note is gone), so a fact from a
conversation nobody erased ended in no active note. The undo is refused instead, forced or not,
naming the notes and the way to undo the run that merged them: that run's undo with
``--force-cascade`` takes the erasure back with it and gives the notes their state before the
run. A note retired again into a successor that lives is undone as before."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.domain.types import NoteStatus, RunStatus
from worker.safety.undo_restore import before_image
from worker.safety.undo_result import NoteOutcome, UndoResult, outcome_entry
from worker.store.uow import UnitOfWork

LIVE = (NoteStatus.ACTIVE.value, NoteStatus.PENDING.value)
HOST_WRITES = ("fuse-", "remember-")  # ids logged without a run that retire notes (undo.py)
SHOWN = 5  # ids a refusal names before it only counts the rest


def lost_facts(uow: UnitOfWork, result: UndoResult) -> list[str]:
    """The notes, live before the undo, that it gave back a retired before-image while no live
    note holds their fact: their pointer, followed through retired notes, ends at a note erased,
    archived or nowhere. A note a run created and the undo retires is not one (its sources are
    given back). Read after the undo's writes, before its commit."""
    retired = [i for i, e in result.outcomes.items()
               if e["entity"] == "note" and e["outcome"] == NoteOutcome.RESTORED.value
               and e.get("status") == NoteStatus.REVOKED.value
               and result.was_before.get(i) in LIVE]
    state = uow.safety.note_state(retired)
    return _dead_ends(uow, {i: state[i].consolidated_into_id for i in retired if i in state}, {})


def would_lose(uow: UnitOfWork, by_note: dict[str, list[Any]]) -> list[str]:
    """``lost_facts`` foreseen before a plain undo writes (``by_note``: the run's log rows of
    each note): a live note it would give a retired before-image, its pointer as the image
    leaves it, each note of the run counted at the status the undo gives it. Checked before
    the notes changed since, so the refusal never offers --force-cascade, which would end
    refused the same way."""
    state = uow.safety.note_state(by_note)
    after: dict[str, str | None] = {}
    pointer: dict[str, str | None] = {}
    for note_id, rows in by_note.items():
        row = state.get(note_id)
        if row is None:
            continue
        if any(r.op == "insert" for r in rows):  # retired: its sources are given back
            after[note_id] = NoteStatus.REVOKED.value
            continue
        image = before_image(rows)
        after[note_id] = image.get("status", row.status)
        if row.status in LIVE and after[note_id] == NoteStatus.REVOKED.value:
            pointer[note_id] = image.get("consolidated_into_id", row.consolidated_into_id)
    return _dead_ends(uow, pointer, after)


def _dead_ends(uow: UnitOfWork, pointer: dict[str, str | None],
               status: dict[str, str | None]) -> list[str]:
    """The notes of ``pointer`` (each one's successor) whose successor, followed through
    retired notes, is no live note; ``status``: a note's status as the undo leaves it when it
    is not its current one."""
    start, state, seen = sorted(pointer), {}, set(pointer)
    onward = dict(pointer)
    while pending := {p for p in onward.values() if p is not None and p not in seen}:
        seen |= pending
        state.update(uow.safety.note_state(pending))
        onward.update({i: _onward(state.get(i), status.get(i)) for i in pending})
    lives = {i for i, row in state.items() if status.get(i, row.status) in LIVE}
    return [i for i in start if not _lives(onward[i], lives, onward)]


def _onward(row: Any, status: str | None) -> str | None:
    """Where a successor's fact went on: its own successor when it is retired into one."""
    if row is None or (status or row.status) != NoteStatus.REVOKED.value:
        return None
    return row.consolidated_into_id  # type: ignore[no-any-return]


def _lives(note_id: str | None, lives: set[str], onward: dict[str, str | None]) -> bool:
    seen: set[str] = set()
    while note_id is not None and note_id not in seen:
        if note_id in lives:
            return True
        seen.add(note_id)
        note_id = onward.get(note_id)
    return False


def lost_refusal(uow: UnitOfWork, named: str, lost: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """The one error line of an undo that would leave ``lost`` in no active note, and its
    ``refused`` entries: the ids (counted when many) and the way out, the forced undo of the run
    (or host fuse) that retired the first of them before (its cascade takes ``named`` back with it, or
    overwrites its change when ``named`` reached another scope: the notes get their state
    before that run)."""
    shown = ", ".join(lost[:SHOWN]) + (f" and {len(lost) - SHOWN} more" if len(lost) > SHOWN
                                       else "")
    what = f"note {shown}" if len(lost) == 1 else f"{len(lost)} notes ({shown})"
    why = ("would be retired into no active note (the note it was merged into is erased or "
           "retired), leaving a fact nobody erased in none")
    merged = next((r for i in lost if (r := _merging_run(uow, i))), None)
    way = (f"to undo the write that merged them, run `dream undo {merged} --force-cascade` "
           "instead (it gives the notes their state before that run)" if merged else
           "the notes stay as they are: no undo may retire them into nothing")
    return (f"cannot undo {named}: {what} {why}; nothing was undone; {way}",
            [outcome_entry("note", i, NoteOutcome.REFUSED, why=why) for i in lost])


def _merging_run(uow: UnitOfWork, note_id: str) -> str | None:
    """The run (or host fuse, remember id), not undone, that retired ``note_id`` last, before
    the write being undone gave it back: the one whose forced undo takes that write back."""
    for row in reversed(uow.safety.log_after([note_id], 0)):
        if not row.run_id or row.entity != "note" or row.op == "undo" \
                or (row.after or {}).get("status") != NoteStatus.REVOKED.value:
            continue
        run = uow.runs.get(row.run_id)
        if run is not None and run.status != RunStatus.UNDONE.value:
            return str(run.id)
        if run is None and row.run_id.startswith(HOST_WRITES) \
                and not uow.safety.undo_logged(row.run_id):
            return str(row.run_id)
    return None


def restores_into_nothing(uow: UnitOfWork, runs: Iterable[str]) -> set[str]:
    """The ``erase-…`` ids among ``runs`` that gave a note back active: undone alone, they would
    retire it into the note they erased (its pointer was cleared), which ``lost_facts`` refuses,
    so a refusal never offers to undo one first."""
    return {r for r in runs if r.startswith("erase-") and any(
        row.entity == "note" and row.op != "undo"
        and (row.before or {}).get("status") != NoteStatus.ACTIVE.value
        and (row.after or {}).get("status") == NoteStatus.ACTIVE.value
        for row in uow.safety.run_log(r))}
