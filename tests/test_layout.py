"""The house rules that keep worker/ easy to read: no module over 400 lines, no function over 60.

Today's offenders are listed with their current size; an entry may only shrink. Anything not in
the list that crosses a limit fails, and so does a listed one that grows, and so does an entry
whose module or function is under the limit or gone (delete it with the split).
"""

from __future__ import annotations

import ast
from pathlib import Path

WORKER = Path(__file__).resolve().parents[1] / "worker"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

# path relative to worker/ -> lines today (may only go down)
MODULE_ALLOW: dict[str, int] = {
}

# "path::Qualified.name" -> lines today (may only go down)
FUNCTION_ALLOW: dict[str, int] = {
}


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def module_sizes(root: Path = WORKER) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
            for p in _modules(root)}


def function_sizes(root: Path = WORKER) -> dict[str, int]:
    """Every function and method (nested ones too), decorators included, by qualified name."""
    sizes: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, rel: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                end = child.end_lineno or child.lineno
                name = f"{prefix}{child.name}"
                sizes[f"{rel}::{name}"] = max(sizes.get(f"{rel}::{name}", 0), end - start + 1)
                visit(child, f"{name}.", rel)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", rel)
            else:
                visit(child, prefix, rel)

    for path in _modules(root):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        visit(tree, "", path.relative_to(root).as_posix())
    return sizes


def _over(sizes: dict[str, int], limit: int, allow: dict[str, int]) -> list[str]:
    problems = []
    for name, lines in sorted(sizes.items()):
        if lines <= limit:
            continue
        ceiling = allow.get(name)
        if ceiling is None:
            problems.append(f"{name}: {lines} lines (limit {limit}); split it")
        elif lines > ceiling:
            problems.append(f"{name}: grew to {lines} lines (allowed {ceiling} while it is split, "
                            "never more)")
    return problems


def test_no_module_over_400_lines() -> None:
    assert _over(module_sizes(), MAX_MODULE_LINES, MODULE_ALLOW) == []


def test_no_function_over_60_lines() -> None:
    assert _over(function_sizes(), MAX_FUNCTION_LINES, FUNCTION_ALLOW) == []


def test_the_walk_measures_methods_nested_functions_and_decorators(tmp_path: Path) -> None:
    body = "\n".join(f"            x{i} = {i}" for i in range(59))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        "class A:\n    @staticmethod\n    def big():\n        def inner():\n"
        f"{body}\n        return inner\n\n\ndef small():\n    return 1\n")
    assert function_sizes(tmp_path) == {
        "pkg/m.py::A.big": 63, "pkg/m.py::A.big.inner": 60, "pkg/m.py::small": 2}
    assert module_sizes(tmp_path) == {"pkg/m.py": 68}


def test_an_offender_is_reported_and_an_allowed_one_may_only_shrink() -> None:
    sizes = {"m.py::A.big": 63, "m.py::small": 3}
    assert _over(sizes, 60, {}) == ["m.py::A.big: 63 lines (limit 60); split it"]
    assert _over(sizes, 60, {"m.py::A.big": 63}) == []
    assert _over(sizes, 60, {"m.py::A.big": 62}) == [
        "m.py::A.big: grew to 63 lines (allowed 62 while it is split, never more)"]


def _stale(sizes: dict[str, int], limit: int, allow: dict[str, int]) -> list[str]:
    return [f"{n} (now {sizes.get(n, 'gone')})" for n in sorted(allow) if sizes.get(n, 0) <= limit]


def test_a_fixed_renamed_or_moved_entry_is_stale() -> None:
    sizes = {"m.py::big": 63, "m.py::fixed": 40}
    allow = {"m.py::big": 63, "m.py::fixed": 70, "m.py::gone": 65}
    assert _stale(sizes, 60, allow) == ["m.py::fixed (now 40)", "m.py::gone (now gone)"]


def test_allow_list_names_only_offenders() -> None:
    """An entry whose module or function is under the limit (or no longer exists) must go: the
    list only shrinks, and a stale entry would let its name grow back past the limit unseen."""
    stale = (_stale(module_sizes(), MAX_MODULE_LINES, MODULE_ALLOW)
             + _stale(function_sizes(), MAX_FUNCTION_LINES, FUNCTION_ALLOW))
    assert stale == [], "remove from the allow-list in tests/test_layout.py: " + ", ".join(stale)


def run_on_summaries(root: Path = WORKER) -> list[str]:
    """Modules whose docstring's first line is a whole sentence with more text right under it:
    the blank line after the summary (PEP 257) was dropped, as to fit a module under its limit.
    A summary that runs over two lines ends on the second, and is no such module."""
    found = []
    for path in _modules(root):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        lines = (doc or "").strip().splitlines()
        if len(lines) > 1 and lines[0].rstrip().endswith(".") and lines[1].strip():
            found.append(path.relative_to(root).as_posix())
    return found


def test_a_module_summary_line_is_followed_by_a_blank_line(tmp_path: Path) -> None:
    """worker/host/fusion.py sat at exactly 400 lines with its summary run on into the text."""
    assert run_on_summaries() == []
    (tmp_path / "run_on.py").write_text('"""One line.\nMore text."""\n')
    (tmp_path / "apart.py").write_text('"""One line.\n\nMore text."""\n')
    (tmp_path / "long.py").write_text('"""A summary that runs\nover two lines.\n\nMore."""\n')
    assert run_on_summaries(tmp_path) == ["run_on.py"]
