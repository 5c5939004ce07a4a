"""Blast-radius guardrail (R20, R23): a run may not retire too much of a scope, nor protected notes.

The rules, as reasons: the phase kit's write asks them (``worker.phases.kit.evaluate``) with what
this run already retired (from its operation log, so it holds across phases and Celery
processes) plus what it proposes, against the scope's active notes at the start of the run. A
refusal names the count; the write holds the change back, records a ``GUARD_STEP`` child step
and a review, and the run ends ``blocked``. Only ``run.allow_retire`` (``--allow-retire N``)
lifts the share, up to N; ``--force`` skips the gate and nothing else. Nothing lifts the
protection.
"""

from __future__ import annotations

from worker.domain.types import Protection

# The operation-log reason of prune archiving a scope whose owner (agent, user, company) is
# recorded disabled or deleted: explicit evidence about the whole scope, outside the share.
OWNER_GONE_REASON = "prune: scope owner recorded gone"
# The child step a tripped write records (``PhaseWrite.trip``); finalize reads it to mark the
# run blocked (R27).
GUARD_STEP = "blast_radius_guard"


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
        f"--allow-retire {total} (and --force to skip the gate); {total} is what the run "
        "planned to retire up to this phase, a later phase may ask for more"
    )
