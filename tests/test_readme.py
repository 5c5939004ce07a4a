"""README.md read as a contract, mechanically: the tests it cites exist, the schema revision it
quotes is the latest, its configuration table lists every setting with the default it has, its
CLI reference every command with every option."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import pytest
from alembic.script import ScriptDirectory
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from worker.cli import main
from worker.config import Settings, known_variables
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


def section(text: str, title: str) -> str:
    """The text of one ``## title`` section, up to the next ``## ``."""
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def documented_settings(text: str) -> dict[str, str | None]:
    """Variable -> default as the "Configuration" table gives it (None: unset or –). A row names
    one variable or several with one default each (`a` / `b`, `a`, `b`) or one for all; a
    section row (`DREAM_X__*`) gives `NAME=value`, or a bare `NAME` for one that is unset."""
    found: dict[str, str | None] = {}
    for line in section(text, "Configuration").splitlines():
        if not line.startswith("| `DREAM_"):
            continue
        names_cell, default_cell = (c.strip() for c in line.strip("|").split(" | ")[:2])
        names = re.findall(r"`(DREAM_[A-Z_]+(?:__\*)?)`", names_cell)
        if len(names) == 1 and names[0].endswith("__*"):
            for token in re.findall(r"`([A-Z_]+(?:=[^`]*)?)`", default_cell):
                key, has_value, value = token.partition("=")
                found.setdefault(names[0][:-1] + key, value if has_value else None)
            continue
        parts = [p.strip().strip("`") for p in re.split(r" / |, ", default_cell)]
        values = [None if p in ("–", "unset") or p.startswith("unset ") else p for p in parts]
        for name, value in zip(names, values * len(names) if len(values) == 1 else values,
                               strict=True):
            found[name] = value
    return found


def settings_defaults() -> dict[str, Any]:
    """Every DREAM_* setting and its default (OpenTelemetry's own OTEL_* variables aside)."""
    defaults: dict[str, Any] = {}
    for name, field in Settings.model_fields.items():
        if field.validation_alias is not None:
            continue
        section_model = field.annotation
        if isinstance(section_model, type) and issubclass(section_model, BaseModel):
            defaults |= {f"DREAM_{name.upper()}__{sub.upper()}": f.default
                         for sub, f in section_model.model_fields.items()}
        else:
            defaults[f"DREAM_{name.upper()}"] = field.default
    return defaults


def _same_default(documented: str | None, actual: Any) -> bool:
    if actual is PydanticUndefined:  # computed (the database URL): the README says how
        return documented is not None
    if actual is None or isinstance(actual, bool):
        return documented == (None if actual is None else str(actual).lower())
    if isinstance(actual, int | float):
        return documented is not None and re.fullmatch(r"[\d.]+", documented) is not None \
            and float(documented) == actual
    return documented == str(actual)


def test_every_setting_is_documented_with_its_default() -> None:
    """Each DREAM_* setting of worker/config.py has a row of the configuration table giving its
    default as the code has it, and the table names no variable the worker does not read."""
    documented = documented_settings(README)
    defaults = settings_defaults()
    assert sorted(set(defaults) - set(documented)) == []
    assert sorted(set(documented) - known_variables()) == []
    wrong = {name: (documented[name], value) for name, value in defaults.items()
             if not _same_default(documented[name], value)}
    assert wrong == {}


def test_the_configuration_table_is_read_as_written() -> None:
    """The parser itself on each row shape: several variables with a default each, one default
    for several, unset, and a section's NAME=value and bare NAME."""
    text = """\n## Configuration
| Variable | Default | Meaning |
|---|---|---|
| `DREAM_A` / `DREAM_B` | `24` / `5` | x |
| `DREAM_C`, `DREAM_D` | –, `gpt` | x |
| `DREAM_E` / `DREAM_F` | unset (off) | x |
| `DREAM_S__*` | `ONE=0.6`, `TWO` (unset), `ONE=9` (only with `THREE=x`) | x |
## Next
| `DREAM_G` | `1` | x |
"""
    assert documented_settings(text) == {
        "DREAM_A": "24", "DREAM_B": "5", "DREAM_C": None, "DREAM_D": "gpt", "DREAM_E": None,
        "DREAM_F": None, "DREAM_S__ONE": "0.6", "DREAM_S__TWO": None, "DREAM_S__THREE": "x"}


def leaf_commands(group: click.Group, path: tuple[str, ...] = ()) -> dict[str, click.Command]:
    """Every runnable command of the `dream` group by its words (``review approve``)."""
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= leaf_commands(command, (*path, name))
        else:
            found[" ".join((*path, name))] = command
    return found


def reference_synopses(text: str, commands: set[str]) -> dict[str, set[str]]:
    """Command -> the options its synopses in the CLI reference's table name (the longest
    command the words of each backticked `dream ...` in a row's first cell begin with)."""
    found: dict[str, set[str]] = {}
    for line in section(text, "CLI reference").splitlines():
        if not line.startswith("| `dream "):
            continue
        for synopsis in re.findall(r"`dream ([^`]*)`", line.split(" | ")[0]):
            words = synopsis.split()
            name = next((" ".join(words[:k]) for k in range(len(words), 0, -1)
                         if " ".join(words[:k]) in commands), synopsis)
            found.setdefault(name, set()).update(re.findall(r"--[a-z][a-z-]*", synopsis))
    return found


def test_the_cli_reference_lists_every_command_with_every_option() -> None:
    """The CLI reference's table has a synopsis for each `dream` command naming every option it
    takes, and no option it does not take."""
    commands = leaf_commands(main)
    documented = reference_synopses(README, set(commands))
    assert sorted(set(commands) ^ set(documented)) == []
    mismatched = {}
    for name, command in commands.items():
        options = {o for p in command.params for o in p.opts if o.startswith("--")} - {"--help"}
        if options != documented[name]:
            mismatched[name] = {"undocumented": sorted(options - documented[name]),
                                "unknown": sorted(documented[name] - options)}
    assert mismatched == {}


def test_the_mcp_table_lists_every_tool_with_its_annotations() -> None:
    """The "MCP server" table names each tool the server serves, with the readOnly /
    destructive / idempotent hints it declares (tests/mcp/test_server.py holds the server to
    EXPECTED_ANNOTATIONS through the SDK's own client)."""
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    from tests.mcp.test_server import EXPECTED_ANNOTATIONS

    hint = {"yes": True, "no": False}
    documented = {name: tuple(hint.get(h.strip()) for h in hints.split("/"))
                  for name, hints in re.findall(r"^\| `(\w+)\([^`]*\)` \| ([^|]+) \|",
                                                section(README, "MCP server"), re.M)}
    assert documented == EXPECTED_ANNOTATIONS


def test_every_api_route_is_documented() -> None:
    """Each route of the HTTP API appears as `METHOD /path` (path parameters by any name), and
    the README names no route the API lacks."""
    from tests.api.test_fuzz import ROUTES  # every route, found by walking the FastAPI app

    def shape(path: str) -> str:
        return re.sub(r"\{[^}]*\}", "{}", path)

    served = {(method, shape(path)) for method, path, _ in ROUTES}
    documented = {(method, shape(path)) for method, path
                  in re.findall(r"\b(GET|POST|PUT|PATCH|DELETE) (/[^\s`?\[]*)", README)}
    assert sorted(served - documented) == []
    assert sorted(documented - served) == []


def test_every_metric_is_documented() -> None:
    """Each family `/metrics` exposes is named in the Host API's `GET /metrics` row."""
    from worker.api.metrics import render

    families = re.findall(r"^# TYPE (\w+) ", render(
        {"runs": {}, "notes": {}, "phases": {}, "open_candidates": {}}), re.M)
    row = next(line for line in section(README, "Host API").splitlines()
               if line.startswith("| `GET /metrics`"))
    # `dream_runs{status}`, `dream_phase_duration_seconds_{sum,count}{phase}`
    named = {m.rstrip("_") for m in re.findall(r"`(dream_\w+)", row)}
    assert len(families) >= 7 and sorted(set(families) - named) == []


def test_the_phase_counters_the_readme_lists_are_the_phases_own() -> None:
    """"Run steps for dashboards" lists the parent-step counters of prune and archive exactly
    as the phases write them."""
    from worker.phases.archive.service import ArchiveCounters
    from worker.phases.prune.counters import PruneCounters

    text = " ".join(section(README, "Run steps for dashboards").split())
    for phase, counters in (("prune", PruneCounters()), ("archive", ArchiveCounters())):
        listed = re.search(rf"\b{phase} `\{{([\w, ]+)\}}`", text)
        assert listed is not None, phase
        assert [c.strip() for c in listed.group(1).split(",")] == list(counters.as_dict()), phase


def test_every_importable_field_is_documented() -> None:
    """"Data file formats" names every field each importer takes (an unknown field is an error,
    so an undocumented one is a field nobody can find), and so does the examples line of
    "Prune and archive"."""
    from worker.ingest.entities import _ENTITY_FIELDS, _KIND_FIELDS
    from worker.ingest.examples import EXAMPLE_FIELDS
    from worker.ingest.notes import NOTE_FIELDS
    from worker.ingest.sessions import SESSION_FIELDS

    formats = section(README, "Data file formats (JSONL, one object per line; blank lines ignored)")
    paragraphs = {m.group(1): m.group(2) for m in
                  re.finditer(r"\*\*(Notes|Sessions|Entities|Examples)\*\* (.*?)(?=\n\*\*|\n###)",
                              formats, re.S)}
    entity_fields = set(_ENTITY_FIELDS).union(*_KIND_FIELDS.values())
    examples_line = re.search(r"Examples are loaded with .*?all-or-nothing",
                              section(README, "Prune and archive"), re.S)
    assert examples_line is not None
    for text, fields in ((paragraphs["Notes"], NOTE_FIELDS),
                         (paragraphs["Sessions"], SESSION_FIELDS),
                         (paragraphs["Entities"], entity_fields),
                         (paragraphs["Examples"], EXAMPLE_FIELDS),
                         (examples_line.group(0), EXAMPLE_FIELDS)):
        assert sorted(set(fields) - set(re.findall(r"`(\w+)`", text))) == []
