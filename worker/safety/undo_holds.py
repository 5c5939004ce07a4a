"""What an undo keeps of the host's decisions. It never retires a note the host has pinned
(``protected``/``immutable``) since the run created it or made it active, nor one a person has
taken over (marked manual) since (R26): nothing lifts either. And a keep-apart that bound the
run's notes before the run binds them again afterwards; and it waits for a later run that changed
them and is not finished."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from worker.domain.types import ACTIVE_RUN_STATUSES, NoteStatus, Protection
from worker.phases.kit.kept_apart import bind_again
from worker.safety.undo_restore import before_image, jsonable
from worker.safety.undo_result import NoteOutcome, outcome_entry
from worker.store.repositories.note_writes import UNVERSIONED_FIELDS
from worker.store.uow import UnitOfWork

PINNED = frozenset((Protection.PROTECTED.value, Protection.IMMUTABLE.value))


def held_since(state: dict[str, Any], by_note: dict[str, list[Any]]) -> dict[str, str]:
    """Why each active note the undo would retire refuses it: pinned since, or manual now and
    not when the run created it or made it active (a person took it over since). ``by_note``:
    the run's log rows of each note it changed."""
    targets = {i: NoteStatus.REVOKED.value if _inserted(rows) else before_image(rows).get("status")
               for i, rows in by_note.items()}
    why = pinned_since(state, targets)
    for note_id, rows in sorted(by_note.items()):
        row = state.get(note_id)
        if (note_id in why or row is None or row.status != NoteStatus.ACTIVE.value
                or row.is_auto_generated or targets[note_id] in (None, NoteStatus.ACTIVE.value)):
            continue
        was_manual = _manual_then(note_id, rows, by_note, state)
        if was_manual is None:
            why[note_id] = ("is manual and the log does not record whether it was when the run "
                            f"made it active; {_TAKE_BACK}")
        elif not was_manual:
            why[note_id] = f"is manual (a person's note since the run); {_TAKE_BACK}"
    return why


_TAKE_BACK = ("undo never retires a person's note: set is_auto_generated back to true first "
              "if it should be retired")


def annotated_since(row: Any, rows: list[Any]) -> str | None:
    """The first field the host wrote without a version (flags, comments, the pointer, a
    renewed expiry) since the run left it, of those the run changed (``rows``: its log rows of
    the note, in order); restoring the run's before-image would silently write over it."""
    for name in sorted(UNVERSIONED_FIELDS | {"expires_at"}):
        left = [r.after[name] for r in rows if r.op != "insert" and name in (r.after or {})]
        if left and jsonable(getattr(row, name)) != left[-1]:
            return name
    return None


def _inserted(rows: list[Any]) -> Any:
    return next((r for r in rows if r.op == "insert"), None)


def _manual_then(note_id: str, rows: list[Any], by_note: dict[str, list[Any]],
                 state: dict[str, Any]) -> bool | None:
    """Whether the note was manual when the run created it or changed its status: the last of
    its log rows that records ``is_auto_generated`` says so. A run logged before inserts
    recorded it made a note manual when a source it merged into it is manual; an older change
    of status cannot tell (None)."""
    logged = [r.after["is_auto_generated"] for r in rows
              if "is_auto_generated" in (r.after or {})]
    if logged:
        return logged[-1] is False
    if not _inserted(rows):
        return None
    return any((r.after or {}).get("consolidated_into_id") == note_id
               and state.get(source) is not None and not state[source].is_auto_generated
               for source, source_rows in by_note.items() for r in source_rows)


def pinned_since(state: dict[str, Any], targets: dict[str, str | None]) -> dict[str, str]:
    """Why each active, pinned note the undo would set to a retired status refuses it.
    ``targets``: the status the undo gives each note (None: the run left it unchanged)."""
    why: dict[str, str] = {}
    for note_id, status in sorted(targets.items()):
        row = state.get(note_id)
        if (row is not None and row.status == NoteStatus.ACTIVE.value
                and status not in (None, NoteStatus.ACTIVE.value) and row.protection in PINNED):
            why[note_id] = (f"is {row.protection} (pinned since the run); undo never retires "
                            "a pinned note: set its protection back to standard first if it "
                            "should be retired")
    return why


def refusal_line(named: str, why: dict[str, str]) -> tuple[str, list[dict[str, Any]]]:
    """The one error line of an undo a pin or a person's note refuses, and its ``refused``
    entries."""
    note_id = next(iter(sorted(why)))
    line = f"cannot undo {named}: note {note_id} {why[note_id]}"
    return line, [outcome_entry("note", i, NoteOutcome.REFUSED, why=w)
                  for i, w in sorted(why.items())]


def held_beyond_cascade(uow: UnitOfWork, by_note: dict[str, list[Any]],
                        last_id: int) -> dict[str, str]:
    """``held_since`` of the run's notes no later write logged a change to (a host's edit logs
    none, an undo no run): a cascade never reaches them, so --force-cascade would be refused over
    them too, and a plain undo refused over changes since names them, not that way out."""
    touched = {r.entity_id for r in uow.safety.log_after(by_note, last_id) if r.run_id}
    rows = {note_id: r for note_id, r in by_note.items() if note_id not in touched}
    return held_since(uow.safety.note_state(rows), rows)


def held_at_end(uow: UnitOfWork, held: dict[str, tuple[str, str]], asked: str,
                named: Callable[[str], str]) -> tuple[str, list[dict[str, Any]]] | None:
    """The refusal of a forced undo whose cascade retired a pinned or manual note on its way
    (``held``: each with the step that retired it and why it holds) that the whole undo leaves
    retired, or None: one an earlier run's undo gives back active loses nothing (before, the
    step refused it, though the note would have ended active as it is). ``asked``: the undo's
    run, named."""
    state = uow.safety.note_state(held)
    left = {i: h for i, h in held.items()
            if i in state and state[i].status != NoteStatus.ACTIVE.value}
    if not left:
        return None
    step = left[min(left)][0]
    return refusal_line(f"{asked} with --force-cascade (which undoes {named(step)} on its way)",
                        {i: why for i, (_, why) in left.items()})


def carry_apart(uow: UnitOfWork, by_note: dict[str, list[Any]], undone_at: dict[str, int],
                now: datetime) -> None:
    """Record again, at the versions the undo left, every keep-apart set (a host's, a declined
    review's) that bound the run's notes at their versions before the run, or that a person
    recorded since, at the versions the undo found (``undone_at``: each active note's)
    (``bind_again``). ``by_note``: the run's log rows of each note it changed."""
    before: dict[str, int] = {}
    for note_id, rows in by_note.items():
        first = min(rows, key=lambda r: r.id)
        if first.op != "insert" and (first.before or {}).get("version") is not None:
            before[note_id] = int(first.before["version"])
    bind_again(uow, before, undone_at, now)


UNDO_REASON = "undo of run "  # an undo's log rows: ``undo_restore.undo_log``


def earlier_undos(changes: list[Any]) -> list[str]:
    """The runs (or erase, fuse, remember ids) whose undo is among ``changes`` (a note's log
    rows after a run's, in order) although they changed nothing of the note after that run:
    an undo of an *earlier* write, a change on top of the run's like any other. The undo of a
    later run only takes that run's change back and is no change; before, every undo row was
    taken for one, so undoing an erasure left out of a cascade (it reached another scope) wrote
    its before-image over the undo that had since given the note its state before the run."""
    later = {r.run_id for r in changes if r.op != "undo"}
    undone = [str(r.reason)[len(UNDO_REASON):] for r in changes
              if r.op == "undo" and str(r.reason or "").startswith(UNDO_REASON)]
    return [u for u in undone if u not in later]


def changed_since(version: int, expected: int, changes: list[Any], foreign: list[Any],
                  named: Callable[[str], str]) -> str | None:
    """Why a note the run left at version ``expected``, now at ``version``, refuses a plain
    undo, or None (``changes``: its log rows after the run's; ``foreign``: those of later
    writes not undone; ``named``: how a run or logged id is named)."""
    at = f"(version {version}, expected {expected})"
    if foreign:
        who = f"run {foreign[-1].run_id}" if foreign[-1].run_id else "the host"
        return f"was changed since by {who} {at}"
    if undos := earlier_undos(changes):
        return f"was changed since by the undo of {named(undos[-1])} {at}"
    bumps = sum(1 for r in changes
                if (r.after or {}).get("version") != (r.before or {}).get("version"))
    return f"was edited since {at}" if version != expected + bumps else None


def way_out(later_runs: list[str], undos: list[str] | None = None,
            refused_alone: set[str] | None = None) -> str:
    """What a plain undo refused over notes changed since offers: the latest run (or erase,
    fuse, remember id) that changed them, to undo first; when an undo of an earlier write
    changed them (``earlier_undos``), or only the host, the forced undo (before, it said "undo
    the later run first" then too, with no run to undo). Nor is an erasure whose own undo is
    refused (``refused_alone``, ``undo_lost.restores_into_nothing``) offered first: the forced
    undo takes it back with the run, or overwrites it (before, it offered `dream undo erase-…`,
    which retired the notes the erasure gave back into the note it had erased)."""
    if later_runs and later_runs[-1] in (refused_alone or set()):
        return (f"pass --force-cascade (undoing {later_runs[-1]} alone is refused: it would "
                "retire notes it gave back into the note it erased)")
    if later_runs:
        return f"undo the later run first (`dream undo {later_runs[-1]}`) or pass --force-cascade"
    if undos:
        return (f"an undo of an earlier write ({undos[-1]}) changed them since: pass "
                "--force-cascade to give the run's notes their state before it anyway, over "
                "that undo")
    return ("no later run changed it, the host did: pass --force-cascade to give the run's notes "
            "their state before it anyway, over the host's change")


def refusals(entity: str, why: dict[str, str]) -> list[dict[str, Any]]:
    """The outcome entries of an undo's refusal: each record that refuses it, and why."""
    return [outcome_entry(entity, i, NoteOutcome.REFUSED, why=w) for i, w in sorted(why.items())]


def unfinished_since(uow: UnitOfWork, later: list[Any],
                     asked: str) -> tuple[str, list[dict[str, Any]]] | None:
    """A later run that changed a conflicting note and is not finished (running, or
    interrupted to resume) can be neither undone first nor overwritten (that would be a
    run's change, not a host's edit, and leave what it built from this run's notes standing):
    the undo waits for it, whether or not it cascades. The error line and its ``refused``
    entries, or None (``later``: the log rows of the notes changed since)."""
    unfinished: dict[str, str] = {}
    first = None
    for r in later:
        run = uow.runs.get(r.run_id) if r.run_id else None
        if run is not None and run.status in ACTIVE_RUN_STATUSES and r.op != "undo":
            first = first or (r.entity_id, run)
            unfinished.setdefault(r.entity_id,
                                  f"was changed since by run {run.id}, which is {run.status}")
    if first is None:
        return None
    note_id, run = first
    return (f"cannot undo run {asked}: run {run.id}, which changed note {note_id} since, is "
            f"{run.status}; wait for it to finish (or stop it with `dream runs cancel "
            f"{run.id}`), then undo again", refusals("note", unfinished))
