"""R22 through the `dream` command: bad input is one line naming the problem; nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.factories import add_notes
from tests.support.safety import all_rows_text
from worker.app import App
from worker.cli import main
from worker.errors import NotFound

GOOD = json.dumps({"agent_id": "a", "user_id": "u", "content": "User likes tea"})


@pytest.mark.parametrize(("args", "stdin", "says"), [
    (["notes", "import", "-"],
     GOOD + "\n" + json.dumps({"agent_id": "a", "content": "x", "created_at": "31/02/2026"}),
     "line 2: created_at"),
    (["notes", "import", "-"],
     GOOD + "\n" + json.dumps({"agent_id": "a", "content": "x", "expires_at": "2026-02-30"}),
     "line 2: expires_at"),
    (["notes", "import", "-"],
     GOOD + "\n" + json.dumps({"agent_id": "a", "content": "x", "embedding": [0.5] * 7}),
     "line 2"),
    # a validity that ends before it begins (the good line before it is not written either)
    (["notes", "import", "-"],
     GOOD + "\n" + json.dumps({"agent_id": "a", "content": "x",
                               "created_at": "2026-01-01T00:00:00Z",
                               "valid_from": "2026-05-01T00:00:00Z",
                               "valid_to": "2026-02-01T00:00:00Z"}),
     "line 2: valid_to 2026-02-01T00:00:00+00:00 is before valid_from "
     "2026-05-01T00:00:00+00:00; a note's validity cannot end before it begins: fix valid_to "
     "or valid_from, or drop valid_to"),
    (["run", "--agent", "ghost", "--force"], None, "unknown scope"),
    # the key shows null, and so does the hint (it said None)
    (["run", "--agent", "a", "--user", "nobody", "--force"], None,
     'unknown scope ["a","nobody",null]: it has no notes, sessions or runs; check '
     "agent/user/company (null is a value, not a wildcard)"),
    # every importer names the fields it takes (notes and examples only named the unknown one)
    (["notes", "import", "-"], GOOD + "\n" + json.dumps({"agent_id": "a", "content": "x",
                                                         "colour": "red"}),
     "line 2: unknown field 'colour'; allowed: access_count, agent_id, comments,"),
    (["examples", "import", "-"], json.dumps({"agent_id": "a", "input": "i", "output": "o",
                                              "score": 3}),
     "line 1: unknown field 'score'; allowed: access_count, agent_id, company_id,"),
    # a line that is no object is named in JSON's words (it said NoneType, list, str)
    (["notes", "import", "-"], GOOD + "\nnull", "line 2: expected a JSON object {...}, got null"),
    (["sessions", "import", "-"], "[1, 2]", "line 1: expected a JSON object {...}, got an array"),
    (["entities", "import", "-"], '"agent"', "line 1: expected a JSON object {...}, got a string"),
    # a key twice: json kept the last value, and the note went to the second agent's scope
    (["notes", "import", "-"], '{"agent_id": "a", "content": "x", "agent_id": "b"}',
     "line 1: key 'agent_id' appears twice in one object; keep one"),
    (["sessions", "import", "-"],
     '{"agent_id": "a", "started_at": "2026-01-01T00:00:00Z", "id": "s1", "id": "s2"}',
     "line 1: key 'id' appears twice"),
    # an id with a line break or an escape sequence: every listing would print it as it is
    (["notes", "import", "-"], json.dumps({"agent_id": "a", "id": "n1\nitem 9 approved",
                                           "content": "x"}),
     "line 1: id has a line break or control character"),
    (["notes", "import", "-"], json.dumps({"agent_id": "a\x1b[31m", "content": "x"}),
     "line 1: agent_id has a line break or control character"),
    (["run", "--agent", "a\u2028b", "--force"], None, "has a line break or control character"),
    # before: imported as a second scope every listing prints as "a" / "alice"
    (["notes", "import", "-"], json.dumps({"agent_id": "a\u200b", "content": "x"}),
     "line 1: agent_id has an invisible character"),
    (["sessions", "add", "--agent", "a", "--user", "alice\u202e"], None,
     "'--user': has an invisible character"),
    (["notes", "add", "--agent", "a ", "--content", "x"], None,
     "'--agent': starts or ends with whitespace"),
    (["notes", "add", "--agent", "a", "--content", "x", "--conversation", "c\u200b"], None,
     "'--conversation': has an invisible character"),
    (["notes", "import", "-"], json.dumps({"agent_id": "a", "user_id": "Jose\u0301",
                                           "content": "x"}),
     "line 1: user_id is not in Unicode normal form C"),
    (["undo", "no-such-run"], None, "no run with id no-such-run"),
    (["erase", "--note", "no-such-note", "--yes"], None, "no note with id no-such-note"),
])
def test_r22_bad_input_is_one_line_and_writes_nothing(
    app: App, monkeypatch: pytest.MonkeyPatch, args: list[str], stdin: str | None, says: str,
) -> None:
    """R22: a bad date, a wrong embedding size, an unknown scope or id → exit 2 (3: not found),
    one 'error:' line naming it (and the line number for files), and the database is
    byte-for-byte as before."""
    add_notes(app, {"agent_id": "a", "content": "An existing note"})
    before = all_rows_text(app)
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    result = CliRunner().invoke(main, args, input=stdin)
    lines = [line for line in result.output.splitlines() if line.strip()]
    # Input mistakes exit 2; an unknown scope, run or note is not found (worker.errors).
    not_found = says.startswith(("unknown scope", "no run with id", "no note with id"))
    assert result.exit_code == (NotFound.exit_code if not_found else 2), result.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.output
    assert all_rows_text(app) == before


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_a_line_too_long_to_be_a_record_is_refused_as_it_is_read(
    app: App, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, source: str,
) -> None:
    """A file with no line break (a dump, a binary) was read whole into memory before any
    check; the reader now stops at the first line past LINE_BYTES_MAX, one line, nothing
    written (the good line before it neither: imports are all or nothing)."""
    from worker.cli.common import LINE_BYTES_MAX

    add_notes(app, {"agent_id": "a", "content": "An existing note"})
    before = all_rows_text(app)
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    data = GOOD + "\n" + "x" * (LINE_BYTES_MAX + 1)
    path = tmp_path / "dump.jsonl"
    path.write_text(data, encoding="utf-8")
    args = ["notes", "import", str(path) if source == "file" else "-"]
    result = CliRunner().invoke(main, args, input=data if source == "stdin" else None)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output[:500]
    assert lines[0].startswith("error: line 2: longer than 16 MiB without a line break")
    assert all_rows_text(app) == before


@pytest.mark.parametrize(("args", "where"), [
    (["notes", "add", "--agent", "a", "--content"], "dream notes add"),  # raised without context
    (["run", "--agent"], "dream run"),
    (["notes", "add", "--agent", "a", "--bogus"], "dream notes add"),
    (["bogus"], "dream"),
])
def test_a_usage_error_points_to_its_own_commands_help(args: list[str], where: str) -> None:
    result = CliRunner().invoke(main, args, prog_name="dream",
                                env={"DREAM_DATABASE_URL": "sqlite:///:memory:"})
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(f"(see `{where} --help`)"), result.stderr


NOTE = b'{"id": "bom-1", "agent_id": "a", "content": "Saved by Notepad"}\n'


@pytest.mark.parametrize(("body", "says"), [
    # before: Python's "Unexpected UTF-8 BOM (decode using utf-8-sig)"
    (NOTE + b"\xef\xbb\xbf" + NOTE, "line 2: not valid JSON (a byte-order mark (U+FEFF) before "
                                    "the JSON; save the file as UTF-8 without BOM)"),
    # before: "at column 1", the column of the line break the decoder read as a second line
    (b'{"agent_id": "a", "content": "x"\n', "line 1: not valid JSON (Expecting ',' delimiter "
                                           "at column 33)"),
    (b'{"agent_id": "a", "content": "x"\r\n', "line 1: not valid JSON (Expecting ',' delimiter "
                                             "at column 33)"),
])
def test_a_file_that_cannot_be_imported_is_one_line_and_writes_nothing(
    app: App, tmp_path: Path, body: bytes, says: str,
) -> None:
    """A byte-order mark inside the file and an unfinished line are each one line naming the
    problem and what to do; nothing written."""
    add_notes(app, {"agent_id": "a", "content": "An existing note"})
    before = all_rows_text(app)
    path = tmp_path / "notes.jsonl"
    path.write_bytes(body)
    result = CliRunner().invoke(main, ["notes", "import", str(path)],
                                env={"DREAM_DATABASE_URL": app.settings.database_url})
    assert result.exit_code == 2 and result.stdout == "", result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {says}"), line
    assert all_rows_text(app) == before


def test_a_byte_order_mark_that_starts_a_file_is_not_part_of_it(app: App, tmp_path: Path) -> None:
    """Windows editors start a UTF-8 file with a byte-order mark: every importer reads the file
    as without one (before: line 1 was refused as not valid JSON). Empty stdin still imports
    nothing, successfully (a pipeline with nothing to pass on)."""
    env = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING"}
    for args, body in (
        (["notes", "import"], NOTE),
        (["sessions", "import"], b'{"agent_id": "a", "started_at": "2026-01-01T00:00:00Z"}\n'),
        (["entities", "import"], b'{"kind": "agent", "id": "a", "status": "active"}\n'),
    ):
        path = tmp_path / f"{args[0]}.jsonl"
        path.write_bytes(b"\xef\xbb\xbf" + body)
        result = CliRunner().invoke(main, [*args, str(path)], env=env)
        assert result.exit_code == 0 and result.stdout.startswith("read 1 "), result.output
    with app.uow() as uow:
        assert uow.notes.get_many(["bom-1"])[0].content == "Saved by Notepad"
    empty = CliRunner().invoke(main, ["notes", "import", "-"], input=b"", env=env)
    assert (empty.exit_code, empty.stdout) == (
        0, "nothing to import: no notes in the input (an export with no notes writes none)\n")


_LISTED = "; `dream gate --explain` lists the known scopes"


@pytest.mark.parametrize(("args", "says"), [
    # before: no output, exit 0, as if the scope had no notes
    (["--agent", "nobody"], "unknown scope --agent nobody: no note, session or run has it"),
    (["--agent", "a", "--user", "no one"],
     "unknown scope --agent a --user 'no one': no note, session or run has it"),
    (["--company", "acme", "--status", "active"],
     "unknown scope --company acme: no note, session or run has it"),
])
def test_notes_export_of_an_unknown_scope_is_one_line_naming_it(
        app: App, args: list[str], says: str) -> None:
    """A scope filter no note, session or run matches is a mistyped id, as for every other
    command: one line on stderr naming the filter and how to list the known scopes, exit 3."""
    add_notes(app, {"agent_id": "a", "user_id": "u", "content": "An existing note"})
    result = CliRunner().invoke(main, ["notes", "export", *args],
                                env={"DREAM_DATABASE_URL": app.settings.database_url})
    assert (result.exit_code, result.stdout) == (NotFound.exit_code, ""), result.output
    assert result.stderr.splitlines() == [f"error: {says}{_LISTED}"]


def test_notes_export_of_a_known_scope_without_such_notes_exports_nothing(app: App) -> None:
    """A known scope (sessions only, or notes of another status) exports nothing and exits 0,
    as `dream candidates` and `dream review list` answer an empty known scope; stderr says the
    output is empty."""
    add_notes(app, {"agent_id": "a", "content": "An existing note"})
    env = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING"}
    assert CliRunner().invoke(main, ["sessions", "add", "--agent", "quiet"], env=env).exit_code == 0
    for args in (["--agent", "quiet"], ["--agent", "a", "--status", "archived"]):
        result = CliRunner().invoke(main, ["notes", "export", *args], env=env)
        assert (result.exit_code, result.stdout) == (0, ""), (args, result.output)
        assert result.stderr.startswith("no notes to export: the output is empty"), args
    exported = CliRunner().invoke(main, ["notes", "export", "--agent", "a"], env=env)
    assert [json.loads(line)["content"] for line in exported.stdout.splitlines()] == [
        "An existing note"]


def test_runs_list_of_an_unknown_scope_is_one_line_naming_it(app: App) -> None:
    """`dream runs list --agent ghost` printed "no runs match" and exited 0, as if the scope
    had never dreamt; a filter no note, session or run has is a typo, as for `notes export`."""
    add_notes(app, {"agent_id": "a", "user_id": "u", "content": "An existing note"})
    env = {"DREAM_DATABASE_URL": app.settings.database_url}
    for args, named in ((["--agent", "ghost"], "agent_id 'ghost'"),
                        (["--agent", "a", "--user", "nobody", "--status", "failed"],
                         "agent_id 'a', user_id 'nobody'")):
        result = CliRunner().invoke(main, ["runs", "list", *args], env=env)
        assert (result.exit_code, result.stdout) == (NotFound.exit_code, ""), result.output
        assert result.stderr.splitlines() == [
            f"error: unknown scope {named}: no note, session or run has it{_LISTED}"]
    known = CliRunner().invoke(main, ["runs", "list", "--agent", "a", "--user", "u"], env=env)
    assert (known.exit_code, known.stdout) == (
        0, "no runs match; `dream runs list` without filters shows the latest\n")


def test_every_unknown_scope_error_says_how_to_list_the_scopes(app: App) -> None:
    """`dream run`, `candidates`, `review list` of an unknown scope end with where the known
    scopes are listed (before: only what to check)."""
    env = {"DREAM_DATABASE_URL": app.settings.database_url}
    for args in (["run", "--agent", "ghost", "--force"], ["candidates", "--agent", "ghost"],
                 ["review", "list", "--agent", "ghost"]):
        result = CliRunner().invoke(main, args, env=env)
        assert result.exit_code == NotFound.exit_code, result.output
        [line] = result.stderr.splitlines()
        assert line.startswith('error: unknown scope ["ghost",null,null]') and \
            line.endswith(_LISTED), line


def test_erase_refuses_the_erased_users_placeholder_as_every_user_option_does(
        app: App) -> None:
    """`dream erase --user [erased] --yes` took the placeholder as a user and rewrote the
    records of the runs kept under it; every other --user option refuses it as a bad id.
    Now a usage error (exit 2) that changes nothing."""
    from worker.domain.types import ERASED_USER, Scope
    from worker.runs import service
    from worker.safety.erase import erase

    add_notes(app, {"agent_id": "a", "user_id": "u1", "content": "A note of the first user"})
    service.create_run(app, Scope("a", "u1"))
    erase(app, user_id="u1")
    before = all_rows_text(app)
    result = CliRunner().invoke(main, ["erase", "--user", ERASED_USER, "--yes"],
                                env={"DREAM_DATABASE_URL": app.settings.database_url})
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: Invalid value for '--user': {ERASED_USER} is reserved for "
                           "the runs kept of erased users"), line
    assert all_rows_text(app) == before


def test_erase_reaches_a_user_whose_id_predates_the_look_alike_rule(app: App) -> None:
    """Ids with an invisible character are refused everywhere an id is taken, but one stored
    before that rule must still be erasable: `dream erase --user` takes it as it is stored."""
    from sqlalchemy import update

    from worker.domain.types import Scope
    from worker.store.models import NoteRow

    add_notes(app, {"id": "old-1", "agent_id": "a", "user_id": "u1", "content": "Legacy note"})
    legacy = "u1\u200b"
    with app.engine.begin() as conn:
        conn.execute(update(NoteRow).where(NoteRow.id == "old-1")
                     .values(user_id=legacy, scope_key=Scope("a", legacy).key))
    env = {"DREAM_DATABASE_URL": app.settings.database_url}
    refused = CliRunner().invoke(main, ["runs", "list", "--agent", "a", "--user", legacy], env=env)
    assert refused.exit_code == 2 and "has an invisible character" in refused.stderr
    result = CliRunner().invoke(main, ["erase", "--user", legacy, "--yes"], env=env)
    assert result.exit_code == 0, result.output
    assert "removed note old-1" in result.stdout
    assert "Legacy note" not in all_rows_text(app)
