"""The seam a phase calls: is this decision applied now or proposed, and recording proposals.

A phase builds one ``Proposals`` per run and scope (one short read: the agent's apply mode,
the scope's open items; the run's trigger comes with the phase context), asks ``wants`` for each decision, ``add``s the
proposed ones as ``ProposedChange`` data and writes them with ``record`` in one transaction.
An approval's own run (trigger ``review``) always applies: it is the operator's decision.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import structlog

from worker.domain.types import NoteStatus
from worker.review.items import (
    DECLINED_KIND,
    ApplyMode,
    ProposedChange,
    changed_unversioned,
    resolve_mode,
    should_propose,
)

log = structlog.get_logger(__name__)

REVIEW_TRIGGER = "review"  # dream_runs.trigger of an approval's run


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
    nothing back. The run's trigger comes with ``ctx`` (the engine's run snapshot)."""
    settings = ctx.settings
    with ctx.uow() as uow:
        agent = ctx.agent(uow)  # read once per phase (per run in-process)
        mode = resolve_mode(settings.apply_mode, agent.apply_mode if agent else None)
        if ctx.trigger == REVIEW_TRIGGER:
            mode = ApplyMode.AUTO
        proposals = Proposals(mode, settings.safe_auto_min_confidence)
        if mode == ApplyMode.AUTO:
            return proposals
        rows = uow.review.open_rows(ctx.scope)
        stale = _stale_items(uow, rows)
        if stale and not ctx.dry_run:
            uow.check_lease(ctx.run_id, ctx.epoch)
            uow.review.mark_stale(stale, ctx.now, f"a note changed before review (run "
                                                  f"{ctx.run_id}); nothing was written")
            uow.commit()
    for row in rows:
        if row.id not in stale:
            proposals.open_fingerprints.add(row.fingerprint)
            proposals.held.update(row.versions or {})
    return proposals


def _stale_items(uow: Any, rows: list[Any]) -> list[int]:
    """Open items a note of which is no longer active at the version it was proposed on, or
    was pinned or taken over as manual since (``changed_unversioned``; one query; an example's
    archiving is re-checked when it is approved)."""
    notes = [r for r in rows if (r.payload or {}).get("entity", "note") == "note"]
    current = uow.notes.review_state({i for r in notes for i in (r.versions or {})})

    def stale(row: Any, note_id: str, version: int) -> bool:
        now = current.get(note_id)
        return (now is None or (now.version, now.status) != (version, NoteStatus.ACTIVE.value)
                or changed_unversioned(row.payload, now) is not None)

    return [r.id for r in notes
            if any(stale(r, i, int(v)) for i, v in (r.versions or {}).items())]


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
