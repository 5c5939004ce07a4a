"""README.md read as a contract, mechanically: the tests it cites exist, the schema revision it
quotes is the latest."""

from __future__ import annotations

import re
from pathlib import Path

from alembic.script import ScriptDirectory

from worker.store.migrate import MIGRATIONS_DIR

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# `tests/x/test_y.py`, `tests/x/test_y.py::test_z`, `test_y.py::test_z` (a file named earlier), or
# `::test_z` (a test of the last file the same line named).
CITATION = re.compile(r"`((?:tests/[\w/]+|test_\w+)\.py)?(?:::([\w*]+))?`")


def _test_file(cited: str) -> Path | None:
    """A cited path, or a bare file name the README named in full elsewhere (unique in tests/)."""
    if cited.startswith("tests/"):
        path = ROOT / cited
        return path if path.is_file() else None
    found = sorted((ROOT / "tests").rglob(cited))
    return found[0] if len(found) == 1 else None


def _defines(path: Path, name: str) -> bool:
    """``name`` (``test_r07_*``: a prefix) is a function or a name bound at module level."""
    stem = re.escape(name.removesuffix("*")) + (r"\w*" if name.endswith("*") else r"\b")
    return re.search(rf"^(?:(?:async )?def |class )?{stem}(?:\(|\s*=|:)", path.read_text("utf-8"),
                     re.M) is not None


def cited_tests(text: str) -> list[tuple[int, str | None, str | None]]:
    """Every (line number, file, test) the text cites in backticks; file None: none named."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in CITATION.finditer(line):
            if match.group(1) or match.group(2):
                found.append((number, match.group(1), match.group(2)))
    return found


def missing_tests(text: str) -> list[str]:
    missing = []
    for number, line in enumerate(text.splitlines(), 1):
        current: Path | None = None
        for match in CITATION.finditer(line):
            cited, name = match.groups()
            if cited:
                current = _test_file(cited)
                if current is None:
                    missing.append(f"line {number}: {cited}")
                    continue
            if name and (current is None or not _defines(current, name)):
                missing.append(f"line {number}: {cited or '::'}{'::' if cited else ''}{name}")
    return missing


def test_every_test_the_readme_cites_exists() -> None:
    """Each test file and test name README.md cites (the R-table's, the sections' "Tests:") is
    there: a renamed or deleted test leaves a claim nothing checks."""
    assert len(cited_tests(README)) > 100  # the pattern still finds the citations
    assert missing_tests(README) == []


def test_a_stale_citation_is_reported() -> None:
    """The check itself: a missing file, a missing test of a named file and a missing test of
    the line's last file are each reported; a test bound by assignment or a prefix is found."""
    text = ("`tests/test_layout.py::test_no_module_over_400_lines`, `::test_gone`\n"
            "`tests/nowhere/test_x.py` `test_layout.py::test_no_function_over_*`\n"
            "`tests/integration/test_invariants_stateful.py::"
            "test_r08_r11_r17_invariants_under_random_runs`\n")
    assert missing_tests(text) == ["line 1: ::test_gone", "line 2: tests/nowhere/test_x.py"]


def test_the_schema_revision_the_readme_quotes_is_the_latest() -> None:
    """`dream db upgrade`'s line in the CLI reference names the newest migration."""
    head = ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head()
    quoted = set(re.findall(r"database (?:upgraded from an empty schema to|already at the latest "
                            r"revision) (\w+): URL", README))
    assert quoted == {head}
