"""Applying the phase's decisions: planned in memory while the topics are judged (so each round
re-plans around this run's retirements), then written in the phase's one guarded write with
what this run retired, held back and remembers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from worker.clock import SKEW
from worker.domain.types import (
    CONTRADICTION_REVIEW_FLAG,
    CONTRADICTION_REVIEW_KIND,
    Note,
    NoteStatus,
    fingerprint_notes,
    fingerprint_versions,
    restated_at,
)
from worker.phases.contradictions import unsettled
from worker.phases.contradictions.confirm import Confirming
from worker.phases.contradictions.core import (
    JUDGEMENT_KIND,
    PHASE,
    Action,
    CandidatePair,
    Decision,
    PolicySettings,
    Relation,
    Verdict,
    flagged_comment,
    resolved_comment,
    restates,
)
from worker.phases.contradictions.sameness import Consistency, usable_reason
from worker.phases.contradictions.topics import (
    TopicVerdict,
    follow_retirements,
    independent_pairs,
)
from worker.phases.contradictions.values import topic_decisions
from worker.phases.kit import (
    Change,
    ChangeKind,
    ItemResult,
    ItemStatus,
    Member,
    PhaseWrite,
    RunJournal,
    WriteTarget,
    open_write,
    supersede,
)
from worker.phases.kit.carry import keep_current, known, written
from worker.phases.kit.evaluate import Gate, GuardLimits
from worker.review.changes import contradiction_change
from worker.review.propose import Proposals
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep
from worker.safety.crashpoints import crashpoint
from worker.safety.injection import injection_signals
from worker.store.repositories.judgements import PENDING_RETIREMENT

REVIEW_KIND = CONTRADICTION_REVIEW_KIND
REVIEW_FLAG = CONTRADICTION_REVIEW_FLAG
LINEAGE = {"conflict": "superseded", "equivalent": "duplicate", "subsumed": "subsumed"}


def policy_settings(ctx: PhaseContext) -> PolicySettings:
    s = ctx.settings.contradictions
    return PolicySettings(s.min_confidence, s.newer_wins_days, s.high_importance, now=ctx.now,
                          skew=SKEW)


def reads_like_instructions(note: Note) -> bool:
    """Flagged as an injection, or its text reads like instructions to the model (R14)."""
    return any(f.startswith("injection") for f in note.flags) or bool(
        injection_signals(note.content))


def suspicious_notes(notes: dict[str, Note], pairs: list[CandidatePair]) -> frozenset[str]:
    return frozenset(nid for p in pairs for nid in p.ids if reads_like_instructions(notes[nid]))


@dataclass
class _Planned:
    """A revoke or flag decided during the phase, waiting for the write."""

    verdict: Verdict
    decision: Decision
    entry: dict[str, Any]
    changes: list[Change] = field(default_factory=list)


class Applier:
    """Decides what each verdict does and keeps what this run retired; ``finish`` writes it.

    With ``limits`` the blast-radius guard is asked as each revocation is decided (the same
    limits the write checks with), so a held-back loser is known while the topics re-plan.
    """

    def __init__(self, ctx: PhaseContext, parent_step_id: str, notes: dict[str, Note],
                 counters: Any, limits: GuardLimits | None = None,
                 journal: RunJournal | None = None, proposals: Proposals | None = None,
                 apart: set[frozenset[str]] | None = None) -> None:
        self.ctx, self.parent_step_id, self.notes, self.counters = ctx, parent_step_id, notes, counters
        # Pairs no answer may join into one attribute: those judged independent at their
        # versions (before, or by this run: no active note changes version within it), and
        # those a host kept apart or a reviewer declined to join.
        self.apart = set(apart or ())
        self.consistency = Consistency(notes, self.apart, counters)
        # Review before apply: decisions the apply mode holds back become review items.
        self.proposals = proposals if proposals is not None and proposals.active else None
        self.by_rule = ctx.app.llm is None
        self.policy = policy_settings(ctx)
        self.gate = Gate(limits) if limits is not None else None
        self.journal = journal
        self.retired: set[str] = set()
        self.retired_into: dict[str, str] = {}
        self.remember: dict[tuple[str, str], Verdict] = {}
        self.unsettled: set[tuple[str, str]] = set()  # pairs an answer settled nothing about
        self.guard_reason: str | None = None
        self.guarded: list[str] = []
        # Revocations the guard refused: kept for the next run, which applies them unasked.
        self.held_back: list[tuple[Verdict, Decision]] = []
        self.held_into: dict[str, str] = {}
        self.planned: list[_Planned] = []
        # Retirements only asking the scope whole found, waiting to be asked alone.
        self.confirming = Confirming(ctx.settings.contradictions.confirm_whole, counters)

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
            applied += entry["action"] == Action.REVOKE
        self.counters["retirements_applied_unasked"] = applied
        active = {k: n for k, n in self.notes.items() if k not in self.retired}
        return follow_retirements(pairs, self.decided_into(), set(), active)

    def apply_topic(self, verdict: TopicVerdict) -> list[dict[str, Any]]:
        """Every decision the topic's answer implies, in order; unmentioned pairs remembered."""
        suspicious = suspicious_notes(self.notes, list(verdict.topic.pairs))
        covered: set[tuple[str, str]] = set()
        consistent, entries = self.consistency.consistent(verdict)
        for pd in topic_decisions(consistent, self.notes, self.policy, suspicious):
            covered.add(pd.verdict.pair.ids)
            if (held := self.confirming.hold(verdict.topic, pd, self.notes)) is not None:
                entries.append(held)
                continue
            # The entry itself, not a copy: the write completes it (a loser found stale).
            entry = self.apply(pd.verdict, pd.decision, {
                "a": pd.verdict.pair.a_id, "b": pd.verdict.pair.b_id,
                "relation": pd.verdict.relation})
            entries.append(entry)
        self.confirming.again(verdict.topic, entries)
        # A pair of one attribute no decision covers: not asked by every run (``unsettled``).
        self.unsettled.update(p.ids for p in unsettled.left_open(
            verdict, consistent, self.consistency.refused, self.policy, covered, self.retired))
        for p in independent_pairs(verdict):
            if p.ids not in covered and not (set(p.ids) & self.retired):
                self.remember.setdefault(p.ids, Verdict(p, Relation.INDEPENDENT, 1.0,
                                                        "not one attribute's values"))
                self.apart.add(frozenset(p.ids))
        self.counters["pairs_judged"] += len(verdict.topic.pairs)
        return entries

    def apply(self, verdict: Verdict, decision: Decision,
              head: dict[str, Any] | None = None) -> dict[str, Any]:
        """Decide now what ``decision`` does; the returned entry (``head`` first) is completed
        by ``finish`` (a revocation found stale or guarded in the write says so there)."""
        a, b = self.notes[verdict.pair.a_id], self.notes[verdict.pair.b_id]
        entry: dict[str, Any] = {**(head or {}), "action": decision.action, "kind": decision.kind}
        if decision.winner_id:
            entry["winner"] = decision.winner_id
        if decision.why:
            entry["why"] = decision.why
        if a.id in self.retired or b.id in self.retired:
            # Planning never asks about a retired note; were one to slip through, it is counted.
            self.counters["verdicts_wasted"] += 1
            entry.update(action=Action.SKIPPED,
                         why="a note of the pair was already retired in this run")
            return entry
        if decision.action == Action.NONE:
            self.remember[verdict.pair.ids] = verdict
            return entry
        if decision.action == Action.REVOKE and self.guard_reason is not None:
            self._hold_back(verdict, decision)
            entry["action"] = Action.GUARDED
            return entry
        if self.proposals is not None and self.proposals.wants(
                settled_by_rule=self.by_rule, confidence=verdict.confidence):
            return self._propose(verdict, decision, a, b, entry)
        if decision.action == Action.REVOKE and self._refused(decision):
            self._hold_back(verdict, decision)
            entry["action"] = Action.GUARDED
            return entry
        if self.ctx.dry_run:
            entry["dry_run"] = True
        planned = _Planned(verdict, decision, entry, self._changes(verdict, decision, a, b))
        self.planned.append(planned)
        self._count(planned, +1)
        self._restated(planned)
        return entry

    def _propose(self, verdict: Verdict, decision: Decision, a: Note, b: Note,
                 entry: dict[str, Any]) -> dict[str, Any]:
        """Recorded for review, not applied; a proposed loser's other pairs go to its winner,
        as they would after the revocation."""
        assert self.proposals is not None
        self.proposals.add(contradiction_change(verdict, decision, a, b))
        if decision.action == Action.REVOKE and decision.loser_id and decision.winner_id:
            self.held_into.setdefault(decision.loser_id, decision.winner_id)
        self.counters["changes_proposed"] = self.counters.get("changes_proposed", 0) + 1
        entry["action"] = "proposed"
        return entry

    def _refused(self, decision: Decision) -> bool:
        if self.gate is None or self.ctx.dry_run:
            return False
        assert decision.loser_id is not None
        loser = self.notes[decision.loser_id]
        self.guard_reason = self.gate.check([loser.id], [loser.protection])
        return self.guard_reason is not None

    def _changes(self, verdict: Verdict, decision: Decision, a: Note, b: Note) -> list[Change]:
        if decision.action == Action.REVOKE:
            assert decision.winner_id is not None and decision.loser_id is not None
            winner, loser = self.notes[decision.winner_id], self.notes[decision.loser_id]
            assert winner.created_at is not None
            # The model's reason is kept only as a plain, short reason; else the policy's.
            reason = usable_reason(verdict.reason, decision.why or "no usable reason given")
            return [supersede(
                f"{loser.id}->{winner.id}", [loser], into=winner,
                relation=LINEAGE[decision.kind], reason=f"contradictions.{decision.kind}",
                comment=resolved_comment(winner.id, decision.kind, reason), append_comment=True,
                # The losing fact stopped being true once the conflicting one was recorded:
                # the winner's creation (never before the loser's own).
                valid_to=winner.created_at if decision.kind == "conflict" else None,
                confidence=verdict.confidence, detail={"relation": verdict.relation},
                # One fact said twice: the note kept holds it as of its later statement (a
                # fuller older note dated at its first would lose to any value between), and
                # for as long as either would have lived (a conflict's loser is outdated).
                restate=restates(decision.kind, winner, loser, self.policy),
                extend_expiry=decision.kind != "conflict")]
        reason = f"{decision.why}. {usable_reason(verdict.reason, '')}".strip(" .")
        # Both kept: a comment and a flag on each, each checked against the other's version too.
        return [Change(kind=ChangeKind.ANNOTATE, name=f"flag {note.id}",
                       members=(Member(note.id, note.version),),
                       keep=(Member(other.id, other.version),), flags=(REVIEW_FLAG,),
                       comment=flagged_comment(other.id, reason), reason="contradictions.flagged",
                       confidence=verdict.confidence)
                for note, other in ((a, b), (b, a))]

    def _restated(self, p: _Planned) -> None:
        """The kept note as the write will date it (``Change.restate``), for this run's later
        decisions."""
        for c in p.changes:
            if not c.restate or c.into_id is None:
                continue
            into = self.notes[c.into_id]
            said = restated_at((into.created_at, into.write_seq),
                               [(n.created_at, n.write_seq) for n in
                                (self.notes[m.id] for m in c.members)], into.protection)
            if said is not None:
                self.notes[c.into_id] = replace(into, created_at=said[0], write_seq=said[1])

    def _count(self, p: _Planned, sign: int) -> None:
        d = p.decision
        if d.action == Action.REVOKE:
            assert d.loser_id is not None and d.winner_id is not None
            if sign > 0:
                self.retired.add(d.loser_id)
                self.retired_into[d.loser_id] = d.winner_id
            else:
                self.retired.discard(d.loser_id)
                self.retired_into.pop(d.loser_id, None)
            key = "conflicts_resolved" if d.kind == "conflict" else "equivalents_merged"
        else:
            key = "conflicts_flagged"
        self.counters[key] += sign

    def _hold_back(self, verdict: Verdict, decision: Decision) -> None:
        assert decision.loser_id is not None and decision.winner_id is not None
        self.guarded.append(decision.loser_id)
        if self.gate is not None:
            self.gate.want([decision.loser_id])
        if decision.loser_id in self.held_into:
            return  # a loser is held back into one winner: the first decided
        self.held_back.append((verdict, decision))
        self.held_into[decision.loser_id] = decision.winner_id

    def finish(self, steps: Callable[[], Sequence[ChildStep]] | None = None) -> None:
        """The phase's one write: every planned revoke and flag (stale ones skipped, each
        entry completed), the guard's trip and what it held back, every settled pair
        remembered at the notes' current versions, then ``steps()``."""
        changes = [c for p in self.planned for c in p.changes]
        pending_ids = {i for ids in (*self.remember, *self.unsettled) for i in ids}
        pending_ids |= {i for v, _ in self.held_back for i in v.pair.ids}
        with open_write(WriteTarget.of(self.ctx, PHASE, self.parent_step_id)) as w:
            applied = w.apply(changes, journal=self.journal, also=sorted(pending_ids),
                              known=known(self.ctx))
            results = iter(applied)
            for p in self.planned:
                self._settle(w, p, [next(results) for _ in p.changes])
            if self.guard_reason is not None:
                if self.gate is not None and self.gate.tripped is not None:
                    self.guard_reason = self.gate.final() or self.guard_reason  # every loser held back
                self.counters["pairs_guarded"] = len(self.guarded)
                self.counters["notes_held"] = len(set(self.guarded))
                w.trip(self.guard_reason, self.guarded)
            self._remember_all(w)
            for step in steps() if steps is not None else ():
                w.step(step)
            done = written(w, applied)
        keep_current(self.ctx, done)  # committed: the run's carried scope follows

    def _settle(self, w: PhaseWrite, p: _Planned, results: list[ItemResult]) -> None:
        if all(r.applied for r in results):
            if results and results[0].status == ItemStatus.DRY_RUN:
                return
            a, b = (self.notes[i] for i in p.verdict.pair.ids)
            if p.decision.action == Action.REVOKE:
                crashpoint("contradictions.after_revoke")  # inside the one write (R9)
                assert p.decision.loser_id is not None
                self.notes[p.decision.loser_id].status = NoteStatus.REVOKED.value
            else:
                reason = f"{p.decision.why}. {usable_reason(p.verdict.reason, '')}".strip(" .")
                w.review(REVIEW_KIND, [a.id, b.id], reason)
                for n in (a, b):
                    n.flags = sorted(set(n.flags) | {REVIEW_FLAG})
            # Remembered at the versions judged (a flag keeps them), so no later run asks again.
            w.judgement(JUDGEMENT_KIND, fingerprint_notes([a, b]), [a.id, b.id],
                        p.verdict.relation, p.verdict.reason)
            return
        self._count(p, -1)
        guarded = next((r for r in results if r.status == ItemStatus.GUARDED), None)
        if guarded is not None:  # no guard while planning (an approval): the write's says no
            self.guard_reason = self.guard_reason or guarded.reason
            self._hold_back(p.verdict, p.decision)
            p.entry["action"] = Action.GUARDED
            return
        p.entry["action"] = Action.STALE
        self.counters["pairs_skipped_stale"] += 1

    def _remember_all(self, w: PhaseWrite) -> None:
        """Held-back retirements and settled pairs, each at the versions the write leaves,
        while both notes are still active."""
        for v, d in self.held_back:
            assert d.loser_id is not None and d.winner_id is not None
            if {d.loser_id, d.winner_id} & self.retired:
                continue
            pair = self._at_current(w, [d.loser_id, d.winner_id])
            if pair is not None:
                w.judgement(PENDING_RETIREMENT, fingerprint_versions(pair),
                            [d.loser_id, d.winner_id],
                            d.kind, v.reason or d.why, ordered=True)
        for ids, v in self.remember.items():
            if set(ids) & self.retired:
                continue
            pair = self._at_current(w, list(ids))
            if pair is not None:
                w.judgement(JUDGEMENT_KIND, fingerprint_versions(pair), list(ids), v.relation,
                            v.reason)
        self._remember_unsettled(w)

    def _remember_unsettled(self, w: PhaseWrite) -> None:
        """Unsettled pairs, no note retired or a loser, at the versions the write leaves."""
        if unsettled.hours(self.ctx.settings) <= 0 or not self.unsettled:
            return
        model, gone = unsettled.model_of(self.ctx.app), self.retired | set(self.decided_into())
        left = [(ids, pair) for ids in sorted(self.unsettled - set(self.remember))
                if not gone & set(ids) and (pair := self._at_current(w, list(ids)))]
        for ids, pair in left:
            w.judgement(unsettled.KIND, unsettled.key(fingerprint_versions(pair), model),
                        list(ids), unsettled.VERDICT, unsettled.WHY)
        self.counters["pairs_unsettled"] = len(left) or None

    @staticmethod
    def _at_current(w: PhaseWrite, ids: list[str]) -> list[tuple[str, int]] | None:
        """(id, version) of each note as the write leaves it; None when one is not active."""
        out = []
        for i in ids:
            version = w.active_at(i)
            if version is None:
                return None
            out.append((i, version))
        return out
