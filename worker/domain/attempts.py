"""Pure: which of a run's step rows state what the run did. An attempt that lost the run (its
lease lapsed, an erasure or a signal stopped it) leaves its phase step ``interrupted``; the
attempt that resumed the run planned that phase again and recorded it under a step of its own.
The interrupted step and its children are history: what they judged (an open cluster, a guard
trip) was judged again, so reading them too counts it twice, or states an old attempt's words
as the run's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from worker.domain.types import StepStatus

S = TypeVar("S")


def latest_attempts(steps: Iterable[S]) -> list[S]:
    """``steps`` but the interrupted parent steps and their children, in their order."""
    steps = list(steps)
    history = {_get(s, "id") for s in steps
               if _get(s, "parent_id") is None
               and _get(s, "status") == StepStatus.INTERRUPTED.value}
    return [s for s in steps if (_get(s, "id") if _get(s, "parent_id") is None
                                 else _get(s, "parent_id")) not in history]


def _get(step: Any, key: str) -> Any:
    return step.get(key) if isinstance(step, dict) else getattr(step, key, None)
