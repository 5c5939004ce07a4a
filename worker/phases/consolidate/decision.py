"""What one consolidate question is about and the answer it got (Decision), with the phase's
step and verdict-memory names."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from worker.domain.types import Note, fingerprint_notes
from worker.llm.ask import Outcome
from worker.phases.consolidate.core import PROMPT_NAME, FusionReply, PlannedCluster
from worker.runs.steps import ChildStep

PHASE = "consolidate"
KIND = "cluster"  # verdict memory: judgements of kind "cluster", verdict "keep_separate"
KEEP_SEPARATE = "keep_separate"
LINEAGE = "consolidated"


class ClusterVerdict(StrEnum):
    """What became of one cluster (the ``verdict`` its child step records)."""

    MERGE = "merge"
    REFUSED = "refused"
    INVALID = "invalid"
    DEFERRED = "deferred"
    KNOWN_REFUSED = "known_refused"
    OPEN = "open"
    STALE = "stale"


# The step counter each verdict not merged adds to.
VERDICT_COUNTER = {
    ClusterVerdict.REFUSED: "clusters_refused", ClusterVerdict.INVALID: "clusters_invalid",
    ClusterVerdict.DEFERRED: "clusters_deferred",
    ClusterVerdict.KNOWN_REFUSED: "clusters_known_refused", ClusterVerdict.OPEN: "clusters_open",
}


@dataclass
class Decision:
    """One question about one group of notes, and the answer it got."""

    name: str
    cluster: PlannedCluster
    members: list[Note]  # what is revoked on merge
    sources: list[Note]  # what the judge saw (originals in place of over-consolidated members)
    verdict: str = ClusterVerdict.OPEN  # a ClusterVerdict (judging assigns its values)
    content: str = ""
    reason: str = ""
    rule: str | None = None
    warnings: list[str] = field(default_factory=list)
    outcome: Outcome[FusionReply] | None = None
    template_hash: str | None = None
    new_id: str | None = None
    relative_time_rejections: int = 0  # replies that kept "yesterday" & co. (re-asked once)

    @property
    def fingerprint(self) -> str:
        return fingerprint_notes(self.members)

    def step_input(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "note_ids": [n.id for n in self.members], "similarity": self.cluster.similarity,
            "min_similarity": self.cluster.min_similarity, "fingerprint": self.fingerprint,
        }
        if [n.id for n in self.sources] != data["note_ids"]:
            data["source_ids"] = [n.id for n in self.sources]
        if self.cluster.topical:
            data["topical"] = True
        return data

    def step_output(self, verdict: str | None = None, **extra: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdict": verdict or self.verdict, "reason": self.reason,
            "note_ids": [n.id for n in self.members], "similarity": self.cluster.similarity,
        }
        if self.content:
            out["content"] = self.content
        if self.rule:
            out["rule"] = self.rule
        if self.warnings:
            out["warnings"] = self.warnings
        if self.relative_time_rejections:
            out["relative_time_rejections"] = self.relative_time_rejections
        if self.outcome is not None:
            out["aliases"] = {f"n{k + 1}": n.id for k, n in enumerate(self.sources)}
            out["attempts"] = self.outcome.attempts
            if self.outcome.errors:
                out["errors"] = self.outcome.errors
        out.update(extra)
        return out

    def child(self, status: str, verdict: str | None = None, **extra: Any) -> ChildStep:
        o = self.outcome
        return ChildStep(
            name=self.name, status=status, input=self.step_input(),
            output=self.step_output(verdict, **extra),
            prompt_name=PROMPT_NAME if o is not None else None,
            template_hash=self.template_hash if o is not None else None,
            model=(o.model or None) if o is not None else None,
            tokens_in=o.tokens_in if o is not None else 0,
            tokens_out=o.tokens_out if o is not None else 0,
        )
