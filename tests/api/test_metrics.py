"""Every surface that reports a run's model calls and tokens (/metrics, the dashboard's trends,
the run's totals and ``dream runs show``) counts each call once, on SQLite and PostgreSQL:
calls only the parent step records (a batch submission, a phase that failed) as much as calls a
child step names, never a parent's usage and its children's twice."""

from __future__ import annotations

from typing import Any

from tests.support.factories import add_notes
from worker.api.metrics import collect, render
from worker.app import App
from worker.domain.types import PHASES, PhaseReport, Scope, StepStatus
from worker.phases.kit import WriteTarget, open_write
from worker.reporting import render_tree, run_tree, trends
from worker.runs import service
from worker.runs.context import PhaseContext, Registry
from worker.runs.outcome import PhaseOutcome
from worker.runs.steps import ChildStep
from worker.store.repositories.dashboard import ScopeFilter

SCOPE = Scope("agent-1")


def _call(ctx: PhaseContext, tokens: tuple[int, int] | None) -> None:
    """One model call on the run's budget, as the fan-out makes it: reserved, then charged
    with the reply's tokens (None: no reply yet, a batch still pending)."""
    assert ctx.budget.try_reserve_call()
    if tokens is not None:
        ctx.budget.charge(*tokens)


def _registry() -> Registry:
    """consolidate submits a batch of 2 calls (no child step) and finishes on its replies
    (80/20 tokens); contradictions makes 1 call (25/5) and fails; prune makes 1 call (8/2)
    that its child step names; archive asks nothing."""
    executions = iter([0, 1])

    def consolidate(ctx: PhaseContext, step_id: str) -> PhaseReport:
        if next(executions) == 0:
            _call(ctx, None)
            _call(ctx, None)
            return PhaseReport("consolidate", PhaseOutcome.WAITING.value, {"retry_after": 0.01},
                               reason="waiting on batch b-1")
        ctx.budget.charge(40, 10)
        ctx.budget.charge(40, 10)
        return PhaseReport("consolidate", StepStatus.SUCCEEDED.value, tokens_in=80,
                           tokens_out=20, calls=2)

    def contradictions(ctx: PhaseContext, step_id: str) -> PhaseReport:
        _call(ctx, (25, 5))
        raise RuntimeError("the phase broke after its call")

    def prune(ctx: PhaseContext, step_id: str) -> PhaseReport:
        _call(ctx, (8, 2))
        with open_write(WriteTarget.of(ctx, "prune", step_id)) as w:
            w.step(ChildStep(name="model", status=StepStatus.SUCCEEDED.value,
                             model="stub-model", tokens_in=8, tokens_out=2))
        return PhaseReport("prune", StepStatus.SUCCEEDED.value, tokens_in=8, tokens_out=2,
                           calls=1)

    def quiet(ctx: PhaseContext, step_id: str) -> PhaseReport:
        return PhaseReport("archive", StepStatus.NO_ITEMS.value)

    return {**dict.fromkeys(PHASES, quiet), "consolidate": consolidate,
            "contradictions": contradictions, "prune": prune}


def _sample(text: str, name: str, **labels: str) -> float:
    label = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    line = next(x for x in text.splitlines() if x.startswith(f"{name}{{{label}}} "))
    return float(line.split()[-1])


def test_every_call_is_counted_once_on_every_surface(app: App) -> None:
    """Per phase, /metrics counts consolidate's 2 batch calls and contradictions' failed call
    (before: 0 each, only child steps naming a model were counted, so only prune's 1) and
    prune's call once though its parent and its child both record it; tokens by direction
    likewise (before: the failed phase's 25/5 were missing from the step and every surface).
    The dashboard's trend, the run's totals and ``runs show`` say the same 4 calls, 113/27."""
    add_notes(app, {"content": "a note"})
    run_id = service.create_run(app, SCOPE, force=True)
    assert run_id is not None
    service.execute_run(app, run_id, _registry())
    text = render(collect(app, None))
    expected: dict[str, Any] = {"consolidate": (2, 80, 20), "contradictions": (1, 25, 5),
                                "prune": (1, 8, 2), "archive": (0, 0, 0)}
    for phase, (calls, tokens_in, tokens_out) in expected.items():
        assert _sample(text, "dream_model_calls_total", phase=phase) == calls, phase
        assert _sample(text, "dream_model_tokens_total", phase=phase, direction="in") \
            == tokens_in, phase
        assert _sample(text, "dream_model_tokens_total", phase=phase, direction="out") \
            == tokens_out, phase
    trend = trends(app, ScopeFilter(scope=SCOPE), 30)
    assert (trend["calls"], trend["tokens_in"], trend["tokens_out"]) == ([4], [113], [27])
    tree = run_tree(app, run_id)
    totals = tree["totals"]
    assert (totals["model_calls"], totals["model_tokens"]) == (4, 140)
    assert (totals["tokens_in"], totals["tokens_out"]) == (113, 27)
    assert "model calls 4  tokens 113/27" in render_tree(tree)
    failed = next(s for s in tree["steps"] if s["phase"] == "contradictions")
    assert (failed["status"], failed["tokens_in"], failed["tokens_out"]) == ("failed", 25, 5)
