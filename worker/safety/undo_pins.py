"""An undo never retires a note the host has pinned (``protected``/``immutable``) since: the
run created it or made it active, and the pin says the host now keeps it. Nothing lifts it."""

from __future__ import annotations

from typing import Any

from worker.domain.types import NoteStatus, Protection
from worker.safety.undo_result import NoteOutcome, outcome_entry

PINNED = frozenset((Protection.PROTECTED.value, Protection.IMMUTABLE.value))


def pinned_since(state: dict[str, Any], targets: dict[str, str | None]) -> dict[str, str]:
    """Why each active, pinned note the undo would set to a retired status refuses it.
    ``targets``: the status the undo gives each note (None: the run left it unchanged)."""
    why: dict[str, str] = {}
    for note_id, status in sorted(targets.items()):
        row = state.get(note_id)
        if (row is not None and row.status == NoteStatus.ACTIVE.value
                and status not in (None, NoteStatus.ACTIVE.value) and row.protection in PINNED):
            why[note_id] = (f"is {row.protection} (pinned since the run); undo never retires "
                            "a pinned note")
    return why


def refusal_line(named: str, why: dict[str, str]) -> tuple[str, list[dict[str, Any]]]:
    """The one error line of an undo a pin refuses, and its ``refused`` entries."""
    note_id = next(iter(why))
    line = (f"cannot undo {named}: note {note_id} {why[note_id]}; set its protection back to "
            "standard first if it should be retired")
    return line, [outcome_entry("note", i, NoteOutcome.REFUSED, why=w) for i, w in why.items()]
