"""What `dream demo` prints under each step: the notes it is about, so a reader of the first
command's output can tell which pair stayed open and which note each phase retired or kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.demo import run_demo

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "fake-llm-demo.json"


def _demo(tmp_path: Path) -> list[str]:
    lines: list[str] = []
    run_demo(str(tmp_path / "demo.db"), echo=lines.append)
    return lines


def _under(lines: list[str], step: str) -> list[str]:
    """The indented lines that follow each line starting with ``step``."""
    out = []
    for k, line in enumerate(lines):
        if line.lstrip().startswith(step):
            out += [line.strip() for line in lines[k + 1:k + 3] if line.startswith(" " * 10)]
    return out


def test_rule_judge_demo_names_each_open_pair_and_each_retired_or_kept_note(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAM_LLM_PROVIDER", "none")
    lines = _demo(tmp_path)
    pairs = _under(lines, "- open_pair:")
    assert "notes: py-4, py-5" in pairs and "notes: units-new, units-old" in pairs, lines
    assert all(p.startswith("notes: ") and p.count(",") == 1 for p in pairs), pairs
    assert _under(lines, "- orphans:")[0] == "archived: orphan-conv"
    assert _under(lines, "- notes expired:")[0] == "archived: expired"
    assert _under(lines, "- preserved:")[0] == "kept: manual"


def test_scripted_model_demo_says_which_note_a_conflict_retired(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAM_LLM_PROVIDER", "fake")
    monkeypatch.setenv("DREAM_FAKE_LLM_SCRIPT", str(SCRIPT))
    lines = _demo(tmp_path)
    assert _under(lines, "- model:") == [
        "units-new ~ units-old: conflicting, revoke units-old (newer note wins)"], lines
    assert "notes: py-1, py-2, py-3, py-4, py-5" in _under(lines, "- cluster 1:")
