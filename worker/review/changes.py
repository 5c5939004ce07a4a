"""A phase's decision as a ``ProposedChange``: one builder per kind, so the phases' seams stay
one line each and approval (worker.review.apply) reads back exactly what was built here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from worker.review.items import ChangeKind, ProposedChange, seen_of


def merge_change(d: Any) -> ProposedChange:
    """A consolidate ``Decision`` with verdict merge: members, sources and the fused text."""
    payload: dict[str, Any] = {"name": d.name, "similarity": d.cluster.similarity,
                               "min_similarity": d.cluster.min_similarity,
                               "seen": seen_of(d.members)}
    if d.rule:
        payload["rule"] = d.rule
    if d.warnings:
        payload["warnings"] = list(d.warnings)
    return ProposedChange(
        phase="consolidate", kind=ChangeKind.MERGE,
        versions={n.id: n.version for n in d.members}, reason=d.reason, content=d.content,
        source_ids=tuple(n.id for n in d.sources), confidence=1.0 if d.rule else None,
        payload=payload)


def contradiction_change(verdict: Any, decision: Any, a: Any, b: Any) -> ProposedChange:
    """A contradictions verdict and the decision policy drew from it (revoke or flag)."""
    kind = ChangeKind.REVOKE if decision.action == "revoke" else ChangeKind.FLAG
    return ProposedChange(
        phase="contradictions", kind=kind, versions={a.id: a.version, b.id: b.version},
        reason=verdict.reason or decision.why, relation=verdict.relation,
        confidence=verdict.confidence,
        source_ids=tuple(i for i in (decision.winner_id,) if i),
        payload={"action": decision.action, "kind": decision.kind,
                 "winner": decision.winner_id, "loser": decision.loser_id,
                 "why": decision.why, "similarity": verdict.pair.similarity,
                 "seen": seen_of((a, b))})


def archive_change(phase: str, item_id: str, version: int, *, reason: str, comment: str,
                   entity: str = "note", owner_gone: bool = False,
                   allow_protected: bool = False,
                   seen: dict[str, dict[str, Any]] | None = None,
                   gone_conversations: Sequence[str] = ()) -> ProposedChange:
    """One note (or example) prune or archive would archive, with its comment and log reason;
    ``seen``: what the plan decided it on beyond the version, as read (``seen_of``,
    ``seen_decided``), re-checked when the item is approved; ``gone_conversations``: a fused
    note's sources' conversations found gone, whose other sources its approval gives back
    (``phases.prune.lineage``)."""
    payload: dict[str, Any] = {"reason": reason, "comments": {item_id: comment}}
    if gone_conversations:
        payload["gone_conversations"] = sorted(gone_conversations)
    if seen:
        payload["seen"] = seen
    if entity != "note":
        payload["entity"] = entity
    if owner_gone:
        payload["owner_gone"] = True
    if allow_protected:
        payload["allow_protected"] = True
    return ProposedChange(phase=phase, kind=ChangeKind.ARCHIVE, versions={item_id: version},
                          reason=reason, confidence=1.0, payload=payload)
