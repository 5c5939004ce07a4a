"""Server-rendered SVG charts for the dashboard: lines and stacked bars with axes and labels.

Pure: numbers in, markup out. Every text (titles, series names, tick labels) is escaped; no
script, no external resources, so a chart is safe to inline in the page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH, HEIGHT = 480, 220
LEFT, RIGHT, TOP, BOTTOM = 46, 10, 12, 42
CHAR_WIDTH = 7  # px of one tick-label character at the chart's 12 px font
# Colour-blind-safe palette (Okabe–Ito), one per series in order.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000")


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float]


def nice_max(value: float) -> float:
    """The smallest 1/2/5 × 10^k at or above ``value`` (1 for an empty or all-zero chart)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return float(step * magnitude)
    return float(10 * magnitude)  # pragma: no cover - the loop always returns


def _fmt(value: float) -> str:
    if abs(value) >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def _plot_box() -> tuple[float, float]:
    return WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


def _y(value: float, top: float) -> float:
    _, h = _plot_box()
    return TOP + h - (value / top) * h


def _axes(top: float, x_labels: Sequence[str], slot: float, y_title: str) -> list[str]:
    """Grid lines with y ticks, the x axis with at most ~8 labels, and the y axis title."""
    w, h = _plot_box()
    parts = []
    for k in range(5):
        value = top * k / 4
        y = _y(value, top)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + w}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" '
                     f'text-anchor="end">{escape(_fmt(value))}</text>')
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT + w}" y1="{TOP + h}" y2="{TOP + h}"/>')
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + h}"/>')
    # As many x labels as fit side by side without touching.
    longest = max((len(label) for label in x_labels), default=1)
    fit = max(1, int(w // (longest * CHAR_WIDTH + 10)))
    every = max(1, math.ceil(len(x_labels) / fit))
    for i, label in enumerate(x_labels):
        if i % every:
            continue
        x = LEFT + slot * (i + 0.5)
        parts.append(f'<text class="tick" x="{x:.1f}" y="{TOP + h + 16}" '
                     f'text-anchor="middle">{escape(label)}</text>')
    parts.append(f'<text class="axis-title" x="{LEFT}" y="{HEIGHT - 6}">{escape(y_title)}</text>')
    return parts


def _legend(series: Sequence[Series]) -> str:
    items = "".join(
        f'<li><span class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
        f"{escape(s.name)}</li>" for i, s in enumerate(series))
    return f'<ul class="legend">{items}</ul>'


def _frame(chart_id: str, title: str, body: list[str], summary: str) -> str:
    return (f'<svg id="{escape(chart_id)}" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'role="img" aria-labelledby="{escape(chart_id)}-title" '
            f'xmlns="http://www.w3.org/2000/svg" preserveAspectRatio="xMidYMid meet">'
            f'<title id="{escape(chart_id)}-title">{escape(title)}: {escape(summary)}</title>'
            + "".join(body) + "</svg>")


def empty_chart(chart_id: str, title: str, why: str) -> Markup:
    body = [f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" '
            f'text-anchor="middle">{escape(why)}</text>']
    return Markup(f'<figure class="chart-box"><figcaption>{escape(title)}</figcaption>'
                  f"{_frame(chart_id, title, body, why)}</figure>")


def _top(values: Sequence[float]) -> float:
    """The axis maximum; whole-number data gets at least 4 so every tick is a whole number."""
    high = max(values, default=0.0)
    if all(float(v).is_integer() for v in values):
        step = max(1, math.ceil(high / 4))  # four whole-number steps: 1-5 as they come, then 1/2/5×10^k
        return float(4 * (step if step <= 5 else nice_max(step)))
    return nice_max(high)


def line_chart(chart_id: str, title: str, x_labels: Sequence[str], series: Sequence[Series],
               y_title: str = "") -> Markup:
    """One polyline per series over the same x positions, with a point marker at each value."""
    if not x_labels or not series:
        return empty_chart(chart_id, title, "no finished runs yet")
    top = _top([v for s in series for v in s.values])
    slot = _plot_box()[0] / len(x_labels)
    body = _axes(top, x_labels, slot, y_title)
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        points = [(LEFT + slot * (k + 0.5), _y(v, top)) for k, v in enumerate(s.values)]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        body.append(f'<polyline class="line" data-series="{escape(s.name)}" fill="none" '
                    f'stroke="{colour}" stroke-width="2" points="{path}"/>')
        body.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}">'
                    f"<title>{escape(s.name)} {escape(x_labels[k])}: {escape(_fmt(v))}</title>"
                    "</circle>" for k, ((x, y), v) in enumerate(zip(points, s.values, strict=True)))
    summary = "; ".join(f"{s.name} last {_fmt(s.values[-1])}" for s in series if s.values)
    return Markup(f'<figure class="chart-box"><figcaption>{escape(title)}</figcaption>'
                  f"{_frame(chart_id, title, body, summary)}{_legend(series)}</figure>")


def bar_chart(chart_id: str, title: str, x_labels: Sequence[str], series: Sequence[Series],
              y_title: str = "") -> Markup:
    """Stacked bars: one bar per x label, one segment per series (zero segments left out)."""
    if not x_labels or not series:
        return empty_chart(chart_id, title, "no finished runs yet")
    totals = [sum(s.values[k] for s in series) for k in range(len(x_labels))]
    top = _top(totals)
    slot = _plot_box()[0] / len(x_labels)
    width = max(1.0, slot * 0.7)
    body = _axes(top, x_labels, slot, y_title)
    for k, label in enumerate(x_labels):
        base = 0.0
        x = LEFT + slot * (k + 0.5) - width / 2
        for i, s in enumerate(series):
            value = s.values[k]
            if value <= 0:
                continue
            y_top, y_base = _y(base + value, top), _y(base, top)
            body.append(f'<rect class="bar" data-series="{escape(s.name)}" x="{x:.1f}" '
                        f'y="{y_top:.1f}" width="{width:.1f}" height="{y_base - y_top:.1f}" '
                        f'fill="{PALETTE[i % len(PALETTE)]}"><title>{escape(s.name)} '
                        f"{escape(label)}: {escape(_fmt(value))}</title></rect>")
            base += value
    summary = f"{len(x_labels)} runs, at most {_fmt(max(totals, default=0.0))}"
    return Markup(f'<figure class="chart-box"><figcaption>{escape(title)}</figcaption>'
                  f"{_frame(chart_id, title, body, summary)}{_legend(series)}</figure>")


def sparkline(values: Sequence[float], label: str, width: int = 90, height: int = 22) -> Markup:
    """A tiny line of the last runs' values (oldest left) with the last value as text."""
    if not values:
        return Markup('<span class="spark-none">—</span>')
    top = max(max(values), 1)
    step = (width - 4) / max(1, len(values) - 1)
    points = " ".join(f"{2 + k * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}"
                      for k, v in enumerate(values))
    series = ", ".join(_fmt(v) for v in values)
    if len(values) == 1:
        points = f"{width / 2 - 3:.1f},{height - 2 - (values[0] / top) * (height - 4):.1f} " + \
                 f"{width / 2 + 3:.1f},{height - 2 - (values[0] / top) * (height - 4):.1f}"
    return Markup(f'<svg class="spark" width="{width}" height="{height}" '
                  f'viewBox="0 0 {width} {height}" role="img" xmlns="http://www.w3.org/2000/svg">'
                  f"<title>{escape(label)}: {escape(series)}</title>"
                  f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" '
                  f'points="{points}"/></svg> <span class="spark-last">{escape(_fmt(values[-1]))}'
                  "</span>")
