"""Prune follows lineage: a note archived for a gone conversation (its own, or one a note it
was fused from came from) gives back what it stood for that came from elsewhere: the notes fused,
subsumed or merged as duplicates into it whose own conversations are alive — what erasure does
for the co-sources of an erased note (README "Prune and archive").

Read and written only when such a note is archived and something was retired into it (the scope
load says which, ``ScopeSnapshot.absorbed``): a scope where nothing is gone pays nothing, nor
does one whose gone conversations' notes stood for nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from worker.domain.types import NoteStatus
from worker.phases.kit.kept_apart import bind_again
from worker.phases.kit.rows import Edits, restored_fields
from worker.phases.kit.write import PhaseWrite, WriteConflict
from worker.store.repositories.retention import LineageParent, append_comment

# The note's text was written from the parent's: a parent behind a gone conversation's note
# may carry it too, so the walk looks behind it.
DERIVED = frozenset({"consolidated", "fused", "updated"})
# A parent retired only because the archived note stood for it (erasure's RESTORE_RELATIONS);
# a ``superseded`` one was outdated by it and stays retired.
RESTORED = DERIVED | {"duplicate", "subsumed"}
RESTORED_COMMENT = ("[Prune: the note this was merged into was archived (a conversation it "
                    "drew on is gone); active again]")
REASON = "prune: the note it was merged into drew on a gone conversation"

ReadParents = Callable[[list[str]], Sequence[LineageParent]]


class Behind(NamedTuple):
    """What lies behind the notes prune will archive: every lineage edge read, by child, and
    the conversations of the notes on them (whether each is gone is asked before the write)."""

    parents: dict[str, list[LineageParent]]
    conversations: set[str]


def read_behind(archived: Iterable[str], read: ReadParents) -> Behind:
    """Every note ``plan_restorations`` may look at behind ``archived``, one ``read`` per
    generation, before the write: a note retired into another as its duplicate or subsumed is
    not in that note's lineage, so its conversations are known only from here."""
    parents: dict[str, list[LineageParent]] = {}
    found: set[str] = set()
    seen = set(archived)
    frontier = sorted(seen)
    while frontier:
        behind: set[str] = set()
        for child in frontier:
            parents.setdefault(child, [])
        for p in read(frontier):
            parents[p.child_id].append(p)
            if p.id in seen:
                continue
            seen.add(p.id)
            found.update(c for c in (p.source_conversation_id, *p.lineage_conversation_ids) if c)
            if p.relation in DERIVED and p.lineage_conversation_ids:
                behind.add(p.id)
        frontier = sorted(behind)
    return Behind(parents, found)


def _cached(parents: dict[str, list[LineageParent]], read: ReadParents) -> ReadParents:
    """``read`` answered from ``parents`` where it holds the child (in ``read``'s order)."""
    def answer(children: list[str]) -> Sequence[LineageParent]:
        missing = [c for c in children if c not in parents]
        held = [p for c in children if c in parents for p in parents[c]]
        return sorted([*held, *(read(missing) if missing else ())], key=lambda p: p.id)
    return answer


def plan_restorations(archived: Iterable[str], dead: set[str],
                      read: ReadParents) -> dict[str, str]:
    """The notes to make active again: retired into an archived note (or into a note retired
    into one, and so on), and free of every gone conversation (``dead``) themselves. A parent
    that carries one is left retired; if it was written from others, they are looked at
    in its place. One ``read`` per generation of the lineage, never one per note. Each id with
    the note it was retired into."""
    restore: dict[str, str] = {}
    seen = set(archived)
    frontier = sorted(seen)
    while frontier:
        behind: set[str] = set()
        for p in read(frontier):
            if p.id in seen or p.status != NoteStatus.REVOKED.value \
                    or p.consolidated_into_id != p.child_id:
                continue  # revived, archived or retired into something else since: as it is
            seen.add(p.id)
            if p.source_conversation_id not in dead and dead.isdisjoint(
                    p.lineage_conversation_ids):
                if p.relation in RESTORED:
                    restore[p.id] = p.child_id
            elif p.relation in DERIVED and p.lineage_conversation_ids:
                behind.add(p.id)  # a fusion itself: its own sources may be clean
        frontier = sorted(behind)
    return dict(sorted(restore.items()))


def restore_sources(w: PhaseWrite, archived: Sequence[str], dead: set[str],
                    parents: dict[str, list[LineageParent]] | None = None) -> list[str]:
    """In prune's write, after ``archived`` (notes archived for a ``dead`` conversation, their
    own or a source's) were archived: the clean notes retired into them made active again,
    pointer cleared, logged under the run (its undo retires them again); the ids restored.
    ``parents``: the lineage ``read_behind`` read before the write (re-checked under the lock
    here), else it is read now."""
    if not archived or w.target.dry_run:
        return []
    def read(children: list[str]) -> Sequence[LineageParent]:
        return w.uow.retention.lineage_parents(children, tuple(sorted(RESTORED)))
    planned = plan_restorations(archived, dead, read if parents is None
                                else _cached(parents, read))
    if not planned:
        return []
    t = w.target
    w.lock_scope()
    state = w.uow.writes.lock_state(planned)
    befores = w.uow.retention.retirement_befores(planned)
    edits = Edits(state, t.logged_as, t.now)
    restored = []
    for note_id, into in planned.items():
        row: dict[str, Any] | None = state.get(note_id)
        if row is None or row["status"] != NoteStatus.REVOKED.value \
                or row["consolidated_into_id"] != into:
            continue  # the host changed it since the read: left as it is
        edits.set(t.scope.key, note_id, {
            **restored_fields(befores.get(note_id, {})), "consolidated_into_id": None,
            "comments": append_comment(row["comments"], RESTORED_COMMENT)}, REASON)
        restored.append(note_id)
    edits.write(w.uow.writes,
                WriteConflict("a note changed while prune held it; nothing was written"))
    # A keep-apart that bound a note given back, at its version before it was retired, binds
    # it at its new one: the other conversations' decisions stand (as an erase keeps them).
    was = {i: v for i in restored if isinstance(v := befores.get(i, {}).get("version"), int)}
    if was:
        bind_again(w.uow, was, {}, t.now)
    return restored
