"""The consolidate phase: short read → clusters → judge (model or rules, no transaction open) →
one short transaction per cluster → steps."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog

from worker.domain.types import (
    Note,
    PhaseReport,
    Scope,
    StepStatus,
    content_hash,
    fingerprint_notes,
)
from worker.llm.ask import AskStatus, Outcome, ReplyRejected, ask
from worker.llm.prompts import render_prompt, template_hash
from worker.llm.rules import rule_groups
from worker.phases.consolidate.core import (
    PROMPT_NAME,
    RELATIVE_TIME,
    FusionReply,
    PlannedCluster,
    fused_fields,
    majority_type,
    plan_clusters,
    prompt_context,
    revocation_comment,
    validate_fusion,
)
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep
from worker.safety.crashpoints import crashpoint
from worker.safety.guard import check_retire, record_trip
from worker.safety.injection import injection_signals
from worker.similarity import neighbour_pairs
from worker.telemetry import in_current_trace
from worker.text.temporal import relative_time_expressions

log = structlog.get_logger(__name__)

PHASE = "consolidate"
KIND = "cluster"  # verdict memory: judgements of kind "cluster", verdict "keep_separate"
KEEP_SEPARATE = "keep_separate"
HOST_KEEP_APART = "keep_apart"  # the host's own "do not fuse" verdicts (host API)
INJECTION_FLAG = "injection"
COUNTERS = (
    "notes_scanned", "clusters_found", "clusters_merged", "clusters_refused",
    "clusters_skipped_stale", "clusters_invalid", "notes_revoked", "tokens_in", "tokens_out",
    "clusters_known_refused", "clusters_deferred", "clusters_open", "notes_flagged", "leftovers",
    "relative_time_reasks", "clusters_relative_time_refused", "omission_warnings",
)


@dataclass
class Decision:
    """One question about one group of notes, and the answer it got."""

    name: str
    cluster: PlannedCluster
    members: list[Note]  # what is revoked on merge
    sources: list[Note]  # what the judge saw (originals in place of over-consolidated members)
    verdict: str = "open"  # merge | refused | invalid | deferred | known_refused | open
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


def run_consolidate(ctx: PhaseContext, parent_step_id: str) -> PhaseReport:
    settings = ctx.settings.consolidate
    llm = ctx.app.llm
    counters: dict[str, Any] = dict.fromkeys(COUNTERS, 0)
    counters["judge"] = "llm" if llm is not None else "rules"
    with ctx.uow() as uow:
        snap = uow.notes.load_scope(ctx.scope)
        produced = uow.notes.inserted_by_run(ctx.run_id, ctx.scope)
    # R3: a retried attempt plans exactly what a crash-free run would have planned after the
    # merges the interrupted attempt committed; the notes those merges inserted are this run's
    # output, never its input (a crash-free run could not have merged them again).
    held_out = len(snap.notes)
    snap = snap.without(produced)
    held_out -= len(snap.notes)
    notes = snap.notes
    counters["notes_scanned"] = len(notes)
    if held_out:
        counters["notes_skipped_same_run"] = held_out
    flagged = _flag_injections(ctx, notes)
    counters["notes_flagged"] = len(flagged)
    if flagged:
        counters["flagged_ids"] = flagged
    if len(notes) < 2 or snap.vectors.shape[1] == 0:
        return PhaseReport(PHASE, StepStatus.NO_ITEMS.value, counters)

    pairs = neighbour_pairs(snap.vectors, settings.threshold, ctx.settings.ann_threshold)
    # The rule judge settles pairs too (identical notes); a model is only asked about clusters.
    min_size = settings.min_cluster_size if llm is not None else 2
    plan = plan_clusters(notes, snap.vectors, pairs, settings.threshold, min_size,
                         settings.max_cluster_size)
    counters["clusters_found"] = len(plan.clusters)
    counters["leftovers"] = len(plan.leftovers)
    if plan.leftovers:
        counters["leftover_ids"] = [notes[i].id for i in plan.leftovers][:100]
    if not plan.clusters:
        return PhaseReport(PHASE, StepStatus.NO_ITEMS.value, counters)

    clusters = [(f"cluster {k + 1}", c, [notes[i] for i in c.members])
                for k, c in enumerate(plan.clusters)]
    if llm is not None:
        decisions = _judge_with_model(ctx, clusters, counters)
        _apply_all(ctx, parent_step_id, decisions, counters)
    else:
        _judge_and_apply_with_rules(ctx, parent_step_id, clusters, snap, counters)
    report = PhaseReport(PHASE, StepStatus.SUCCEEDED.value, counters,
                         tokens_in=counters["tokens_in"], tokens_out=counters["tokens_out"],
                         calls=counters.get("calls", 0))
    log.info("consolidate.finished", run_id=ctx.run_id, scope=ctx.scope.key,
             **{k: v for k, v in counters.items() if isinstance(v, int)})
    return report


# ---- injection ----------------------------------------------------------------------------
def _flag_injections(ctx: PhaseContext, notes: list[Note]) -> list[str]:
    """Notes whose text reads like instructions never join a cluster; flag them once (R14)."""
    suspects = [n for n in notes if n.retirable and injection_signals(n.content)]
    to_write = [n for n in suspects if INJECTION_FLAG not in n.flags]
    for n in to_write:
        n.flags = [*n.flags, INJECTION_FLAG]  # excluded from clustering even in a dry run
    if to_write and not ctx.dry_run:
        with ctx.uow() as uow:
            uow.check_lease(ctx.run_id, ctx.epoch)
            for n in to_write:
                # A note the host just changed keeps its own flags; it is still excluded here.
                uow.notes.change(n, run_id=ctx.run_id, reason="instruction-like text",
                                 now=ctx.now, flags=list(n.flags))
            uow.commit()
    if suspects:
        log.warning("consolidate.injection_flagged", run_id=ctx.run_id, scope=ctx.scope.key,
                    count=len(suspects))
    return [n.id for n in suspects]


# ---- model judging ------------------------------------------------------------------------
def _judge_with_model(
    ctx: PhaseContext, clusters: list[tuple[str, PlannedCluster, list[Note]]],
    counters: dict[str, Any],
) -> list[Decision]:
    settings = ctx.settings.consolidate
    decisions = []
    with ctx.uow() as uow:
        originals = _original_sources(uow, [n for _, _, ms in clusters for n in ms],
                                      settings.max_generation)
        fps = [fingerprint_notes(ms) for _, _, ms in clusters]
        known = uow.judgements.known(ctx.scope, KIND, fps)
        known |= uow.judgements.known(ctx.scope, HOST_KEEP_APART, fps)
    for name, cluster, members in clusters:
        sources: list[Note] = []
        for m in members:
            sources.extend(originals.get(m.id, [m]))
        decisions.append(Decision(name, cluster, members, _unique(sources)))
    to_ask = []
    for d in decisions:
        if d.fingerprint in known:
            d.verdict, d.reason = "known_refused", "judged before at these versions; not asked again"
        else:
            to_ask.append(d)
    llm = ctx.app.llm
    assert llm is not None
    # The phase's own wall budget: questions not started by then are deferred, not failed.
    deadline = time.monotonic() + ctx.settings.llm_phase_seconds

    def one(d: Decision) -> None:
        # Redaction and invisible-character stripping happen at the boundary (worker.privacy).
        prompt = render_prompt(PROMPT_NAME, prompt_context(d.sources, ctx.now, settings.max_chars))
        d.template_hash = prompt.template_hash
        aliases = [f"n{k + 1}" for k in range(len(d.sources))]
        warnings: list[str] = []

        def validate(reply: FusionReply) -> None:
            try:
                warnings[:] = validate_fusion(
                    reply, aliases, d.sources, settings.max_chars, settings.block_on_omission,
                    relative_time_reasked=d.relative_time_rejections > 0)
            except ReplyRejected as exc:
                if exc.code == RELATIVE_TIME:
                    d.relative_time_rejections += 1
                raise

        d.outcome = ask(llm, prompt, FusionReply, validate=validate,
                        reserve=ctx.budget.try_reserve_call, charge=ctx.budget.charge,
                        deadline=deadline)
        o = d.outcome
        if o.ok and o.value is not None:
            d.reason = o.value.reason.strip()[:300]
            if o.value.should_consolidate:
                d.verdict, d.content, d.warnings = "merge", o.value.content.strip(), warnings
            else:
                d.verdict = "refused"
        elif o.status in (AskStatus.BUDGET_EXHAUSTED, AskStatus.ERROR, AskStatus.OUT_OF_TIME):
            d.verdict, d.reason = "deferred", o.reason
        else:
            d.verdict, d.reason = "invalid", o.reason

    # Model calls run concurrently and with no transaction open (the snapshot read is closed).
    if to_ask:
        workers = min(ctx.settings.llm_concurrency, len(to_ask))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="consolidate-llm") as pool:
            list(pool.map(in_current_trace(one), to_ask))
    for d in to_ask:
        o = d.outcome
        assert o is not None
        counters["tokens_in"] += o.tokens_in
        counters["tokens_out"] += o.tokens_out
        counters["calls"] = counters.get("calls", 0) + o.attempts
        # Counted for the eval: how often a fusion kept relative time, and how often it stayed.
        if d.warnings:
            counters["omission_warnings"] += 1
        if d.relative_time_rejections:
            counters["relative_time_reasks"] += 1
            if d.verdict == "invalid":
                counters["clusters_relative_time_refused"] += 1
    counters["template_hash"] = template_hash(PROMPT_NAME)
    return decisions


def _unique(notes: list[Note]) -> list[Note]:
    seen: dict[str, Note] = {}
    for n in notes:
        seen.setdefault(n.id, n)
    return list(seen.values())


def _original_sources(uow: Any, members: list[Note], max_generation: int) -> dict[str, list[Note]]:
    """Members consolidated ``max_generation`` times, mapped to their original notes (lineage)."""
    capped = [m for m in members if m.consolidation_generation >= max_generation]
    if not capped:
        return {}
    roots: dict[str, list[str]] = {m.id: [m.id] for m in capped}
    for _ in range(max_generation + 5):  # lineage depth is bounded by the generation
        frontier = {i for ids in roots.values() for i in ids}
        parents = uow.notes.lineage_parents(frontier)
        if not parents:
            break
        roots = {m: [p for i in ids for p in parents.get(i, [i])] for m, ids in roots.items()}
    by_id = {n.id: n for n in uow.notes.get_many({i for ids in roots.values() for i in ids})}
    out = {}
    for m in capped:
        found = [by_id[i] for i in dict.fromkeys(roots[m.id]) if i in by_id and i != m.id]
        if found:
            out[m.id] = found
    return out


# ---- rule judging -------------------------------------------------------------------------
def _judge_and_apply_with_rules(
    ctx: PhaseContext, parent_step_id: str, clusters: list[tuple[str, PlannedCluster, list[Note]]],
    snap: Any, counters: dict[str, Any],
) -> None:
    """Rules merge what they settle (text kept verbatim); the rest of each cluster stays open."""
    settings = ctx.settings.consolidate
    row = {n.id: i for i, n in enumerate(snap.notes)}
    vectors = snap.vectors

    def related(a: Note, b: Note) -> bool:
        return float(vectors[row[a.id]] @ vectors[row[b.id]]) >= settings.rule_threshold

    for name, cluster, members in clusters:
        groups, open_ids = rule_groups(members, related)
        by_id = {m.id: m for m in members}
        decisions = []
        for g_index, group in enumerate(groups):
            group_notes = [by_id[i] for i in group.note_ids]
            keep = by_id[group.keep_id]
            if relative_time_expressions(keep.content):
                # The fused note is dated today: "last week" kept verbatim would move a week.
                open_ids = sorted({*open_ids, *group.note_ids})
                counters["rule_groups_relative_time"] = (
                    counters.get("rule_groups_relative_time", 0) + 1)
                continue
            sub = PlannedCluster(sorted(row[i] for i in group.note_ids), cluster.similarity,
                                 cluster.min_similarity)
            d = Decision(f"{name}.{g_index + 1}" if len(groups) > 1 else name, sub, group_notes,
                         group_notes, verdict="merge", content=keep.content, rule=group.rule,
                         reason=f"rule: {group.rule} — kept the text of {keep.id} verbatim")
            decisions.append(d)
        _apply_all(ctx, parent_step_id, decisions, counters)
        remaining = [by_id[i] for i in open_ids]
        for d in decisions:
            if d.new_id is not None:  # merged: the fused note stands for its group
                remaining.append(Note(id=d.new_id, scope=ctx.scope, content=d.content))
            else:  # dry run or stale: the group is still there
                remaining.extend(d.members)
        if len(remaining) >= 2:
            counters["clusters_open"] += 1
            open_decision = Decision(name, cluster, remaining, remaining, verdict="open",
                                     reason="rules cannot settle these; left for a model or the host")
            with ctx.uow() as uow:
                uow.check_lease(ctx.run_id, ctx.epoch)
                ctx.steps.child(uow, parent_step_id, PHASE,
                                open_decision.child(StepStatus.SKIPPED.value))
                uow.commit()


# ---- applying -----------------------------------------------------------------------------
def _apply_all(
    ctx: PhaseContext, parent_step_id: str, decisions: list[Decision], counters: dict[str, Any],
) -> None:
    merges = [d for d in decisions if d.verdict == "merge"]
    vectors = None
    if merges and not ctx.dry_run:
        vectors = ctx.app.embedder.embed([d.content for d in merges])  # one batch, before any transaction opens
    vector_of = {id(d): vectors[k] for k, d in enumerate(merges)} if vectors is not None else {}
    for d in decisions:
        if d.verdict == "merge" and counters.get("guard_tripped"):
            d.verdict, d.reason = "deferred", "blast-radius guard stopped this run's merges"
        if d.verdict == "merge":
            _apply_merge(ctx, parent_step_id, d, vector_of.get(id(d)), counters)
        else:
            _record(ctx, parent_step_id, d, counters)


def _record(ctx: PhaseContext, parent_step_id: str, d: Decision, counters: dict[str, Any]) -> None:
    counter = {"refused": "clusters_refused", "invalid": "clusters_invalid",
               "deferred": "clusters_deferred", "known_refused": "clusters_known_refused",
               "open": "clusters_open"}[d.verdict]
    counters[counter] += 1
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        if d.verdict == "refused" and not ctx.dry_run:
            uow.judgements.record(ctx.scope, KIND, d.fingerprint, [n.id for n in d.members],
                                  KEEP_SEPARATE, d.reason or None, ctx.run_id, ctx.now)
        ctx.steps.child(uow, parent_step_id, PHASE, d.child(StepStatus.SKIPPED.value))
        uow.commit()


def _apply_merge(
    ctx: PhaseContext, parent_step_id: str, d: Decision, vector: Any, counters: dict[str, Any],
) -> None:
    if ctx.dry_run:
        counters["clusters_merged"] += 1
        with ctx.uow() as uow:
            uow.check_lease(ctx.run_id, ctx.epoch)
            ctx.steps.child(uow, parent_step_id, PHASE,
                            d.child(StepStatus.SKIPPED.value, dry_run=True))
            uow.commit()
        return
    embedder = ctx.app.embedder
    fields = fused_fields(d.members, d.sources)
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        # One read of the members' current state serves the freshness check and the
        # operation log's before images (change_many below reuses it).
        state = uow.notes.current_state(n.id for n in d.members)
        stale = [n.id for n in d.members
                 if (state.get(n.id, {}).get("version"), state.get(n.id, {}).get("status"))
                 != (n.version, "active")]
        new_id = None
        guard = None if stale else check_retire(uow, ctx, d.members)  # R20, R23
        if not stale and not guard:
            new_id = uow.notes.create_note(
                scope=ctx.scope, content=d.content, content_hash=content_hash(d.content),
                type=majority_type(d.members), embedding=vector,
                embedding_model=embedder.model_name, run_id=ctx.run_id, now=ctx.now,
                reason=f"consolidated {len(d.members)} notes", **fields,
            )
            crashpoint("consolidate.after_insert")
            uow.notes.add_lineage(ctx.scope, [n.id for n in d.members], new_id, "consolidated",
                                  ctx.run_id, ctx.now)
            comment = revocation_comment(new_id, d.reason)
            changes = {"status": "revoked", "consolidated_into_id": new_id, "comments": comment}
            # One executemany UPDATE (version-guarded) and one operation-log INSERT for the
            # cluster; a note the host changed since the check above fails it all (R10).
            stale = uow.notes.change_many(
                d.members, dict.fromkeys((n.id for n in d.members), changes),
                run_id=ctx.run_id, reason="consolidated", now=ctx.now, current=state)[:1]
            # Same transaction as the inserts above: a crash here commits none of it.
            crashpoint("consolidate.after_half_revocations")
        if not stale and not guard:
            crashpoint("consolidate.before_step")
            d.new_id = new_id
            ctx.steps.child(uow, parent_step_id, PHASE,
                            d.child(StepStatus.SUCCEEDED.value, new_note_id=new_id))
            uow.commit()
            counters["clusters_merged"] += 1
            counters["notes_revoked"] += len(d.members)
            return
        uow.rollback()
    if guard:
        counters["guard_tripped"] = 1
        record_trip(ctx, parent_step_id, PHASE, guard, [n.id for n in d.members])
        d.verdict, d.reason = "deferred", guard
        _record(ctx, parent_step_id, d, counters)
        return
    counters["clusters_skipped_stale"] += 1
    d.verdict = "stale"
    with ctx.uow() as uow:
        uow.check_lease(ctx.run_id, ctx.epoch)
        ctx.steps.child(uow, parent_step_id, PHASE, d.child(
            StepStatus.SKIPPED.value, verdict="stale", stale_ids=stale,
            proposed_reason=d.reason))
        uow.commit()


def open_candidates(app: Any, scope: Scope) -> list[dict[str, Any]]:
    """Clusters the rule judge left open in the scope's latest finished run, still current.

    Each item: {"note_ids", "similarity", "reason", "step_id", "run_id"}. The host API reads the
    same records (child steps of "consolidate" with output verdict "open").
    """
    with app.uow() as uow:
        run = uow.runs.latest_finished(scope)
        if run is None:
            return []
        steps = [s for s in uow.runs.steps(run.id)
                 if s.phase == PHASE and s.parent_id is not None
                 and (s.output or {}).get("verdict") == "open"]
        ids = {i for s in steps for i in s.output.get("note_ids", [])}
        current = uow.notes.versions(ids)
    out = []
    for s in steps:
        note_ids = s.output.get("note_ids", [])
        if all(current.get(i, (0, ""))[1] == "active" for i in note_ids):
            out.append({"note_ids": note_ids, "similarity": s.output.get("similarity"),
                        "reason": s.output.get("reason"), "step_id": s.id, "run_id": run.id})
    return out


# Verdicts of clusters this phase found and did not merge: the notes are alike but not one
# fact, often two values of one attribute, so the contradictions phase takes them as candidates.
UNMERGED = frozenset({"refused", "known_refused", "open", "invalid", "deferred"})


def unmerged_clusters(uow: Any, run_id: str) -> list[list[str]]:
    """Note ids of each cluster this run's consolidate phase refused or left open.

    Read from the run's recorded steps, so a phase running in another process (Celery) sees the
    same hand-off as one in the same process.
    """
    return [list(s.output.get("note_ids", [])) for s in uow.runs.steps(run_id)
            if s.phase == PHASE and s.parent_id is not None
            and (s.output or {}).get("verdict") in UNMERGED]
