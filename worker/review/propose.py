"""The seam a phase calls: is this decision applied now or proposed, and recording proposals.

A phase builds one ``Proposals`` per run and scope (one short read: the agent's apply mode,
the scope's open items; the run's trigger comes with the phase context), asks ``wants`` for each decision, ``add``s the
proposed ones as ``ProposedChange`` data and writes them with ``record`` in one transaction.
An approval's own run (trigger ``review``) always applies: it is the operator's decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from worker.domain.types import REVIEW_TRIGGER
from worker.review.items import (
    DECLINED_KIND,
    ApplyMode,
    ProposedChange,
    entity_of,
    moved_since,
    resolve_mode,
    should_propose,
)

log = structlog.get_logger(__name__)


@dataclass
class Proposals:
    mode: ApplyMode
    min_confidence: float
    open_fingerprints: set[str] = field(default_factory=set)
    # Notes an open item of an earlier run would write: phases leave them alone until decided.
    held: set[str] = field(default_factory=set)
    pending: list[ProposedChange] = field(default_factory=list)

    @property
    def active(self) -> bool:
        """False in auto mode: nothing is ever proposed, the phase runs as before."""
        return self.mode != ApplyMode.AUTO

    def wants(self, *, settled_by_rule: bool, confidence: float | None = None) -> bool:
        return should_propose(self.mode, settled_by_rule=settled_by_rule, confidence=confidence,
                              min_confidence=self.min_confidence)

    def add(self, change: ProposedChange) -> None:
        if change.fingerprint in self.open_fingerprints:
            return  # proposed by an earlier run and still waiting for its review
        self.open_fingerprints.add(change.fingerprint)
        self.pending.append(change)


def proposals_for(ctx: Any) -> Proposals:
    """The apply mode of ``ctx``'s run and scope, read once; open items whose notes changed
    since they were proposed are recorded stale here (they can never apply), so they hold
    nothing back, in auto mode too when the scope has any (an agent switched from propose to
    auto: its run's writes settle the items they make stale, ``WriteTarget.settle_items``).
    The run's trigger comes with ``ctx`` (the engine's run snapshot)."""
    settings = ctx.settings
    with ctx.uow() as uow:
        agent = ctx.agent(uow)  # read once per phase (per run in-process)
        mode = resolve_mode(settings.apply_mode, agent.apply_mode if agent else None)
        if ctx.trigger == REVIEW_TRIGGER:
            mode = ApplyMode.AUTO
        proposals = Proposals(mode, settings.safe_auto_min_confidence)
        if mode == ApplyMode.AUTO and not ctx.open_items(uow):
            return proposals
        rows = uow.review.open_rows(ctx.scope)
        stale = _stale_items(uow, rows)
        if stale and not ctx.dry_run:
            uow.check_lease(ctx.run_id, ctx.epoch)
            uow.review.mark_stale(stale, ctx.now, f"a note or example changed before review "
                                                  f"(run {ctx.run_id}); nothing was written")
            uow.commit()
    if mode == ApplyMode.AUTO:
        return proposals  # an auto run applies: open items (an earlier propose run's) hold nothing
    for row in rows:
        if row.id not in stale:
            proposals.open_fingerprints.add(row.fingerprint)
            proposals.held.update(row.versions or {})
    return proposals


def held_notes(uow: Any, scope: Any) -> dict[str, int]:
    """Note id → the open review item that would change it, of the scope's items still as
    proposed: what a run leaves alone until the item is decided, and what the host's fusion
    candidates leave out (a stale open item holds nothing: it can never apply)."""
    rows = [r for r in uow.review.open_rows(scope) if entity_of(r.payload) == "note"]
    stale = set(_stale_items(uow, rows))
    return {note_id: r.id for r in rows if r.id not in stale for note_id in (r.versions or {})}


def settle_stale(uow: Any, scope: Any, now: Any, cause: str, by: str, naming: Iterable[str],
                 spare: frozenset[int] = frozenset()) -> list[int]:
    """Record as stale, in the caller's transaction, the scope's open items that can no longer
    apply since ``cause`` (a host's fuse, remember, keep-apart, an undo) moved or kept apart a
    note they name: listed, shown and approved as what they are, never as open items that
    hold their notes out of every run and of the host's candidates. Only the items naming a
    note of ``naming`` (what the write touched) are read; ``spare``: items the caller decides
    itself (a batch's). Their ids, in order."""
    rows = [r for r in uow.review.open_naming(scope, naming) if r.id not in spare]
    stale = _stale_items(uow, rows) if rows else []
    if stale:
        uow.review.mark_stale(stale, now, f"a note it names changed or was kept apart before "
                                          f"review ({cause}); nothing was written; the next "
                                          "run proposes afresh", by=by)
    return stale


def holding_item(uow: Any, scope: Any, note_id: str) -> int | None:
    """The open item (still as proposed) that would change ``note_id``, if any: ``held_notes``
    for one note, reading only the items that name it."""
    rows = [r for r in uow.review.open_naming(scope, [note_id])
            if entity_of(r.payload) == "note" and note_id in (r.versions or {})]
    stale = set(_stale_items(uow, rows)) if rows else set()
    return next((r.id for r in rows if r.id not in stale), None)


def _stale_items(uow: Any, rows: list[Any]) -> list[int]:
    """Open items a note or example of which is no longer active at the version it was
    proposed on, or moved since in a way its plan decided on (pinned, taken over as manual,
    renewed, re-scored: ``changed_unversioned``); one query per kind. Also a merge or a
    revocation two of whose notes were kept apart since (a host's keep-apart, a reviewer's
    decline: they keep the versions), which approval refuses (``kept_apart_since``): one
    read of the keep-apart memory when there is such an item."""
    examples = {r.id for r in rows if entity_of(r.payload) == "example"}
    ids = {kind: {i for r in rows if (r.id in examples) == (kind == "example")
                  for i in (r.versions or {})} for kind in ("note", "example")}
    current = {"note": uow.notes.review_state(ids["note"]),
               "example": uow.examples.review_state(ids["example"])}

    def stale(row: Any, item_id: str, version: int) -> bool:
        now = current["example" if row.id in examples else "note"].get(item_id)
        return moved_since(row.payload, version, now) is not None

    moved = [r.id for r in rows
             if any(stale(r, i, int(v)) for i, v in (r.versions or {}).items())]
    return sorted(set(moved) | _kept_apart_items(uow, [r for r in rows if r.id not in moved]))


def _kept_apart_items(uow: Any, rows: list[Any]) -> set[int]:
    """Of ``rows`` (items still at their versions), the merges and revocations two of whose
    notes are kept apart at those versions."""
    from worker.domain.types import Note, Scope
    from worker.phases.kit.snapshot import APART_KINDS, Memory
    from worker.review.declined import RETIRING_CHANGES

    retiring = [r for r in rows if entity_of(r.payload) == "note"
                and r.kind in {k.value for k in RETIRING_CHANGES} and len(r.versions or {}) >= 2]
    if not retiring:
        return set()
    scope = Scope.from_key(retiring[0].scope_key)
    memory = Memory(rows=uow.judgements.of_kinds(scope, APART_KINDS))
    return {r.id for r in retiring
            if memory.kept_apart([Note(id=i, scope=scope, content="", version=int(v))
                                  for i, v in (r.versions or {}).items()])}


def record(ctx: Any, proposals: Proposals, counters: Any = None) -> int:
    """Write the pending proposals in one transaction (none in a dry run); the number written.

    A change an operator declined at these versions is not proposed again.
    """
    pending, proposals.pending = proposals.pending, []
    if not pending:
        return 0
    written = 0
    if not ctx.dry_run:
        with ctx.uow() as uow:
            uow.check_lease(ctx.run_id, ctx.epoch)
            declined = uow.judgements.known(ctx.scope, DECLINED_KIND,
                                            [c.fingerprint for c in pending])
            rows = [c.row() for c in pending if c.fingerprint not in declined]
            written = uow.review.add_many(ctx.scope, ctx.run_id, rows, ctx.now)
            uow.commit()
        if len(pending) > written and counters is not None:
            counters["proposals_declined_before"] = len(pending) - written
    else:
        written = len(pending)
    if counters is not None:
        counters["proposed"] = counters.get("proposed", 0) + written
    log.info("review.proposed", run_id=ctx.run_id, scope=ctx.scope.key, items=written,
             mode=proposals.mode.value)
    return written
