"""What an undo did, note by note: the answer of `dream undo`, the API and MCP, and the record
`dream runs show` and the API's run detail read back from the operation log afterwards."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from worker.text.plural import counted

# Set on the ``after`` image of an undo's log row for a note whose host edit (to a field the run
# changed) the undo overwrote (``--force-cascade``): what the record tells apart afterwards.
OVERWROTE = "overwrote_host_edit"


class NoteOutcome(StrEnum):
    """What an undo did to one note or example the run changed."""

    RESTORED = "restored"  # given its before-image back (a retired note: active again)
    RETIRED = "retired"  # the run created it: revoked again (kept, never deleted)
    MISSING = "missing"  # erased since: nothing left to restore
    REFUSED = "refused"  # changed since: the undo refused, naming why (nothing was written)


def outcome_entry(entity: str, entity_id: str, outcome: NoteOutcome, *, was: Any = None,
                  status: Any = None, overwrote: bool = False,
                  why: str | None = None) -> dict[str, Any]:
    """One note's (or example's) entry of an undo: ids and statuses only, never text; ``was``
    and ``status``: its status before and after the undo."""
    entry: dict[str, Any] = {"id": entity_id, "entity": entity, "outcome": outcome.value}
    if status is not None:
        entry.update(was=was, status=status)
    if overwrote:
        entry[OVERWROTE] = True
    if why is not None:
        entry["why"] = why
    return entry


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
    # Open items (of other runs) naming a note the undo moved: recorded stale, never to apply.
    review_items_stale: int = 0
    # Items the asked run proposed that stay applied by their own approval runs (not undone
    # with it): [{"id", "run_id"}], each approval run undone on its own.
    review_items_applied: list[dict[str, Any]] = field(default_factory=list)
    # Each note and example as the undo leaves it (a cascade's later outcome replaces an
    # earlier one: a note the asked run created ends retired), in the order first touched.
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Each note's status before the undo's first write to it (``outcomes`` keeps the last).
    was_before: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """What the API and the MCP tool answer (the CLI's ``summary`` says the same; its
        ``--json`` prints this): the lists and counts, and ``notes``, one entry per note or
        example (``outcome_entry``)."""
        return {"run_ids": self.run_ids, "restored": self.restored, "retired": self.retired,
                "overwritten": self.overwritten, "missing": self.missing,
                "examples": self.examples, "judgements": self.judgements,
                "reviews": self.reviews, "review_items_withdrawn": self.review_items_withdrawn,
                "review_items_undone": self.review_items_undone,
                "review_items_stale": self.review_items_stale,
                "review_items_applied": self.review_items_applied,
                "notes": list(self.outcomes.values())}

    def note(self, entry: dict[str, Any]) -> None:
        self.was_before.setdefault(entry["id"], entry.get("was"))
        self.outcomes[entry["id"]] = entry

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
            (self.review_items_stale,
             f"made {counted(self.review_items_stale, 'open review item')} stale (a note it "
             "names moved)"),
        ]
        said = [text for count, text in parts if count]
        line = "; ".join(said) if said else "nothing to revert: the run(s) changed nothing"
        if applied := self.review_items_applied:
            runs = " ".join(f"`dream undo {a['run_id']}`" for a in applied[:5])
            line += (f"; {counted(len(applied), 'review item')} it proposed stay"
                     f"{'s' if len(applied) == 1 else ''} applied by "
                     f"{'its own approval run' if len(applied) == 1 else 'their approval runs'}"
                     f" (not undone with it): {runs}" + (" …" if len(applied) > 5 else ""))
        return line


def undo_record(uow: Any, run: Any) -> dict[str, Any] | None:
    """What the undo of ``run`` (an undone run's row) did, note by note, read back from the
    operation log: its own undo rows (``undo of run <id>``) on the notes and examples the run
    logged, with the counts under the undo answer's names. A note the run created reads
    ``retired``; one erased since is gone from the log and from this record. None for a run
    that is not undone (a refused undo wrote nothing, so it left no record either)."""
    if run.status != "undone":
        return None
    logged = uow.safety.run_log(run.id)
    created = {r.entity_id for r in logged if r.op == "insert"}
    entries = []
    for row in uow.safety.undo_rows(run.id, {r.entity_id for r in logged}):
        before, after = row.before or {}, row.after or {}
        outcome = NoteOutcome.RETIRED if row.entity_id in created else NoteOutcome.RESTORED
        entries.append(outcome_entry(row.entity, row.entity_id, outcome,
                                     was=before.get("status"), status=after.get("status"),
                                     overwrote=bool(after.get(OVERWROTE))))
    notes = [e for e in entries if e["entity"] == "note"]
    counts = {"restored": sum(e["outcome"] == NoteOutcome.RESTORED.value for e in notes),
              "retired": sum(e["outcome"] == NoteOutcome.RETIRED.value for e in notes),
              "overwritten": sum(bool(e.get(OVERWROTE)) for e in notes),
              "examples": len(entries) - len(notes)}
    return {"counts": counts, "notes": entries}
