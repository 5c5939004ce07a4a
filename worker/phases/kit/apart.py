"""Pure: a keep-apart outlives a fusion. A host kept notes A and X apart (or a reviewer declined
to merge them); a write then fuses A (with its duplicates) into a new note N, or retires A into
another note. N holds what A said, so N and X are kept apart too, at their versions after the
write: the contradictions phase of the same run must not retire X into N, nor N into X, which
would merge what the host said to keep apart. No I/O: the write gives the rows and versions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from worker.domain.types import fingerprint_versions
from worker.phases.kit.changes import ChangeKind, ItemResult, ItemStatus
from worker.phases.kit.snapshot import APART_KINDS


class Inherited(NamedTuple):
    """A verdict-memory row the write records beside its changes."""

    kind: str
    fingerprint: str
    note_ids: tuple[str, str]
    verdict: str
    reason: str


def retired_into(results: Iterable[ItemResult]) -> dict[str, str]:
    """Each note an applied supersede retires → the note that takes its place."""
    into: dict[str, str] = {}
    for r in results:
        c = r.change
        if r.status != ItemStatus.APPLIED or c.kind != ChangeKind.SUPERSEDE or c.entity != "note":
            continue
        target = c.new_note.id if c.new_note is not None else c.into_id
        if target is not None:
            into.update((m.id, target) for m in c.members)
    return into


def inherited(rows: Sequence[Any], into: Mapping[str, str], before: Mapping[str, int],
              after: Mapping[str, int | None]) -> list[Inherited]:
    """The keep-aparts ``rows`` (kind, fingerprint, note_ids, verdict) that held before the
    write (every note at the versions ``before`` gives) and name a note the write retires
    (``into``), carried to the note that takes its place, paired with each other note of the
    row still active after it (``after``: version, or None when retired or unknown)."""
    out: dict[str, Inherited] = {}
    for row in rows:
        ids = list(row.note_ids or ())
        if len(ids) < 2 or not any(i in into for i in ids) or any(i not in before for i in ids):
            continue
        if fingerprint_versions([(i, before[i]) for i in ids]) != row.fingerprint:
            continue  # it no longer held: a note of it had changed before this write
        for source in ids:
            target = into.get(source)
            if target is None:
                continue
            for other in ids:
                other_now, target_now = after.get(other), after.get(target)
                if other in (source, target) or other in into or other_now is None \
                        or target_now is None:
                    continue  # (a note retired by this write keeps nothing apart)
                fp = fingerprint_versions([(target, target_now), (other, other_now)])
                out.setdefault(fp, Inherited(row.kind, fp, (target, other), row.verdict,
                                             f"kept apart from {other} as {source} was, which "
                                             f"{target} replaces"))
    return list(out.values())


def carried_apart(uow: Any, scope: Any, results: Iterable[ItemResult],
                  before: Mapping[str, Mapping[str, Any]], after: Mapping[str, Mapping[str, Any]],
                  carried: Sequence[Any] | None) -> list[Inherited]:
    """``inherited`` for one write: the keep-aparts from ``carried`` (the run's verdict memory,
    as the plan read it) or else read; the versions of the write's notes from its state
    ``before`` and ``after`` it, a partner outside the write read (only when a row names a
    note the write retires: most writes read nothing)."""
    into = retired_into(results)
    if not into:
        return []
    rows = carried if carried is not None else uow.judgements.of_kinds(scope, APART_KINDS)
    rows = [r for r in rows if r.kind in APART_KINDS and any(i in into for i in r.note_ids or ())]
    if not rows:
        return []
    was = {i: int(v["version"]) for i, v in before.items()}
    now: dict[str, int | None] = {i: int(v["version"]) if v["status"] == "active" else None
                                  for i, v in after.items()}
    outside = sorted({i for r in rows for i in r.note_ids if i not in was})
    for i, (version, status) in (uow.notes.versions(outside) if outside else {}).items():
        was[i] = version
        now[i] = version if status == "active" else None
    return inherited(rows, into, was, now)
