"""The contradictions phase service (placeholder until the phase lands: records a no_items step)."""

from __future__ import annotations

from worker.domain.types import PhaseReport, StepStatus
from worker.runs.context import PhaseContext


def run_contradictions(ctx: PhaseContext, parent_step_id: str) -> PhaseReport:
    return PhaseReport(phase="contradictions", status=StepStatus.NO_ITEMS.value, reason="not implemented yet")
