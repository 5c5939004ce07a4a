"""Judging clusters with the model: one question per cluster through the one fan-out
(concurrent or batched, no transaction open, replies validated); the rules are consolidate/rules.py."""

from __future__ import annotations

import time
from typing import Any

from worker.domain.types import Note, fingerprint_notes
from worker.llm.ask import DEFERRING, Outcome, ReplyRejected
from worker.llm.fanout import Question, ask_all
from worker.llm.prompts import render_prompt, template_hash
from worker.phases.consolidate.core import (
    PROMPT_NAME,
    RELATIVE_TIME,
    FusionReply,
    PlannedCluster,
    prompt_context,
    validate_fusion,
)
from worker.phases.consolidate.decision import KIND, PHASE, Decision
from worker.phases.kit.snapshot import Memory
from worker.runs.context import PhaseContext


# ---- model judging ------------------------------------------------------------------------
def judge_with_model(
    ctx: PhaseContext, clusters: list[tuple[str, PlannedCluster, list[Note]]],
    counters: dict[str, Any], memory: Memory | None = None,
) -> list[Decision]:
    """``memory``: the scope's verdict memory as the phase loaded it (else read here)."""
    settings = ctx.settings.consolidate
    decisions = []
    with ctx.uow() as uow:
        originals = _original_sources(uow, [n for _, _, ms in clusters for n in ms],
                                      settings.max_generation)
        fps = [fingerprint_notes(ms) for _, _, ms in clusters]
        # (A cluster holding notes a host kept apart never gets here: run_consolidate.)
        if memory is not None:
            known = memory.known(KIND, fps)
        else:
            known = set(uow.judgements.known(ctx.scope, KIND, fps))
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
    # The phase's own wall budget: questions not started by then are deferred, not failed.
    deadline = time.monotonic() + ctx.settings.llm_phase_seconds
    # Redaction and invisible-character stripping happen at the boundary (worker.privacy).
    questions = [_question(ctx, d) for d in to_ask]
    # One fan-out: concurrent, cached, validated, with no transaction open (the read is closed).
    outcomes = ask_all(ctx, questions, deadline=deadline, phase=PHASE) if to_ask else []
    for d, o in zip(to_ask, outcomes, strict=True):
        _settle(d, o)
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


def _question(ctx: PhaseContext, d: Decision) -> Question[FusionReply]:
    settings = ctx.settings.consolidate
    prompt = render_prompt(PROMPT_NAME, prompt_context(d.sources, ctx.now, settings.max_chars))
    d.template_hash = prompt.template_hash
    aliases = [f"n{k + 1}" for k in range(len(d.sources))]

    def validate(reply: FusionReply) -> None:
        try:
            d.warnings = validate_fusion(
                reply, aliases, d.sources, settings.max_chars, settings.block_on_omission,
                relative_time_reasked=d.relative_time_rejections > 0)
        except ReplyRejected as exc:
            if exc.code == RELATIVE_TIME:
                d.relative_time_rejections += 1
            raise

    return Question(prompt, FusionReply, validate,
                    about=tuple((n.id, n.version) for n in d.members))


def _settle(d: Decision, o: Outcome[FusionReply]) -> None:
    """The cluster's verdict from its answer: merge, refused, deferred (ask again next run) or
    invalid (the model's replies could not be used)."""
    d.outcome = o
    if o.ok and o.value is not None:
        d.reason = o.value.reason.strip()[:300]
        if o.value.should_consolidate:
            d.verdict, d.content = "merge", o.value.content.strip()
        else:
            d.verdict, d.warnings = "refused", []
    elif o.status in DEFERRING:
        d.verdict, d.reason, d.warnings = "deferred", o.reason, []
    else:
        d.verdict, d.reason, d.warnings = "invalid", o.reason, []


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
