"""`dream runs show`'s step lines (``worker.reporting.render_tree``)."""

from __future__ import annotations

from typing import Any

import pytest

from worker.reporting import render_tree

pytestmark = pytest.mark.unit


def _step(name: str, output: dict[str, Any], note_ids: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "status": "succeeded", "duration_ms": 1.5, "output": output,
            "input": {"note_ids": note_ids} if note_ids else {}, "children": []}


def test_a_step_line_joins_what_it_says_and_its_notes_without_a_stray_separator() -> None:
    """A child step with no counters, tokens or reason printed "1.5 ms  ; notes: a, b": the
    separator is written only between two parts. A flag shows only when set ("dry_run=False"
    stood under every child of a real run)."""
    parent = _step("archive", {"notes_expired": 1})
    parent["children"] = [_step("rule", {"archived": ["a", "b"], "dry_run": False}),
                          _step("pair 1", {"verdict": "open"}, ["c", "d"])]
    tree = {"id": "r1", "status": "succeeded", "scope": "s", "trigger": "manual",
            "dry_run": False, "steps": [parent]}
    lines = render_tree(tree).splitlines()
    assert lines[1].endswith("ms  notes_expired=1")
    assert lines[2].endswith("1.5 ms  archived: a, b")
    assert lines[3].endswith("1.5 ms    — open; notes: c, d")


def test_a_set_flag_is_shown() -> None:
    tree = {"id": "r1", "status": "succeeded", "scope": "s", "trigger": "manual",
            "dry_run": True, "steps": [_step("prune", {"dry_run": True, "notes_checked": 2})]}
    assert render_tree(tree).splitlines()[1].endswith("ms  dry_run=True, notes_checked=2")


def test_a_reason_from_a_model_or_a_note_prints_as_one_line_that_shows_what_it_holds() -> None:
    """A step's reason (a model's words, which may echo note text) with a line break, an
    escape sequence or a bidi override printed a forged line, recoloured the terminal or
    reversed the rest of the line: each is written as its escape, on its one line."""
    step = _step("cluster 1", {"verdict": "merge",
                               "reason": "same\n  cluster 2  approved\x1b[2K \u202eevil"})
    tree = {"id": "r1", "status": "blocked", "scope": "s", "trigger": "manual",
            "dry_run": False, "status_reason": "guard\x1b]0;pwned\x07", "steps": [step]}
    lines = render_tree(tree).splitlines()
    assert lines[1] == "  blocked: guard\\x1b]0;pwned\\x07"
    assert len(lines) == 3
    assert lines[2].endswith("— same\\n  cluster 2  approved\\x1b[2K \\u202eevil")
