"""A keep-apart outlives a restoration. A host's keep-apart (or a reviewer's declined merge)
binds its notes at the versions it was given for; an undo or an erasure that gives a note back
bumps its version, which alone would end the decision, and the next dream would merge notes a
person kept apart. Both record it again at the versions they leave."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from worker.domain.types import NoteStatus, Scope, fingerprint_versions
from worker.phases.kit.snapshot import APART_KINDS
from worker.store.uow import UnitOfWork


def bind_again(uow: UnitOfWork, before: Mapping[str, int], found_at: Mapping[str, int],
               now: datetime) -> None:
    """Record again, at the versions the notes have now, every keep-apart set of their scopes
    that names a note of ``before`` and bound it at that version (each other note at its
    version now), or at the versions ``found_at`` gives (a decision recorded since, on what the
    restoration found), once every note of the set is active."""
    scopes = {row.scope_key for row in uow.safety.note_state(before).values()}
    for key in sorted(scopes):
        scope = Scope.from_key(key)
        for row in uow.judgements.of_kinds(scope, APART_KINDS):
            ids = list(row.note_ids or ())
            if not before.keys() & set(ids):
                continue
            notes = uow.safety.note_state(ids)
            if len(notes) != len(ids) or any(n.status != NoteStatus.ACTIVE.value
                                              for n in notes.values()):
                continue
            bound = {fingerprint_versions([(i, versions.get(i, notes[i].version)) for i in ids])
                     for versions in (before, found_at)}
            if row.fingerprint in bound:
                uow.judgements.record(scope, row.kind, fingerprint_versions(
                    [(i, notes[i].version) for i in ids]), ids, row.verdict, row.reason, None, now)
