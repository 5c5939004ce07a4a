"""R31 through the `dream` command: hostile or careless input (lone surrogates, invalid UTF-8,
NaN/Infinity/huge numbers, timestamps that overflow, deep nesting, NUL characters, over-long ids,
id clashes, broken database paths) is one `error:` line, the exit code of its
class, and the store stays as it was."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.support.factories import add_notes
from tests.support.safety import all_rows_text
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.errors import ConfigError, Unavailable

ROOT = Path(__file__).resolve().parents[2]
SECRET = "Zanzibar-canary-4471 prefers oat milk"  # note text that must never be echoed


def dream(url: str, args: list[str], stdin: str | bytes | None = None,
          **env: str) -> Result:
    environ = {"DREAM_DATABASE_URL": url, "DREAM_LOG_LEVEL": "WARNING", "DREAM_BROKER_URL": None,
               "DREAM_LLM_PROVIDER": "none", **env}
    return CliRunner().invoke(main, args, input=stdin, env=environ)


def one_error_line(result: Result, code: int = 2) -> str:
    """Exactly one `error:` line on stderr, nothing on stdout, no exception escaped, and the
    exit code of the error's class (worker.errors; 2 is invalid input or usage)."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert result.stdout == ""
    return lines[0]


def note(**fields: object) -> str:
    return json.dumps({"agent_id": "a", "content": SECRET, **fields})


DIMS = 512
FINE = note(id="fine") + "\n"

HOSTILE = [
    # (args, stdin, what the error line says)
    # numbers: NaN / Infinity are not JSON; 1e400 parses as infinity; 5000 digits beat int()
    (["notes", "import", "-"], FINE + note(importance="NaN").replace('"NaN"', "NaN"), "line 2: NaN is not a finite number"),
    (["notes", "import", "-"], FINE + note(importance=0).replace("0}", "Infinity}"), "line 2: Infinity is not a finite number"),
    (["notes", "import", "-"], FINE + note(importance=0).replace("0}", "1e400}"), "line 2: 1e400 is not a finite number"),
    (["notes", "import", "-"], FINE + note(access_count=0).replace("0}", "9" * 5000 + "}"), "line 2: a number is too large"),
    (["notes", "import", "-"], FINE + note(access_count=2**40), "line 2: access_count must be between"),
    (["examples", "import", "-"], json.dumps({"agent_id": "a", "input": "i", "output": "o",
                                              "success_score": 1}).replace("1}", "-Infinity}"),
     "line 1: -Infinity is not a finite number"),
    # embeddings (item 12): non-finite, or beyond float32 (which would silently become inf)
    (["notes", "import", "-"], note(embedding=[1e39] + [0.0] * (DIMS - 1)), "embedding values must be finite"),
    (["notes", "import", "-"], note(embedding=[0.5] * DIMS).replace("0.5]", "NaN]"), "NaN is not a finite number"),
    (["notes", "import", "-"], note(embedding=[0] * DIMS).replace("0]", "1" + "0" * 400 + "]"),
     "embedding values must be finite"),
    # a boolean is no number, among numbers too (numpy would read it as 1.0)
    (["notes", "import", "-"], FINE + note(embedding=[True] + [0.5] * (DIMS - 1)),
     "line 2: embedding must be an array of numbers"),
    # text no backend stores the same way (item 22): NUL, lone surrogates, at any depth
    (["notes", "import", "-"], FINE + note(content="tea\u0000time"), "line 2: content contains a NUL character"),
    (["notes", "import", "-"], FINE + note(metadata={"k": ["x\u0000"]}), "line 2: metadata contains a NUL"),
    (["notes", "import", "-"], FINE + note().replace("oat", "\\ud800oat"), "line 2: content is not valid Unicode"),
    (["sessions", "import", "-"], json.dumps({"agent_id": "a\udfff", "started_at": "2026-01-01"}),
     "line 1: agent_id is not valid Unicode"),
    # ids longer than the column, and scope keys whose escaped form overflows theirs (item 22)
    (["notes", "import", "-"], FINE + note(id="n" * 65), "line 2: id has 65 characters"),
    (["notes", "import", "-"], FINE + note(agent_id="a" * 65), "line 2: agent_id has 65 characters"),
    (["notes", "import", "-"], FINE + note(agent_id="é" * 60, user_id="é" * 60), "scope key is"),
    (["notes", "import", "-"], FINE + note(embedding_model="m" * 201, embedding=[0.1] * DIMS), "embedding_model has 201"),
    (["entities", "import", "-"], json.dumps({"kind": "conversation", "id": "c", "deleted_reason": "r" * 33}),
     "deleted_reason has 33 characters"),
    # invalid UTF-8 on stdin, and nesting that would blow the parser's recursion
    (["notes", "import", "-"], FINE.encode() + b'{"agent_id": "a", "content": "\xff\xfe"}\n', "line 2: not valid UTF-8"),
    (["notes", "import", "-"], "[" * 100_000, "line 1: nested more than"),
    (["notes", "import", "-"], FINE + note(metadata=0).replace("0}", '{"a":' * 200 + "1" + "}" * 200 + "}"),
     "line 2: nested more than"),
    # timestamps that overflow once converted to UTC, or leave no room for date arithmetic
    (["notes", "import", "-"], FINE + note(created_at="0001-01-01T00:00:00+01:00"), "line 2: created_at: timestamp"),
    (["run", "--agent", "a", "--force", "--now", "0001-01-01T00:00:00+01:00"], None, "--now: timestamp"),
    (["gate", "--now", "9999-12-31T23:59:59-01:00"], None, "out of range"),
    (["sessions", "add", "--agent", "a", "--at", "9999-12-31T23:00:00Z"], None, "--at: timestamp"),
    # a run that writes dated in the future: its notes and decisions would be stamped with a
    # time that has not come, and every later run reads them so (`--dry-run`/`--explain` may)
    (["run", "--agent", "a", "--force", "--now", "2099-01-01"], None, "later than the present time"),
    (["run", "--due", "--now", "2099-01-01T00:00:00Z"], None, "gate --explain"),
    (["gate", "--now", "2099-01-01"], None, "later than the present time"),
    (["sessions", "add", "--agent", "a", "--at", "2062-01-01"], None, "--at 2062-01-01 is later than"),
    # the same session imported: stored, and never counted by the gate (each line is checked
    # before any is written: the first line, fine, is not stored either)
    (["sessions", "import", "-"],
     json.dumps({"agent_id": "a", "started_at": "2026-01-01T00:00:00Z"}) + "\n"
     + json.dumps({"agent_id": "a", "started_at": "2099-01-01T00:00:00Z"}),
     "line 2: started_at 2099-01-01T00:00:00+00:00 is later than the present time"),
    # a session that ends in the future, or before it started (each line checked first)
    (["sessions", "import", "-"],
     json.dumps({"agent_id": "a", "started_at": "2026-01-01T00:00:00Z"}) + "\n"
     + json.dumps({"agent_id": "a", "started_at": "2026-01-02T00:00:00Z",
                   "ended_at": "2099-01-01T00:00:00Z"}),
     "line 2: ended_at 2099-01-01T00:00:00+00:00 is later than the present time"),
    (["sessions", "import", "-"],
     json.dumps({"agent_id": "a", "started_at": "2026-01-02T00:00:00Z",
                 "ended_at": "2026-01-01T23:00:00Z"}),
     "line 1: ended_at 2026-01-01T23:00:00+00:00 is before started_at 2026-01-02T00:00:00+00:00; "
     "give the time the session ended, or leave ended_at out"),
    # unhashable values where a choice is expected (a TypeError before)
    (["notes", "import", "-"], FINE + note(status=["active"]), "line 2: status must be one of"),
    (["entities", "import", "-"], json.dumps({"kind": {"agent": 1}, "id": "x"}), "line 1: kind must be one of"),
    # sessions and entities accept only their own fields (item 14); a bad agent name is named
    (["sessions", "import", "-"], json.dumps({"agent_id": "a", "started_at": "2026-01-01", "colour": 1}),
     "line 1: unknown field 'colour'"),
    (["entities", "import", "-"], json.dumps({"kind": "user", "id": "u", "name": "Ann"}), "line 1: unknown field 'name'"),
    (["entities", "import", "-"], json.dumps({"kind": "agent", "id": "a", "name": ["x"]}), "line 1: name must be a string"),
    (["entities", "import", "-"], json.dumps({"kind": "agent", "id": "a", "name": "n" * 201}), "name has 201 characters"),
    (["entities", "import", "-"], json.dumps({"kind": "agent", "id": "a", "note_retention_days": 10**12}),
     "note_retention_days must be a whole number of days"),
    # option values: numbers that are not finite or not in range, ids that do not fit
    (["runs", "list", "--limit", "1e30"], None, "--limit"),
    (["runs", "list", "--limit", "1" + "0" * 30], None, "--limit"),
    (["run", "--agent", "a", "--force", "--allow-retire", "1" + "0" * 30], None, "--allow-retire"),
    (["candidates", "--agent", "a", "--threshold", "nan"], None, "not a finite number"),
    (["notes", "add", "--agent", "a", "--content", "hi", "--importance", "nan"], None, "not a finite number"),
    (["notes", "add", "--agent", "a" * 65, "--content", "hi"], None, "ids are at most 64"),
    # every scope option, not only the ones of --agent-required commands (found by the README check)
    (["gate", "--explain", "--agent", "a" * 65], None, "ids are at most 64"),
    (["gate", "--explain", "--agent", "a", "--user", "u" * 65], None, "ids are at most 64"),
    (["mcp", "--agent", "a" * 65], None, "ids are at most 64"),
    (["mcp", "--agent", "a", "--company", "c" * 65], None, "ids are at most 64"),
    # the option an argument is the value of is named (before: its position alone)
    (["notes", "add", "--agent", "a", "--content", "hi\x00there"], None,
     "argument 6 (--content) contains a NUL"),
    (["notes", "add", "--agent", "a", "--content", "hi\udcff"], None,
     "argument 6 (--content) is not valid Unicode"),
    (["run", "--agent", "a\udcff", "--force"], None, "argument 3 (--agent) is not valid Unicode"),
    (["notes", "add", "--agent=a\udcff", "--content", "hi"], None,
     "argument 3 (--agent) is not valid Unicode"),
    (["keep-apart", "n1", "n\udcff"], None, "argument 3 is not valid Unicode"),  # no option's
    (["review", "decline", "1", "--agent", "a", "--reason", "\ud800"], None,
     "argument 7 (--reason) is not valid Unicode"),
]


@pytest.mark.parametrize(("args", "stdin", "says"), HOSTILE,
                         ids=[f"{' '.join(a[:2])}#{i}" for i, (a, _, _) in enumerate(HOSTILE)])
def test_hostile_cli_input_is_one_error_line_and_changes_nothing(
    app: App, args: list[str], stdin: str | bytes | None, says: str,
) -> None:
    """Each input the adversarial pass broke the CLI with (and its siblings) now gives exit 2,
    one `error:` line naming the problem, no note text, and a byte-identical database, on
    SQLite and on PostgreSQL (where NUL, over-long ids and 32-bit overflows used to surface)."""
    add_notes(app, {"id": "existing", "agent_id": "a", "content": "An existing note"})
    before = all_rows_text(app)
    line = one_error_line(dream(app.settings.database_url, args, stdin))
    assert says in line, line
    assert "Zanzibar" not in line
    assert all_rows_text(app) == before


def test_a_future_clock_is_for_looking_and_a_present_one_runs(app: App) -> None:
    """`--now` later than the present (beyond the hour of clock skew) is refused only where the
    run writes: a dry run and the gate's explanation may look at that time, and a clock within
    the skew still runs (the rows above show the refusals)."""
    add_notes(app, {"id": "n1", "agent_id": "a", "content": "Offer ends Friday",
                    "expires_at": "2030-01-01T00:00:00Z"})
    url = app.settings.database_url
    future = "2099-01-01T00:00:00Z"
    dry = dream(url, ["run", "--agent", "a", "--force", "--dry-run", "--now", future])
    assert dry.exit_code == 0 and "notes_expired=1" in dry.stdout, dry.output
    assert dream(url, ["gate", "--explain", "--now", future]).exit_code == 0
    soon = (utcnow() + timedelta(minutes=30)).isoformat()
    assert dream(url, ["run", "--agent", "a", "--force", "--now", soon]).exit_code == 0
    with app.uow() as uow:
        assert [n.status for n in uow.notes.get_many(["n1"])] == ["active"]


def test_sessions_import_takes_the_skew_and_notes_import_a_dated_corpus(app: App) -> None:
    """A session started (or ended) within the hour of clock skew is imported (as `sessions
    add --at` takes it); notes and examples keep their dates whatever they are (harnesses
    import dated corpora, and contradictions handle notes dated after the run's clock)."""
    url = app.settings.database_url
    soon = (utcnow() + timedelta(minutes=30)).isoformat()
    assert dream(url, ["sessions", "import", "-"],
                 json.dumps({"agent_id": "a", "started_at": soon})).exit_code == 0
    ended = {"agent_id": "a", "started_at": utcnow().isoformat(), "ended_at": soon}
    assert dream(url, ["sessions", "import", "-"], json.dumps(ended)).exit_code == 0
    later = {"agent_id": "a", "created_at": "2099-01-01T00:00:00Z"}
    assert dream(url, ["notes", "import", "-"],
                 json.dumps({**later, "content": "Tea."})).exit_code == 0
    assert dream(url, ["examples", "import", "-"],
                 json.dumps({**later, "input": "hi", "output": "hello"})).exit_code == 0
    with app.uow() as uow:
        assert uow.notes.count_by_status() == {"active": 1}


def test_id_clashes_on_import_are_reported_not_dropped(app: App) -> None:
    """Item 13: the same id with other content (in the file or already stored), an id already
    used by another scope, and 1 vs "1" are refused naming the line; re-importing the same note
    under its id is still an idempotent duplicate (SQLite and PostgreSQL)."""
    url = app.settings.database_url
    stored = json.dumps({"id": "n1", "agent_id": "a", "content": "User likes tea"})
    assert dream(url, ["notes", "import", "-"], stored).exit_code == 0
    before = all_rows_text(app)
    clashes = [
        (stored + "\n" + json.dumps({"id": "n2", "agent_id": "a", "content": "x"}) + "\n"
         + json.dumps({"id": "n2", "agent_id": "a", "content": "y"}), "line 3: id 'n2' is also the id of line 2"),
        (json.dumps({"id": 7, "agent_id": "a", "content": "x"}) + "\n"
         + json.dumps({"id": "7", "agent_id": "a", "content": "z"}), "line 2: id '7' is also the id of line 1"),
        (json.dumps({"id": "n1", "agent_id": "a", "content": "User likes coffee"}), "note 'n1' already exists with other content"),
        (json.dumps({"id": "n1", "agent_id": "b", "content": "User likes tea"}), "already used by a note of another scope"),
    ]
    for stdin, says in clashes:
        assert says in one_error_line(dream(url, ["notes", "import", "-"], stdin))
        assert all_rows_text(app) == before
    again = dream(url, ["notes", "import", "-"], stored)
    assert again.exit_code == 0 and "0 added, 1 already present" in again.stdout


def test_session_example_and_entity_clashes_are_reported(app: App) -> None:
    """Siblings of item 13: a session or example id reused for another session/example, and an
    entity given twice with different values, are refused instead of one line winning silently."""
    url = app.settings.database_url
    session = {"id": "s1", "agent_id": "a", "started_at": "2026-01-01T00:00:00Z"}
    example = {"id": "e1", "agent_id": "a", "input": "hi", "output": "hello"}
    assert dream(url, ["sessions", "import", "-"], json.dumps(session)).exit_code == 0
    assert dream(url, ["examples", "import", "-"], json.dumps(example)).exit_code == 0
    before = all_rows_text(app)
    cases = [
        (["sessions", "import", "-"], json.dumps({**session, "started_at": "2026-02-01T00:00:00Z"}), "session 's1' already exists"),
        (["sessions", "import", "-"], json.dumps({**session, "id": "s2"}) + "\n"
         + json.dumps({**session, "id": "s2", "agent_id": "b"}), "line 2: session id 's2' is also"),
        (["examples", "import", "-"], json.dumps({**example, "output": "bye"}), "example 'e1' already exists"),
        (["entities", "import", "-"], json.dumps({"kind": "user", "id": "u"}) + "\n"
         + json.dumps({"kind": "user", "id": "u", "status": "deleted"}), "line 2: user 'u' is also line 1"),
    ]
    for args, stdin, says in cases:
        assert says in one_error_line(dream(url, args, stdin))
        assert all_rows_text(app) == before
    assert "0 added, 1 already present" in dream(url, ["sessions", "import", "-"], json.dumps(session)).stdout


def test_database_paths_that_cannot_work_are_one_line(tmp_path: Path) -> None:
    """Item 10/16: a missing SQLite file is named with what to run and is NOT created by any
    command but `dream db upgrade`; a parent that is a file, a junk file, a damaged database, a
    directory and an unsupported or unparsable URL are each one line."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"definitely not sqlite" * 10)
    damaged = tmp_path / "damaged.db"
    with sqlite3.connect(damaged) as conn:
        conn.execute("CREATE TABLE t (x)")
    image = bytearray(damaged.read_bytes())
    image[100:4096] = b"\xa5" * (4096 - 100)  # the header survives, the schema page does not
    damaged.write_bytes(bytes(image))
    missing = tmp_path / "sub" / "dream.db"
    pipe = tmp_path / "pipe.db"
    os.mkfifo(pipe)
    cases = [
        (f"sqlite:///{damaged}", ["runs", "list"], "the SQLite database file is damaged"),
        (f"sqlite:///{missing}", ["runs", "list"], "run `dream db upgrade` to create it"),
        (f"sqlite:///{missing}", ["notes", "export"], "no database at"),
        (f"sqlite:///{missing}", ["notes", "import", "-"], "no database at"),
        (f"sqlite:///{blocker / 'x.db'}", ["runs", "list"], "no database at"),
        (f"sqlite:///{blocker / 'x.db'}", ["db", "upgrade"], "is a file, not a directory"),
        (f"sqlite:///{junk}", ["runs", "list"], "is not an SQLite database"),
        (f"sqlite:///{tmp_path}", ["runs", "list"], "points at the directory"),
        # before: `runs list` waited for ever on the pipe; /dev/null was "no schema"
        (f"sqlite:///{pipe}", ["runs", "list"], "which is not a regular file"),
        (f"sqlite:///{pipe}", ["db", "upgrade"], "which is not a regular file"),
        ("sqlite:////dev/null", ["runs", "list"], "which is not a regular file"),
        ("mysql://root@localhost/dream", ["runs", "list"], "does not support"),
        ("gopher://x", ["db", "upgrade"], "does not support"),
        ("::not a url::", ["runs", "list"], "not a database URL"),
    ]
    for url, args, says in cases:
        code = Unavailable.exit_code if "damaged" in says else ConfigError.exit_code
        assert says in one_error_line(dream(url, args, ""), code), (url, args)
    assert not missing.exists() and not missing.parent.exists()
    assert junk.read_bytes() == b"definitely not sqlite" * 10
    created = dream(f"sqlite:///{missing}", ["db", "upgrade"])
    assert created.exit_code == 0 and missing.exists()
    assert dream(f"sqlite:///{missing}", ["runs", "list"]).exit_code == 0


def test_database_urls_a_driver_cannot_use_are_one_line(tmp_path: Path) -> None:
    """Each was a traceback: a port that is not a number (ValueError from the URL parser), a
    driver that is not installed (ModuleNotFoundError), an SQLite option the driver cannot
    convert (ValueError), a PostgreSQL option libpq refuses (ProgrammingError on connect); an
    SQLite option the driver does not take was a warning and the command ran on."""
    db = tmp_path / "dream.db"
    db.touch()  # an empty file is an empty SQLite database: the driver is reached
    for url, says in (
        ("postgresql://u:secret@127.0.0.1:abc/x", "not a database URL"),
        ("postgresql://[::1/x", "not a database URL"),
        ("postgresql+psycopg2://u:secret@127.0.0.1:1/x",
         "names the driver 'postgresql+psycopg2', whose module psycopg2 is not installed"),
        (f"sqlite+pysqlcipher:///{db}", "names the driver 'sqlite+pysqlcipher'"),
        (f"sqlite:///{db}?timeout=abc", "an option after `?` is not usable"),
        # pysqlite only warned about an option it does not take, and the command went on.
        (f"sqlite:///{db}?foo=bar", "an option after `?` is not usable ('foo'"),
        ("postgresql://u:secret@127.0.0.1:1/x?foo=bar", 'invalid connection option "foo"'),
        ("postgresql://127.0.0.1:1/x?connect_timeout=abc", "bad value for connect_timeout"),
    ):
        line = one_error_line(dream(url, ["runs", "list"], ""), ConfigError.exit_code)
        assert says in line and "secret" not in line, (url, line)


def test_invalid_utf8_in_argv_and_stdin_through_a_real_process(app: App) -> None:
    """The real `dream` process: argv bytes that are not UTF-8 (Python decodes them to lone
    surrogates) and a stdin line that is not UTF-8 are one line each, never a traceback."""
    env = {**os.environ, "DREAM_DATABASE_URL": app.settings.database_url,
           "DREAM_LOG_LEVEL": "WARNING", "PYTHONIOENCODING": "utf-8"}
    before = all_rows_text(app)
    cli: list[str | bytes] = [sys.executable, "-c", "from worker.cli import main; main()"]
    for argv, stdin, says in (
        ([b"sessions", b"add", b"--agent", b"caf\xe9"], b"", b"argument 4 (--agent) is not valid Unicode"),
        ([b"notes", b"import", b"-"], FINE.encode() + b'{"agent_id":"a","content":"\xc3"}\n',
         b"line 2: not valid UTF-8"),
    ):
        done = subprocess.run([*cli, *argv], input=stdin, env=env, cwd=ROOT, capture_output=True,
                              timeout=60)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().startswith(b"error: ") and says in done.stderr
        assert b"Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert all_rows_text(app) == before


def test_demo_database_paths_are_one_line(tmp_path: Path) -> None:
    """`dream demo --database` (not fuzzed: each valid path is a whole demo) on a path under a
    file, on a directory, with a name too long for the file system, or with a NUL: one line."""
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    for path, says in ((str(blocker / "demo.db"), "cannot use"),
                       (str(tmp_path), "is not a regular file"),
                       (str(tmp_path / ("d" * 300)), "cannot use"),
                       ("demo\x00.db", "contains a NUL character")):
        assert says in one_error_line(dream(f"sqlite:///{tmp_path / 'unused.db'}",
                                            ["demo", "--database", path]))
    assert blocker.read_text() == "x"


@pytest.mark.postgres
def test_a_missing_postgres_database_or_role_is_not_a_missing_schema() -> None:
    """Sibling of item 14's misleading advice: a PostgreSQL database or role that does not
    exist is named as such, not as "no dream-worker schema; run `dream db upgrade`"."""
    from sqlalchemy.engine import make_url

    from tests.support.services import postgres_url

    base = make_url(postgres_url())
    for url, says in ((base.set(database="no_such_db_r31"), 'database "no_such_db_r31" does not exist'),
                      (base.set(username="no_such_role_r31"), 'role "no_such_role_r31" does not exist')):
        line = one_error_line(dream(url.render_as_string(hide_password=False), ["runs", "list"]),
                              ConfigError.exit_code)
        assert says in line and "create it or fix DREAM_DATABASE_URL" in line, line
        assert "schema" not in line
