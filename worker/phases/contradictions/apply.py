"""Applying the phase's decisions: one short lease-checked transaction per revoke or flag,
and what this run retired, held back and remembers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from worker.domain.types import (
    Note,
    NoteStatus,
    fingerprint_notes,
    retired_at,
)
from worker.phases.contradictions.core import (
    JUDGEMENT_KIND,
    PHASE,
    CandidatePair,
    Decision,
    PolicySettings,
    Verdict,
    append_comment,
    flagged_comment,
    resolved_comment,
)
from worker.phases.contradictions.topics import (
    TopicVerdict,
    follow_retirements,
    independent_pairs,
    topic_decisions,
)
from worker.review.changes import contradiction_change
from worker.review.propose import Proposals
from worker.runs.context import PhaseContext
from worker.safety.crashpoints import crashpoint
from worker.safety.guard import check_retire, record_trip
from worker.safety.injection import injection_signals

REVIEW_KIND = "contradiction"
REVIEW_FLAG = "contradiction_review"
LINEAGE = {"conflict": "superseded", "equivalent": "duplicate", "subsumed": "subsumed"}


def policy_settings(ctx: PhaseContext) -> PolicySettings:
    s = ctx.settings.contradictions
    return PolicySettings(s.min_confidence, s.newer_wins_days, s.high_importance)


def suspicious_notes(notes: dict[str, Note], pairs: list[CandidatePair]) -> frozenset[str]:
    return frozenset(
        nid for p in pairs for nid in p.ids
        if any(f.startswith("injection") for f in notes[nid].flags)
        or injection_signals(notes[nid].content))


class Applier:
    """Applies decisions one short transaction each and keeps what this run retired."""

    def __init__(self, ctx: PhaseContext, parent_step_id: str, notes: dict[str, Note],
                 counters: dict[str, Any], proposals: Proposals | None = None) -> None:
        self.ctx, self.parent_step_id, self.notes, self.counters = ctx, parent_step_id, notes, counters
        # Review before apply: decisions the apply mode holds back become review items.
        self.proposals = proposals if proposals is not None and proposals.active else None
        self.by_rule = ctx.app.llm is None
        self.policy = policy_settings(ctx)
        self.retired: set[str] = set()
        self.retired_into: dict[str, str] = {}
        self.remember: dict[tuple[str, str], Verdict] = {}
        self.guard_reason: str | None = None
        self.guarded: list[str] = []
        # Revocations the guard refused: kept for the next run, which applies them unasked.
        self.held_back: list[tuple[Verdict, Decision]] = []
        self.held_into: dict[str, str] = {}

    def decided_into(self) -> dict[str, str]:
        """Loser → winner of every retirement decided, applied or held back by the guard:
        a decided loser's remaining pairs are questions about its winner."""
        return {**self.held_into, **self.retired_into}

    def apply_held_back(
        self, held_back: list[tuple[Verdict, Decision]], pairs: list[CandidatePair],
    ) -> list[CandidatePair]:
        """Apply an earlier run's held-back retirements; the fresh pairs left to ask."""
        if not held_back:
            return pairs
        applied = 0
        for verdict, decision in held_back:
            if {decision.loser_id, decision.winner_id} & self.retired:
                continue  # its winner went too: the loser's pairs are asked about afresh
            entry = self.apply(verdict, decision)
            applied += entry["action"] == "revoke"
        self.counters["retirements_applied_unasked"] = applied
        active = {k: n for k, n in self.notes.items() if k not in self.retired}
        return follow_retirements(pairs, self.decided_into(), set(), active)

    def apply_topic(self, verdict: TopicVerdict) -> list[dict[str, Any]]:
        """Every decision the topic's answer implies, in order; unmentioned pairs remembered."""
        suspicious = suspicious_notes(self.notes, list(verdict.topic.pairs))
        entries = []
        covered: set[tuple[str, str]] = set()
        for pd in topic_decisions(verdict, self.notes, self.policy, suspicious):
            covered.add(pd.verdict.pair.ids)
            entry = self.apply(pd.verdict, pd.decision)
            entries.append({"a": pd.verdict.pair.a_id, "b": pd.verdict.pair.b_id,
                            "relation": pd.verdict.relation, **entry})
        for p in independent_pairs(verdict):
            if p.ids not in covered and not (set(p.ids) & self.retired):
                self.remember.setdefault(p.ids, Verdict(p, "independent", 1.0,
                                                        "not one attribute's values"))
        self.counters["pairs_judged"] += len(verdict.topic.pairs)
        return entries

    def apply(self, verdict: Verdict, decision: Decision) -> dict[str, Any]:
        ctx, counters = self.ctx, self.counters
        a, b = self.notes[verdict.pair.a_id], self.notes[verdict.pair.b_id]
        entry: dict[str, Any] = {"action": decision.action, "kind": decision.kind}
        if decision.winner_id:
            entry["winner"] = decision.winner_id
        if decision.why:
            entry["why"] = decision.why
        if a.id in self.retired or b.id in self.retired:
            # Planning never asks about a retired note; were one to slip through, it is counted.
            counters["verdicts_wasted"] += 1
            entry.update(action="skipped", why="a note of the pair was already retired in this run")
            return entry
        if decision.action == "none":
            self.remember[verdict.pair.ids] = verdict
            return entry
        if decision.action == "revoke" and self.guard_reason is not None:
            self._hold_back(verdict, decision)
            entry["action"] = "guarded"
            return entry
        if self.proposals is not None and self.proposals.wants(
                settled_by_rule=self.by_rule, confidence=verdict.confidence):
            return self._propose(verdict, decision, a, b, entry)
        if ctx.dry_run:
            entry["dry_run"] = True
            result = "ok"
        elif decision.action == "revoke":
            result = _revoke(ctx, verdict, decision, self.notes)
        else:
            result = "ok" if _flag(ctx, verdict, a, b, decision) else "stale"
        if result.startswith("guard:"):
            # The blast-radius guard said no (R20): this and every later revocation stays undone.
            self.guard_reason = result.removeprefix("guard:")
            self._hold_back(verdict, decision)
            entry["action"] = "guarded"
            return entry
        if result == "stale":
            entry["action"] = "stale"
            counters["pairs_skipped_stale"] += 1
            return entry
        if decision.action == "revoke":
            assert decision.loser_id is not None and decision.winner_id is not None
            self.retired.add(decision.loser_id)
            self.retired_into[decision.loser_id] = decision.winner_id
            key = "conflicts_resolved" if decision.kind == "conflict" else "equivalents_merged"
            counters[key] += 1
        else:
            counters["conflicts_flagged"] += 1
        return entry

    def _propose(self, verdict: Verdict, decision: Decision, a: Note, b: Note,
                 entry: dict[str, Any]) -> dict[str, Any]:
        """Recorded for review, not applied; a proposed loser's other pairs go to its winner,
        as they would after the revocation."""
        assert self.proposals is not None
        self.proposals.add(contradiction_change(verdict, decision, a, b))
        if decision.action == "revoke" and decision.loser_id and decision.winner_id:
            self.held_into.setdefault(decision.loser_id, decision.winner_id)
        self.counters["changes_proposed"] = self.counters.get("changes_proposed", 0) + 1
        entry["action"] = "proposed"
        return entry

    def _hold_back(self, verdict: Verdict, decision: Decision) -> None:
        assert decision.loser_id is not None and decision.winner_id is not None
        self.guarded.append(decision.loser_id)
        if decision.loser_id in self.held_into:
            return  # a loser is held back into one winner: the first decided
        self.held_back.append((verdict, decision))
        self.held_into[decision.loser_id] = decision.winner_id

    def finish(self) -> None:
        """Record the guard's trip and what it held back, and remember every settled pair,
        each at the notes' current versions."""
        ctx = self.ctx
        if self.guard_reason is not None:
            self.counters["pairs_guarded"] = len(self.guarded)
            record_trip(ctx, self.parent_step_id, PHASE, self.guard_reason, self.guarded)
        remember = [v for ids, v in self.remember.items() if not set(ids) & self.retired]
        held_back = [(v, d) for v, d in self.held_back
                     if not {d.loser_id, d.winner_id} & self.retired]
        if not (remember or held_back) or ctx.dry_run:
            return
        with ctx.uow() as uow:
            uow.check_lease(ctx.run_id, ctx.epoch)
            current = uow.notes.versions(
                {i for v in remember for i in v.pair.ids} | {i for v, _ in held_back
                                                             for i in v.pair.ids})
            for v, d in held_back:
                assert d.loser_id is not None and d.winner_id is not None
                pair = [self.notes[d.loser_id], self.notes[d.winner_id]]
                if any(current.get(n.id, (0, ""))[1] != NoteStatus.ACTIVE.value for n in pair):
                    continue
                pair = [replace(n, version=current[n.id][0]) for n in pair]
                uow.judgements.record_retirement(
                    ctx.scope, fingerprint_notes(pair), d.loser_id, d.winner_id, d.kind,
                    v.reason or d.why, ctx.run_id, ctx.now)
            for v in remember:
                pair = [self.notes[i] for i in v.pair.ids]
                if any(current.get(n.id, (0, ""))[1] != NoteStatus.ACTIVE.value for n in pair):
                    continue
                # At the versions now stored (a flag may have moved one), so the next run
                # does not ask again about an unchanged pair.
                pair = [replace(n, version=current[n.id][0]) for n in pair]
                uow.judgements.record(ctx.scope, JUDGEMENT_KIND, fingerprint_notes(pair),
                                      [n.id for n in pair], v.relation, v.reason, ctx.run_id,
                                      ctx.now)
            uow.commit()


def _fresh(uow: Any, *members: Note) -> bool:
    """Both notes still active at the versions this plan read (R10)."""
    current = uow.notes.versions([n.id for n in members])
    return all(current.get(n.id) == (n.version, NoteStatus.ACTIVE.value) for n in members)


def _remember(ctx: PhaseContext, uow: Any, verdict: Verdict, notes: dict[str, Note]) -> None:
    pair = [notes[verdict.pair.a_id], notes[verdict.pair.b_id]]
    uow.judgements.record(
        ctx.scope, JUDGEMENT_KIND, fingerprint_notes(pair), [n.id for n in pair],
        verdict.relation, verdict.reason, ctx.run_id, ctx.now,
    )


def _revoke(ctx: PhaseContext, verdict: Verdict, decision: Decision, notes: dict[str, Note]) -> str:
    """ok | stale (a note changed since the plan) | guard:<reason> (the blast-radius guard)."""
    assert decision.winner_id is not None and decision.loser_id is not None
    winner, loser = notes[decision.winner_id], notes[decision.loser_id]
    reason = verdict.reason or decision.why
    changes: dict[str, Any] = {"status": NoteStatus.REVOKED.value,
                               "consolidated_into_id": winner.id}
    if decision.kind == "conflict":
        # The losing fact stopped being true once the conflicting one was recorded too: the
        # winner's creation, or the loser's own when the winner is the older, more used note.
        assert winner.created_at is not None
        changes["valid_to"] = retired_at(loser, winner.created_at)
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        # One read: the freshness check (R10), the loser's comments and the log's before image.
        state = uow.notes.current_state([winner.id, loser.id])
        if not all((state.get(n.id, {}).get("version"), state.get(n.id, {}).get("status"))
                   == (n.version, NoteStatus.ACTIVE.value) for n in (winner, loser)):
            return "stale"
        refusal = check_retire(uow, ctx, [loser])  # R20
        if refusal is not None:
            uow.rollback()
            return f"guard:{refusal}"
        existing = state[loser.id]["comments"]
        changes["comments"] = append_comment(
            existing, resolved_comment(winner.id, decision.kind, reason))
        if uow.notes.change_many([loser], {loser.id: changes}, run_id=ctx.run_id, now=ctx.now,
                                 reason=f"contradictions.{decision.kind}", current=state):
            uow.rollback()
            return "stale"
        uow.notes.add_lineage(ctx.scope, [loser.id], winner.id, LINEAGE[decision.kind],
                              ctx.run_id, ctx.now)
        _remember(ctx, uow, verdict, notes)
        crashpoint("contradictions.after_revoke")
        uow.commit()
    loser.status = NoteStatus.REVOKED.value
    return "ok"


def _flag(ctx: PhaseContext, verdict: Verdict, a: Note, b: Note, decision: Decision) -> bool:
    """Both kept: a comment and a flag on each, one review record; nothing revoked."""
    reason = f"{decision.why}. {verdict.reason}".strip()
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        if not _fresh(uow, a, b):
            return False
        existing = uow.notes.comments_of([a.id, b.id])
        new_flags: dict[str, list[str]] = {}
        for note, other in ((a, b), (b, a)):
            flags = sorted(set(note.flags) | {REVIEW_FLAG})
            new_flags[note.id] = flags
            ok = uow.notes.change(
                note, run_id=ctx.run_id, now=ctx.now, reason="contradictions.flagged",
                flags=flags,
                comments=append_comment(existing.get(note.id), flagged_comment(other.id, reason)),
            )
            if not ok:
                uow.rollback()
                return False
        uow.judgements.add_review(ctx.scope, REVIEW_KIND, [a.id, b.id], reason[:500],
                                  ctx.run_id, ctx.now)
        # Remembered at the notes' versions (a flag keeps them), so no later run asks again.
        uow.judgements.record(ctx.scope, JUDGEMENT_KIND, fingerprint_notes([a, b]),
                              [a.id, b.id], verdict.relation, verdict.reason, ctx.run_id, ctx.now)
        uow.commit()
    a.flags, b.flags = new_flags[a.id], new_flags[b.id]
    return True
