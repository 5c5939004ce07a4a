"""The four phases, each a plain function ``run(ctx, parent_step_id) -> PhaseReport``."""

from __future__ import annotations

from collections.abc import Callable

from worker.domain.types import PhaseReport
from worker.runs.context import PhaseContext

PhaseFn = Callable[[PhaseContext, str], PhaseReport]


def phase_registry() -> dict[str, PhaseFn]:
    from worker.phases.archive.service import run_archive
    from worker.phases.consolidate.service import run_consolidate
    from worker.phases.contradictions.service import run_contradictions
    from worker.phases.prune.service import run_prune

    return {
        "consolidate": run_consolidate,
        "contradictions": run_contradictions,
        "prune": run_prune,
        "archive": run_archive,
    }
