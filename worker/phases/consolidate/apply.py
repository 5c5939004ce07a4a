"""Applying decisions: one short transaction per cluster — insert the fused note, revoke its
sources, record lineage and the step — or record why a cluster was not merged."""

from __future__ import annotations

from typing import Any

from worker.domain.types import StepStatus, content_hash
from worker.phases.consolidate.core import fused_fields, majority_type, revocation_comment
from worker.phases.consolidate.decision import KEEP_SEPARATE, KIND, PHASE, Decision
from worker.runs.context import PhaseContext
from worker.safety.crashpoints import crashpoint
from worker.safety.guard import check_retire, record_trip


# ---- applying -----------------------------------------------------------------------------
def apply_all(
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

