"""Blast-radius guardrail (R20, R23): a run may not retire too much of a scope, nor protected notes.

Phases call ``check_retire`` inside the apply transaction, just before they revoke or archive
notes. It counts what this run already retired (from the operation log, so it holds across
phases and across Celery processes) plus what is proposed, against the scope's active notes at
the start of the run. A refusal is a reason string naming the count: the phase rolls back that
change, calls ``record_trip`` and stops retiring, and the run ends ``blocked``. Only
``run.allow_retire`` (``--allow-retire N``) lifts the share, up to N; ``--force`` skips the gate
and nothing else. Nothing lifts the protection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog

from worker.domain.types import Note, Protection, StepStatus
from worker.runs.context import PhaseContext
from worker.runs.steps import ChildStep
from worker.store.uow import UnitOfWork

log = structlog.get_logger(__name__)


# The operation-log reason of prune archiving a scope whose owner (agent, user, company) is
# recorded disabled or deleted: explicit evidence about the whole scope, outside the share.
OWNER_GONE_REASON = "prune: scope owner recorded gone"
# The child step ``record_trip`` writes; finalize reads it to mark the run blocked (R27).
GUARD_STEP = "blast_radius_guard"


class GuardTripped(Exception):
    """Raised by ``ensure_retire``; the message is the recorded reason (ids, counts; no text)."""


def protection_refusal(note_id: str, protection: str, allow_protected: bool = False) -> str | None:
    """Why maintenance may not retire this note (R23), or None."""
    if protection == Protection.IMMUTABLE.value:
        return f"note {note_id} is immutable; maintenance never retires it"
    if protection == Protection.PROTECTED.value and not allow_protected:
        return f"note {note_id} is protected; maintenance never retires it"
    return None


def share_refusal(total: int, baseline: int, max_share: float, min_scope_size: int,
                  allowed: int | None) -> str | None:
    """Why a run may not have retired ``total`` of ``baseline`` active notes (R20), or None."""
    if baseline < min_scope_size or total <= max_share * baseline:
        return None
    if allowed is not None and total <= allowed:
        return None
    over = f"; --allow-retire {allowed} is not enough" if allowed is not None else ""
    return (
        f"blast-radius guard: would retire {total} of {baseline} active notes "
        f"(limit {max_share:.0%}){over}; if this is intended, re-run with "
        f"--allow-retire {total} (and --force to skip the gate)"
    )


def check_retire(
    uow: UnitOfWork, ctx: PhaseContext, notes: Sequence[Note | Any], *, allow_protected: bool = False,
) -> str | None:
    """None if retiring ``notes`` now is allowed, else the reason it is not.

    ``notes`` are Notes or any objects with ``id`` (and ``protection`` when known).
    ``allow_protected`` is for the one rule that may archive a protected note (archive after
    ``archive.protected_inactive_days`` without access); immutable notes are never allowed.
    """
    for note in notes:
        protection = getattr(note, "protection", Protection.STANDARD.value)
        refusal = protection_refusal(note.id, protection, allow_protected)
        if refusal is not None:
            return refusal
    if not notes:
        return None
    settings = ctx.settings.guard
    already = uow.safety.retired_by_run(ctx.run_id, except_reason=OWNER_GONE_REASON)
    proposed = {n.id for n in notes} - already
    baseline = _baseline(uow, ctx, len(already))
    return share_refusal(len(already) + len(proposed), baseline, settings.max_retire_share,
                         settings.min_scope_size, ctx.allow_retire)


def ensure_retire(
    uow: UnitOfWork, ctx: PhaseContext, notes: Sequence[Note], *, allow_protected: bool = False,
) -> None:
    """``check_retire`` that raises ``GuardTripped`` instead of returning the reason."""
    reason = check_retire(uow, ctx, notes, allow_protected=allow_protected)
    if reason is not None:
        raise GuardTripped(reason)


def _baseline(uow: UnitOfWork, ctx: PhaseContext, already: int) -> int:
    before = ctx.notes_before  # the engine's snapshot: no read of the run here
    if before is None:
        run = uow.runs.get(ctx.run_id)
        before = ((run.totals or {}).get("notes_before") or {}) if run is not None else {}
    if "active" in before:
        return int(before["active"])
    # No snapshot (a phase executed on its own): what is active now plus what this run retired.
    return uow.safety.active_count(ctx.scope.key) + already


def record_trip(ctx: PhaseContext, parent_step_id: str, phase: str, reason: str,
                note_ids: Sequence[str] = ()) -> None:
    """Record why the guard stopped a phase: a skipped child step and an open review."""
    with ctx.uow() as uow:
        ctx.steps.child(uow, parent_step_id, phase, ChildStep(
            name=GUARD_STEP, status=StepStatus.SKIPPED.value,
            input={"note_ids": list(note_ids)}, output={"reason": reason, "guard": True},
        ))
        uow.judgements.add_review(ctx.scope, kind="blast_radius", note_ids=list(note_ids),
                                  reason=reason, run_id=ctx.run_id, now=ctx.now)
        uow.commit()
    log.warning("guard.tripped", run_id=ctx.run_id, scope=ctx.scope.key, phase=phase,
                notes=len(note_ids))
