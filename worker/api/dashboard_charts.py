"""The dashboard's trend charts, built from ``worker.reporting.trends`` figures."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from worker.api.dashboard_svg import Series, bar_chart, line_chart, sparkline

__all__ = ["sparkline", "trend_charts"]


def trend_charts(trend: dict[str, Any]) -> dict[str, Markup]:
    """Notes by status, notes retired per phase, model calls, tokens: one SVG each."""
    labels = trend["labels"]
    scopes = trend["scopes"]
    across = "" if scopes <= 1 else f" (sum over {scopes} scopes)"
    return {
        "notes": line_chart(
            "chart-notes", f"Notes by status after each run{across}", labels,
            [Series(status, values) for status, values in trend["notes"].items()], "notes"),
        "retired": bar_chart(
            "chart-retired", "Notes retired per phase", labels,
            [Series(phase, values) for phase, values in trend["retired"].items()], "notes"),
        "calls": bar_chart(
            "chart-calls", "Model calls per run", labels,
            [Series("model calls", trend["calls"])], "calls"),
        "tokens": line_chart(
            "chart-tokens", "Model tokens per run", labels,
            [Series("tokens in", trend["tokens_in"]), Series("tokens out", trend["tokens_out"])],
            "tokens"),
    }
