"""A phase's snapshot read: the scope's notes (with vectors), what this run already did in the
scope, and its verdict memory, in a few statements on one short read transaction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from worker.domain.types import Note, NoteStatus, Scope, fingerprint_notes
from worker.store.repositories.notes import ScopeSnapshot

_RETIRED = (NoteStatus.REVOKED.value, NoteStatus.ARCHIVED.value)
# The operation-log reason of prune archiving a scope whose owner is recorded gone: explicit
# evidence about the whole scope, outside the guard's share (worker.safety.guard).
_OWNER_GONE = "prune: scope owner recorded gone"


@dataclass(frozen=True)
class RunJournal:
    """What this run already did in the scope, from its operation log."""

    produced: frozenset[str] = frozenset()  # notes it inserted (consolidation's fusions)
    retired: frozenset[str] = frozenset()  # notes it moved from active to revoked/archived


def journal_of(rows: Iterable[Any]) -> RunJournal:
    produced: set[str] = set()
    retired: set[str] = set()
    for entity_id, op, before, after, reason in rows:
        if op == "insert":
            produced.add(entity_id)
        elif (op == "update" and (after or {}).get("status") in _RETIRED
              and (before or {}).get("status", NoteStatus.ACTIVE.value) == NoteStatus.ACTIVE.value
              and not (reason or "").startswith(_OWNER_GONE)):
            retired.add(entity_id)
    return RunJournal(frozenset(produced), frozenset(retired))


KEEP_APART = "keep_apart"  # a host's "never offer these together" (worker.host.fusion)
# A reviewer's "no" to a merge, a revocation or a flag of these notes (worker.review.declined):
# no phase retires one of them in favour of another while all keep their versions.
DECLINED_APART = "declined_apart"
APART_KINDS = frozenset({KEEP_APART, DECLINED_APART})


@dataclass
class Memory:
    """The scope's verdict memory of some kinds: fingerprint → verdict, and every row."""

    verdicts: dict[tuple[str, str], str] = field(default_factory=dict)
    rows: list[Any] = field(default_factory=list)

    def known(self, kind: str, fingerprints: Iterable[str]) -> set[str]:
        return {fp for fp in fingerprints if (kind, fp) in self.verdicts}

    def kept_apart(self, notes: Iterable[Note]) -> set[frozenset[str]]:
        """Every pair of ``notes`` a host kept apart (``dream keep-apart``, the API, MCP) or a
        reviewer declined to merge, revoke or flag, whose verdict still holds: all its notes
        among ``notes`` at the versions it was given for (a changed note may be offered, and
        judged, again). Neither note of such a pair is retired in favour of the other."""
        by_id = {n.id: n for n in notes}
        pairs: set[frozenset[str]] = set()
        for row in self.rows:
            ids = list(row.note_ids or ())
            if row.kind not in APART_KINDS or len(ids) < 2 or not all(i in by_id for i in ids):
                continue
            if fingerprint_notes([by_id[i] for i in ids]) == row.fingerprint:
                pairs.update(frozenset((a, b)) for k, a in enumerate(ids) for b in ids[k + 1:])
        return pairs


@dataclass
class PhaseSnapshot:
    notes: ScopeSnapshot
    journal: RunJournal
    memory: Memory


def read_snapshot(uow: Any, scope: Scope, run_id: str | None,
                  memory_kinds: Sequence[str] = ()) -> PhaseSnapshot:
    """The notes (one query), the run's journal (one) and the memory of ``memory_kinds`` (one)."""
    notes = uow.notes.load_scope(scope)
    journal = (journal_of(uow.writes.journal(run_id, scope.key)) if run_id is not None
               else RunJournal())
    memory = Memory()
    if memory_kinds:
        memory.rows = uow.judgements.of_kinds(scope, memory_kinds)
        memory.verdicts = {(r.kind, r.fingerprint): r.verdict for r in memory.rows}
    return PhaseSnapshot(notes, journal, memory)
