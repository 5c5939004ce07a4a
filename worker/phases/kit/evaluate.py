"""Pure: which changes of a write still apply, given every member's current state, and what the
blast-radius guard allows (R10, R20, R23, R26). No I/O; the write feeds it the run's carried
state of the members, or one locked re-read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from worker.domain.types import (
    NoteStatus,
    Protection,
    Said,
    lasting_expiry,
    protection_rank,
    restated_at,
)
from worker.phases.kit.changes import Change, ChangeKind, ItemResult, ItemStatus
from worker.safety.guard import protection_refusal, share_refusal

State = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class GuardLimits:
    """What the guard needs, read once per write: this run's retirements so far (outside the
    owner-gone rule), the scope's active notes at the start of the run, and the limits."""

    already: frozenset[str]
    baseline: int
    max_share: float
    min_scope_size: int
    allow_retire: int | None
    each: bool = True  # False: the phase's retirements are allowed or refused all together


def evaluate(changes: Sequence[Change], state: State, guard: GuardLimits | None,
             apart: frozenset[frozenset[str]] = frozenset()) -> tuple[list[ItemResult], str | None]:
    """The result of each change in order, and the guard's refusal if it tripped. ``apart``:
    pairs kept apart (a host's keep-apart, a declined review) at the notes' versions now.

    ``state`` (a scratch copy of the members' state) is updated as each applied change would
    write it, so a later change sees an earlier one: a note revoked by item 1 is stale for
    item 3, two comments on one note compose.
    """
    results: list[ItemResult] = []
    gate = Gate(guard)
    for c in changes:
        r = _freshness(c, state, apart)
        if r.status == ItemStatus.APPLIED and c.retires and c.entity == "note":
            gate.admit(r, state)
        if r.status == ItemStatus.APPLIED:
            apply_change(c, state)
        results.append(r)
    return results, gate.finish()


def _fresh(row: dict[str, Any] | None, version: int) -> bool:
    return row is not None and row["version"] == version and row["status"] == NoteStatus.ACTIVE.value


def _freshness(c: Change, state: State, apart: frozenset[frozenset[str]]) -> ItemResult:
    if c.entity != "note":  # examples are re-checked by their own guarded update
        return ItemResult(c, ItemStatus.APPLIED)
    stale = [m.id for m in (*c.members, *c.keep) if not _fresh(state.get(m.id), m.version)]
    # What the plan decided on beyond the version (``Change.expect``), as the write sees it now.
    stale += [i for i, want in c.expect.items() if i not in stale and i in state
              and any(state[i].get(f) != v for f, v in want.items())]
    if _spares_manual(c):
        # Backstop for R26 under every planner: maintenance never archives what a person wrote,
        # never lets it lose a conflict and fuses it only into a manual note; a note the host
        # took over since the plan (no version) makes the item stale.
        stale += [m.id for m in c.members
                  if m.id in state and not state[m.id]["is_auto_generated"] and m.id not in stale]
    if c.kind == ChangeKind.SUPERSEDE and c.new_note is not None:
        # Backstop under every planner (an approved proposal carries no ``expect``): the new
        # note takes its sources' place, so it is never weaker than one of them is now (an
        # ephemeral fusion of a note the host has since made standard, or protected).
        floor = protection_rank(c.new_note.protection)
        stale += [m.id for m in c.members if m.id in state and m.id not in stale
                  and protection_rank(state[m.id]["protection"]) > floor]
    if c.kind == ChangeKind.SUPERSEDE and apart:
        # A keep-apart keeps the versions: one recorded after the plan read its memory (while
        # the model judged) shows only here, and no note is retired in favour of another.
        ids = [m.id for m in (*c.members, *c.keep)]
        stale += sorted({i for p in apart if p <= set(ids) for i in p} - set(stale))
    if stale:
        return ItemResult(c, ItemStatus.STALE, stale_ids=stale)
    return ItemResult(c, ItemStatus.APPLIED)


def _spares_manual(c: Change) -> bool:
    """Whether a manual member makes ``c`` stale: every archive and every supersede, except
    one into a new manual note (a fusion that carries a person's note, remember's update)."""
    if c.kind == ChangeKind.ARCHIVE:
        return True
    return c.kind == ChangeKind.SUPERSEDE and (c.new_note is None or c.new_note.is_auto_generated)


class Gate:
    """The guard over one phase: each retirement in order (``each``), or all of them at once.

    A write builds one over its changes; a phase that must know while it plans (contradictions
    re-plans its questions after every retirement) keeps one too, with the same limits, so the
    write's own check agrees with what it planned."""

    def __init__(self, guard: GuardLimits | None) -> None:
        self.guard = guard
        self.retired = set(guard.already) if guard is not None else set()
        # Everything the phase asked to retire, refused or not: the count a share refusal
        # names once the phase's whole plan is known (``final``), so re-running with the
        # ``--allow-retire`` it offers is not refused again by the rest of this phase's plan.
        self.wanted = set(self.retired)
        self.tripped: str | None = None
        self.by_share = False  # the trip was the share's (a count), not a protection
        self.counted: list[ItemResult] = []
        self.held: list[ItemResult] = []

    def check(self, ids: Sequence[str], protections: Sequence[str], *, owner_gone: bool = False,
              protected_ok: bool = False) -> str | None:
        """None if retiring ``ids`` is allowed now (and counted), else the refusal."""
        g = self.guard
        if g is None:
            return None
        refusal = next((p for i, prot in zip(ids, protections, strict=True)
                        if (p := protection_refusal(i, prot, protected_ok))), None)
        if refusal is None and not owner_gone:
            self.wanted |= set(ids)
        if self.tripped is not None and g.each:
            return self.tripped
        if refusal is None and not owner_gone:
            proposed = set(ids) - self.retired
            refusal = _share(g, len(self.retired) + len(proposed)) if g.each else None
            if refusal is None:
                self.retired |= proposed
            elif self.tripped is None:
                self.by_share = True
        if refusal is not None:
            self.tripped = self.tripped or refusal
        return refusal

    def want(self, ids: Sequence[str]) -> None:
        """Retirements the phase decided after the trip without asking (held back unasked)."""
        self.wanted |= set(ids)

    def final(self) -> str | None:
        """The trip's reason once the phase's plan is complete: a share refusal names every
        retirement the run wanted up to here, not just those up to the first one refused."""
        if self.tripped is None or not self.by_share or self.guard is None:
            return self.tripped
        return _share(self.guard, len(self.wanted)) or self.tripped

    def admit(self, r: ItemResult, state: State) -> None:
        c = r.change
        ids = [m.id for m in c.members]
        refusal = self.check(ids, [state[i]["protection"] for i in ids],
                             owner_gone=c.owner_gone, protected_ok=c.protected_ok)
        if refusal is not None:
            r.status, r.reason = ItemStatus.GUARDED, refusal
            self.held.append(r)
        elif not c.owner_gone:
            self.counted.append(r)

    def finish(self) -> str | None:
        g = self.guard
        if g is None or g.each:
            final = self.final()
            for r in self.held:
                r.reason = final if final is not None and r.reason == self.tripped else r.reason
            return final
        refusal = self.tripped or _share(g, len(self.retired))
        if refusal is not None:  # all or nothing: every counted retirement is held back
            for r in self.counted:
                r.status, r.reason = ItemStatus.GUARDED, refusal
        return refusal


def _share(guard: GuardLimits, total: int) -> str | None:
    return share_refusal(total, guard.baseline, guard.max_share, guard.min_scope_size,
                         guard.allow_retire)


def _append(existing: str | None, line: str) -> str:
    return f"{existing}\n{line}" if existing else line


def apply_change(c: Change, state: State) -> None:
    """``state`` as it is once ``c`` is written (members and the new note)."""
    if c.entity != "note":
        return
    for m in c.members:
        row = state[m.id]
        if c.kind == ChangeKind.ANNOTATE:
            if c.flags:
                row["flags"] = sorted(set(row.get("flags") or []) | set(c.flags))
            if c.comment:
                row["comments"] = _append(row.get("comments"), c.comment)
            continue
        row["version"] += 1
        row["comments"] = (_append(row.get("comments"), c.comment) if c.append_comment
                           or c.kind == ChangeKind.ARCHIVE else c.comment)
        if c.kind == ChangeKind.ARCHIVE:
            row["status"] = NoteStatus.ARCHIVED.value
            continue
        row["status"] = NoteStatus.REVOKED.value
        row["consolidated_into_id"] = c.target_id
        if c.valid_to is not None:
            row["valid_to"] = _not_before(c.valid_to, row.get("created_at"), row.get("valid_from"))
        if c.importance is not None:
            row["importance"] = c.importance
    if c.restate and c.into_id is not None:
        restate(state[c.into_id], [state[m.id] for m in c.members])
    if c.extend_expiry and c.into_id is not None:
        outlive(state[c.into_id], [state[m.id] for m in c.members])
    if c.new_note is not None:
        state[c.new_note.id] = {"version": 1, "status": NoteStatus.ACTIVE.value,
                                "protection": c.new_note.protection,
                                "is_auto_generated": c.new_note.is_auto_generated,
                                "created_at": None, "comments": c.new_note.comments,
                                "last_accessed_at": c.new_note.last_accessed_at,
                                "expires_at": c.new_note.expires_at,
                                "flags": []}


def restate(into: dict[str, Any], members: Sequence[dict[str, Any]]) -> None:
    """``into`` dated at the latest statement of ``members`` said after it (``restated_at``)."""
    said = restated_at(_said(into), [_said(m) for m in members], into.get("protection"))
    if said is not None:
        into["created_at"], into["write_seq"] = said


def outlive(into: dict[str, Any], members: Sequence[dict[str, Any]]) -> None:
    """``into`` expires no sooner than any of ``members`` (``lasting_expiry``); an immutable
    note, which no archive takes, keeps its own, as it keeps its date."""
    if into.get("protection") != Protection.IMMUTABLE.value:
        into["expires_at"] = lasting_expiry(
            [into.get("expires_at"), *(m.get("expires_at") for m in members)])


def _said(row: dict[str, Any]) -> Said:
    return row.get("created_at"), row.get("write_seq")


def _not_before(when: datetime, *starts: datetime | None) -> datetime:
    """A retirement never takes effect before the note itself was recorded, nor before its
    validity began (``valid_from``: the locked re-read and the scope load carry it)."""
    return max([when, *(s for s in starts if s is not None)])
