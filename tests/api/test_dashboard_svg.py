"""The SVG renderer: axes that fit the data, escaped text, one mark per value."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from worker.api.dashboard_svg import Series, bar_chart, line_chart, nice_max, sparkline

SVG = "{http://www.w3.org/2000/svg}"


def _svg(markup: str) -> ET.Element:
    """The <svg> element parsed strictly (the figure around it is HTML, also well-formed)."""
    figure = ET.fromstring(str(markup))
    found = figure.find(f"{SVG}svg")
    assert found is not None
    return found


@pytest.mark.parametrize("value, top", [
    (0, 1.0),          # an empty chart still has an axis
    (0.3, 0.5),
    (1, 1.0),          # exactly a nice number stays
    (7, 10.0),
    (38, 50.0),
    (1470, 2000.0),
    (float("nan"), 1.0),
])
def test_nice_max(value: float, top: float) -> None:
    assert nice_max(value) == top


def test_line_chart_has_a_polyline_per_series_and_whole_number_ticks() -> None:
    svg = _svg(line_chart("c", "Notes", ["a", "b", "c"],
                          [Series("active", [5, 7, 9]), Series("revoked", [0, 1, 6])], "notes"))
    lines = svg.findall(f"{SVG}polyline")
    assert [p.get("data-series") for p in lines] == ["active", "revoked"]
    assert all(len((p.get("points") or "").split()) == 3 for p in lines)
    ticks = [t.text for t in svg.findall(f"{SVG}text") if t.get("class") == "tick"]
    assert ticks[:5] == ["0", "3", "6", "9", "12"]  # 9 → four whole steps of 3
    assert len(svg.findall(f"{SVG}circle")) == 6


def test_points_stay_inside_the_plot() -> None:
    svg = _svg(line_chart("c", "t", [str(k) for k in range(40)],
                          [Series("s", [float(k * k) for k in range(40)])]))
    width, height = (float(v) for v in (svg.get("viewBox") or "").split()[2:])
    for point in (svg.find(f"{SVG}polyline").get("points") or "").split():  # type: ignore[union-attr]
        x, y = (float(v) for v in point.split(","))
        assert 0 <= x <= width and 0 <= y <= height


def test_bars_stack_and_skip_zero_segments() -> None:
    svg = _svg(bar_chart("b", "Retired", ["r1", "r2"],
                         [Series("consolidate", [4, 0]), Series("prune", [1, 2])]))
    rects = svg.findall(f"{SVG}rect")
    assert [r.get("data-series") for r in rects] == ["consolidate", "prune", "prune"]
    first, on_top = rects[0], rects[1]
    assert float(on_top.get("y") or 0) + float(on_top.get("height") or 0) == pytest.approx(
        float(first.get("y") or 0))


def test_text_is_escaped() -> None:
    """Titles, series names and labels reach the page as text, never as markup."""
    hostile = '<script>alert(1)</script>"&'
    markup = str(line_chart("c", hostile, [hostile], [Series(hostile, [1])], hostile))
    assert "<script>" not in markup
    svg = _svg(markup)
    assert svg.find(f"{SVG}title").text.startswith(hostile)  # type: ignore[union-attr]


def test_no_runs_draws_a_message_not_an_empty_axis() -> None:
    svg = _svg(bar_chart("b", "Model calls", [], []))
    assert [t.text for t in svg.findall(f"{SVG}text")] == ["no finished runs yet"]


def test_sparkline_single_value_and_none() -> None:
    assert "—" in str(sparkline([], "open"))
    one = str(sparkline([3], "open"))
    assert "<polyline" in one and ">3</span>" in one


def test_all_zero_values_draw_on_the_base_line() -> None:
    """Runs that retired nothing: an axis up to 4, a flat line at the bottom, no bars."""
    line = _svg(line_chart("c", "t", ["a", "b"], [Series("s", [0, 0])]))
    ys = {p.split(",")[1] for p in (line.find(f"{SVG}polyline").get("points") or "").split()}  # type: ignore[union-attr]
    assert len(ys) == 1
    assert _svg(bar_chart("b", "t", ["a"], [Series("s", [0])])).findall(f"{SVG}rect") == []


def test_run_labels_tell_runs_apart_as_briefly_as_possible() -> None:
    from datetime import UTC, datetime

    from worker.reporting import run_labels

    day = datetime(2026, 12, 1, 11, 50, 1, tzinfo=UTC)
    assert run_labels([day, day.replace(hour=12)]) == ["11:50", "12:50"]
    assert run_labels([day, day.replace(second=30)]) == ["11:50:01", "11:50:30"]
    assert run_labels([day, day.replace(day=2)]) == ["12-01 11:50", "12-02 11:50"]
    assert run_labels([]) == []


def test_x_labels_never_overlap() -> None:
    """Thirty runs with long labels: only as many labels as fit side by side are drawn."""
    labels = [f"12-{k:02d} 11:50" for k in range(1, 31)]
    svg = _svg(line_chart("c", "t", labels, [Series("s", [1.0] * 30)]))
    xs = [float(t.get("x") or 0) for t in svg.findall(f"{SVG}text")
          if t.get("class") == "tick" and t.get("text-anchor") == "middle"]
    assert 2 <= len(xs) < 30
    assert all(b - a >= len(labels[0]) * 7 for a, b in zip(xs, xs[1:], strict=False))
