"""The consolidate phase service (placeholder until the phase lands: records a no_items step)."""

from __future__ import annotations

from worker.domain.types import PhaseReport, StepStatus
from worker.runs.context import PhaseContext


def run_consolidate(ctx: PhaseContext, parent_step_id: str) -> PhaseReport:
    return PhaseReport(phase="consolidate", status=StepStatus.NO_ITEMS.value, reason="not implemented yet")
