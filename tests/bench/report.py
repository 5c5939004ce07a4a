"""Bench tables: plain text, one row per phase of a run plus the engine and the total."""

from __future__ import annotations

import sys
from typing import Any

from tests.bench.inprocess import ENGINE
from worker.domain.types import PHASES

PHASE_HEADER = ["run", "part", "wall s", "CPU s", "SQL/scope", "retired", "model calls",
                "tokens", "steps / notes"]
_RETIRING = ("revoked", "archived", "retired", "conflicts_resolved", "equivalents_merged")
# Archive's counters name why a note went, not that it was retired (and consolidation's and
# contradictions' ``notes_expired`` count notes they left out for archive, retiring none).
_ARCHIVE_RETIRING = ("notes_expired", "notes_stale")


def table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    cells = [[fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(header)]
    print(f"\n## {title}")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    sys.stdout.flush()


def fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def retired(r: dict[str, Any]) -> int:
    b, a = r["before"], r["after"]
    return sum(a.get(s, 0) - b.get(s, 0) for s in ("revoked", "archived"))


def _phase_retired(part: str, counters: dict[str, Any]) -> int:
    if part == "archive":
        return sum(int(counters.get(k, 0)) for k in _ARCHIVE_RETIRING)
    return sum(v for k, v in counters.items() if any(w in k for w in _RETIRING))


def sql_per_scope(r: dict[str, Any]) -> float | str:
    return sum(r["sql"].values()) / max(1, r["scopes"]) if "sql" in r else "-"


def report_run(label: str, notes: int, r: dict[str, Any]) -> list[list[Any]]:
    """One row per phase, one for the engine around them (in-process runs), and the total."""
    scopes, workers = max(1, r["scopes"]), r.get("workers", 1)
    rows: list[list[Any]] = []
    for part in (*PHASES, ENGINE):
        if part == ENGINE and "sql" not in r:
            continue
        st = r["steps"].get(part, {})
        c = st.get("counters", {})
        wall = r.get("phase_wall", {}).get(part)
        rows.append([
            label, part, wall / workers if wall is not None else "-",
            r.get("phase_cpu", {}).get(part, "-"),
            r["sql"].get(part, 0) / scopes if "sql" in r else "-",
            _phase_retired(part, c) if st else "-",
            r.get("calls_by_prompt", {}).get(part, "-"), st.get("tokens", "-"),
            ",".join(f"{k}:{v}" for k, v in sorted(st.get("statuses", {}).items())) or "-"])
    ret, calls = retired(r), r.get("calls", 0)
    tokens = sum(s.get("tokens", 0) for s in r["steps"].values())
    runs = ",".join(f"{k}:{v}" for k, v in sorted(r.get("run_status", {}).items()))
    rows.append([
        label, "TOTAL", r["wall"], r.get("cpu", "-"), sql_per_scope(r), ret,
        f"{calls} ({calls / ret:.2f}/retired)" if ret and "calls" in r else "-",
        f"{tokens} ({tokens / ret:.0f}/retired)" if ret else tokens,
        f"{notes / r['wall']:,.0f} notes/s, runs {runs}, rss {r['rss_mb']:.0f} MB, "
        f"load {r['load']:.1f} (max {r['load_max']:.1f})"])
    return rows


def headline(label: str, notes: int, r: dict[str, Any]) -> list[Any]:
    """The figures the issue's targets name, one row per run."""
    return [label, r.get("workers", 1), r["wall"], r.get("cpu", "-"), sql_per_scope(r),
            r.get("phase_wall", {}).get("consolidate", 0.0) / r.get("workers", 1) or "-",
            notes / r["wall"], retired(r), r["rss_mb"], f"{r['load']:.1f} / {r['load_max']:.1f}"]


HEADLINE_HEADER = ["run", "procs", "wall s", "CPU s", "SQL/scope", "consolidate s", "notes/s",
                   "retired", "peak RSS MB", "load mean/max"]
