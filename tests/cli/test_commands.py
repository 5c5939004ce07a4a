"""The `dream` command as a user meets it: one-line user errors that write nothing, JSONL round
trips, the gate through the CLI, run options, run inspection and the demo (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import func, select, text

from tests.conftest import make_sqlite_app
from tests.support.services import postgres_url
from worker.app import App
from worker.cli import main
from worker.domain.types import PHASES
from worker.errors import ConfigError, Conflict, NotFound, Unavailable
from worker.store.db import make_engine
from worker.store.models import AgentRow, DreamRunRow, NoteRow, SessionRow


def dream(url: str, *args: str, input: str | None = None, **env: str | None) -> Result:
    """Invoke `dream ARGS` with DREAM_DATABASE_URL=url and a clean DREAM_ environment."""
    environ = {"DREAM_DATABASE_URL": url, "DREAM_LOG_LEVEL": "WARNING", "DREAM_BROKER_URL": None,
               "DREAM_LLM_PROVIDER": "none", **env}
    return CliRunner().invoke(main, list(args), input=input, env=environ, catch_exceptions=False)


def one_error_line(result: Result, code: int = 2) -> str:
    """One `error:` line on stderr, nothing on stdout, the exit code of the error's class."""
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert result.stdout == ""
    return lines[0]


def counts(app: App) -> dict[str, int]:
    with app.uow() as uow:
        s = uow.session
        return {m.__tablename__: int(s.scalar(select(func.count()).select_from(m)) or 0)
                for m in (NoteRow, SessionRow, DreamRunRow, AgentRow)}


def url_of(app: App) -> str:
    return app.settings.database_url


NOTES: list[dict[str, Any]] = [
    {"id": "n1", "agent_id": "a1", "user_id": "u1", "content": "User prefers Python 3.12",
     "type": "Preference", "created_at": "2026-01-02T03:04:05+00:00", "importance": 0.9,
     "access_count": 3, "last_accessed_at": "2026-02-01T00:00:00+00:00",
     "metadata": {"source": "chat", "n": 1}},
    {"id": "n2", "agent_id": "a1", "user_id": "u1", "company_id": "c1",
     "content": "Never email the customer without asking", "type": "Constraint",
     "protection": "protected", "is_auto_generated": False,
     "source_conversation_id": "conv-9", "expires_at": "2027-01-01T00:00:00+00:00"},
    {"id": "n3", "agent_id": "a2", "content": "Sprint demo is on Friday", "type": "Context"},
]


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[App]:
    app = make_sqlite_app(tmp_path)
    yield app
    app.dispose()


# ---- user errors -------------------------------------------------------------------------------

BAD_NOTES = jsonl(NOTES[:2]) + '{"agent_id": "a1", "content": "ok"\n'
MISSING = jsonl(NOTES[:2]) + json.dumps({"agent_id": "a1"}) + "\n"

USER_ERRORS = [
    # (args, stdin, extra env, what the line must say)
    (["notes", "import", "/nonexistent/notes.jsonl"], None, {}, "file not found"),
    (["notes", "import", "-"], BAD_NOTES, {}, "line 3: not valid JSON"),
    (["notes", "import", "-"], MISSING, {}, "line 3: content is required"),
    (["notes", "import", "-"], '[1, 2]\n', {}, "line 1: expected a JSON object"),
    (["notes", "import", "-"], json.dumps({**NOTES[0], "colour": "red"}) + "\n", {}, "unknown field 'colour'"),
    (["notes", "import", "-"], json.dumps({**NOTES[0], "importance": 7}) + "\n", {}, "line 1: importance"),
    (["notes", "export", "--status", "gone"], None, {}, "unknown status"),
    (["sessions", "import", "-"], '{"agent_id": "a1"}\n', {}, "line 1: started_at is required"),
    (["sessions", "add", "--agent", "a1", "--at", "last tuesday"], None, {}, "--at"),
    (["entities", "import", "-"], '{"kind": "robot", "id": "r"}\n', {}, "line 1: kind must be"),
    (["runs", "show", "no-such-run"], None, {}, "no run with id no-such-run"),
    (["run", "--agent", "a1", "--now", "yesterday"], None, {}, "--now"),
    (["run", "--agent", "a1", "--force", "--now", "2026-13-45"], None, {}, "--now"),
    (["run", "--due", "--now", "soon"], None, {}, "--now"),
    (["run"], None, {}, "give either --agent"),
    (["run", "--user", "u1", "--due"], None, {}, "--user and --company need --agent"),
    (["run", "--agent", "a1", "--phase", "dance"], None, {}, "Invalid value for '--phase'"),
    (["run", "--agent", "a1", "--force", "--via-celery"], None, {}, "DREAM_BROKER_URL"),
    (["run", "--agent", "other", "--force", "--via-celery"], None,
     {"DREAM_BROKER_URL": "redis://127.0.0.1:1/0"}, "cannot reach the broker"),
    (["candidates", "--agent", "nobody"], None, {}, "unknown scope [\"nobody\",null,null]"),
    (["runs", "cancel", "no-such-run"], None, {}, "no run with id no-such-run"),
    (["run", "--agent", "a1", "--force", "--allow-retire", "-1"], None, {}, "--allow-retire"),
    (["no-such-command"], None, {}, "No such command"),
    (["runs", "list"], None, {"DREAM_GATE_HOURS": "a day"}, "invalid setting DREAM_GATE_HOURS"),
    (["runs", "list"], None, {"DREAM_CONSOLIDATE__THRESHOLD": "2"},
     "invalid setting DREAM_CONSOLIDATE__THRESHOLD"),
    (["runs", "list"], None, {"DREAM_LLM_PROVIDER": "magic"}, "invalid setting DREAM_LLM_PROVIDER"),
    # a free string that only takes some values: a traceback (ValueError: Unknown level) before
    (["runs", "list"], None, {"DREAM_LOG_LEVEL": "LOUD"}, "invalid setting DREAM_LOG_LEVEL"),
    (["--log-level", "LOUD", "runs", "list"], None, {}, "'--log-level': 'LOUD' is not one of"),
    # a scheme Celery does not know: a KeyError traceback (the result backend's after the run
    # row was written, which stayed queued)
    (["run", "--agent", "a1", "--force", "--via-celery"], None, {"DREAM_BROKER_URL": "foo://x"},
     "invalid setting DREAM_BROKER_URL: unknown scheme 'foo://'; use redis://"),
    (["run", "--agent", "a1", "--force", "--via-celery"], None,
     {"DREAM_BROKER_URL": "redis://127.0.0.1:1/0", "DREAM_RESULT_BACKEND": "foo://x"},
     "invalid setting DREAM_RESULT_BACKEND"),
    (["run", "--agent", "a1", "--force", "--via-celery"], None,
     {"DREAM_BROKER_URL": "redis://127.0.0.1:1/x"}, "DREAM_BROKER_URL redis://127.0.0.1:1/x cannot"),
    # ids past the 64 characters the README states, wherever a run or note id is taken
    (["runs", "show", "r" * 65], None, {}, "'RUN_ID': has 65 characters; ids are at most 64"),
    (["runs", "cancel", "r" * 65], None, {}, "'RUN_ID': has 65 characters"),
    (["undo", "r" * 65], None, {}, "'RUN_ID': has 65 characters"),
    (["erase", "--note", "n" * 65, "--yes"], None, {}, "'--note': has 65 characters"),
    (["keep-apart", "n1", "n" * 65], None, {}, "has 65 characters"),
    (["review", "show", "nope"], None, {}, "the item id must be an integer"),
    (["review", "approve", "nope"], None, {}, "'nope' is not an item id"),
    (["notes", "import", "-"], '{"agent_id": "a1", "content": "tab\there"}\n', {},
     "not valid JSON (Invalid control character at column 35)"),
    # text someone reads with nothing visible in it: imported, or a scope nobody can read
    # (before: accepted; an id or a name of zero-width spaces and Hangul fillers)
    (["notes", "import", "-"], json.dumps({"agent_id": "\u200b", "content": "x"}) + "\n", {},
     "line 1: agent_id has no visible character"),
    (["sessions", "add", "--agent", "\u3164"], None, {}, "'--agent': has no visible character"),
    (["entities", "import", "-"], json.dumps({"kind": "agent", "id": "a9",
                                              "name": "\u200b\u200b"}) + "\n", {},
     "line 1: name has no visible text"),
    (["entities", "import", "-"], json.dumps({"kind": "conversation", "id": "c9",
                                              "deleted_reason": " \u2800"}) + "\n", {},
     "line 1: deleted_reason has no visible text"),
    (["runs", "cancel", "no-such-run", "--reason", "\u2060"], None, {},
     "reason has no visible text"),
]

# The exit code of each error's class (worker.errors): 2 (invalid input or usage) unless here.
EXIT_CODES = {
    "file not found": NotFound.exit_code,
    "no run with id no-such-run": NotFound.exit_code,
    "unknown scope [\"nobody\",null,null]": NotFound.exit_code,
    "DREAM_BROKER_URL": ConfigError.exit_code,
    "cannot reach the broker": Unavailable.exit_code,
    "invalid setting DREAM_GATE_HOURS": ConfigError.exit_code,
    "invalid setting DREAM_CONSOLIDATE__THRESHOLD": ConfigError.exit_code,
    "invalid setting DREAM_LLM_PROVIDER": ConfigError.exit_code,
    "invalid setting DREAM_LOG_LEVEL": ConfigError.exit_code,
    "invalid setting DREAM_BROKER_URL: unknown scheme 'foo://'; use redis://": ConfigError.exit_code,
    "invalid setting DREAM_RESULT_BACKEND": ConfigError.exit_code,
    "DREAM_BROKER_URL redis://127.0.0.1:1/x cannot": ConfigError.exit_code,
}


@pytest.mark.parametrize(("args", "stdin", "env", "says"), USER_ERRORS,
                         ids=[" ".join(c[0]) + f"#{i}" for i, c in enumerate(USER_ERRORS)])
def test_user_error_is_one_line_with_its_class_exit_code_and_writes_nothing(
    db: App, args: list[str], stdin: str | None, env: dict[str, str], says: str,
) -> None:
    """Every mistake a user can make gives one 'error:' line naming it, the exit code of its
    class (2 for input and usage, 3 not found, 5 unavailable, 8 settings), and no rows."""
    dream(url_of(db), "sessions", "add", "--agent", "other")  # a non-empty store to compare
    before = counts(db)
    line = one_error_line(dream(url_of(db), *args, input=stdin, **env), EXIT_CODES.get(says, 2))
    assert says in line
    assert counts(db) == before


@pytest.mark.parametrize(("url", "shown"), [
    ("amqp://127.0.0.1:1//", "amqp://127.0.0.1:1//"),  # not amqp://guest:**@… (kombu's default)
    ("redis://127.0.0.1:1/0", "redis://127.0.0.1:1/0"),  # not redis://:**@… (no password)
    ("redis://bob:hunter2@127.0.0.1:1/0", "redis://bob:**@127.0.0.1:1/0"),
])
def test_an_unreachable_broker_is_named_as_given(db: App, url: str, shown: str) -> None:
    """The broker error shows the URL as configured, masking a password only when it has one,
    and names no broker product the URL did not choose."""
    dream(url_of(db), "sessions", "add", "--agent", "other")
    before = counts(db)
    line = one_error_line(dream(url_of(db), "run", "--agent", "other", "--force", "--via-celery",
                                DREAM_BROKER_URL=url), Unavailable.exit_code)
    assert f"cannot reach the broker at {shown} (" in line, line
    assert "hunter2" not in line and "Redis" not in line and "DREAM_BROKER_URL" in line
    assert counts(db) == before


def test_unreachable_database_is_one_line() -> None:
    """A database that does not answer: one line naming DREAM_DATABASE_URL, exit 5
    (unavailable), no traceback."""
    line = one_error_line(dream("postgresql://nobody@127.0.0.1:1/x", "runs", "list"),
                          Unavailable.exit_code)
    assert "cannot use the database" in line and "DREAM_DATABASE_URL" in line


def test_missing_schema_tells_to_upgrade_sqlite(tmp_path: Path) -> None:
    """A database without the schema points at `dream db upgrade` (SQLite)."""
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    for args in (["runs", "list"], ["notes", "export"], ["run", "--agent", "a", "--force"]):
        assert "run `dream db upgrade`" in one_error_line(dream(url, *args), ConfigError.exit_code)


@pytest.mark.postgres
def test_missing_schema_tells_to_upgrade_postgres() -> None:
    """Same on PostgreSQL: an empty schema, then `dream db upgrade` makes the command work."""
    schema = "t_" + uuid.uuid4().hex[:12]
    admin = make_engine(postgres_url())
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    base = postgres_url()
    url = f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema},public"
    try:
        assert "run `dream db upgrade`" in one_error_line(dream(url, "runs", "list"),
                                                         ConfigError.exit_code)
        assert dream(url, "db", "upgrade").exit_code == 0
        ok = dream(url, "runs", "list")
        assert ok.exit_code == 0 and "no runs yet" in ok.stdout
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


# ---- import / export ---------------------------------------------------------------------------

def test_notes_import_export_round_trip(app: App, tmp_path: Path) -> None:
    """Import is idempotent; export carries every imported field plus status and lineage; the
    exported file imports into a fresh store and exports identically (SQLite and PostgreSQL)."""
    src = tmp_path / "notes.jsonl"
    src.write_text(jsonl(NOTES), encoding="utf-8")
    first = dream(url_of(app), "notes", "import", str(src))
    assert first.exit_code == 0 and first.stdout.strip() == "read 3 notes: 3 added, 0 already present"
    again = dream(url_of(app), "notes", "import", str(src))
    assert again.stdout.strip() == "read 3 notes: 0 added, 3 already present"
    # the same content under a new id in the same scope is a duplicate, in another scope it is not
    twin = dream(url_of(app), "notes", "import", "-", input=jsonl([
        {**NOTES[2], "id": "n3-twin"}, {**NOTES[2], "id": "n3-other", "agent_id": "a3"}]))
    assert twin.stdout.strip() == "read 2 notes: 1 added, 1 already present"

    out = dream(url_of(app), "notes", "export")
    assert out.exit_code == 0
    rows = {r["id"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert set(rows) == {"n1", "n2", "n3", "n3-other"}
    for given in NOTES:
        got = rows[given["id"]]
        for key, value in given.items():
            if key.endswith("_at"):
                assert got[key].startswith(value[:19]), key
            else:
                assert got[key] == value, key
        assert got["status"] == "active" and got["lineage"] == [] and got["consolidated_into_id"] is None
    assert rows["n3"]["is_auto_generated"] is True and rows["n3"]["protection"] == "standard"

    only = dream(url_of(app), "notes", "export", "--agent", "a1", "--user", "u1", "--company", "c1")
    assert [json.loads(line)["id"] for line in only.stdout.splitlines()] == ["n2"]
    assert dream(url_of(app), "notes", "export", "--status", "archived").stdout == ""
    vec = json.loads(dream(url_of(app), "notes", "export", "--agent", "a2", "--with-embedding")
                     .stdout.splitlines()[0])
    assert len(vec["embedding"]) == app.embedder.dimensions and vec["embedding_model"]

    other = make_sqlite_app(tmp_path / "copy")
    try:
        copied = dream(url_of(other), "notes", "import", "-", input=out.stdout)
        assert copied.stdout.strip() == "read 4 notes: 4 added, 0 already present"
        assert dream(url_of(other), "notes", "export").stdout == out.stdout
    finally:
        other.dispose()


def test_an_export_with_embeddings_imports_bit_for_bit(app: App, tmp_path: Path) -> None:
    """`--with-embedding` writes each float32 exactly (nine significant digits) and import keeps
    a unit vector as it is: the copy holds the same vectors, to the bit, and exports the same
    lines, so similarities (and every decision built on them) do not move."""
    import numpy as np

    assert dream(url_of(app), "notes", "import", "-", input=jsonl(NOTES)).exit_code == 0
    out = dream(url_of(app), "notes", "export", "--with-embedding")
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    assert all(len(json.loads(line)["embedding"]) == app.embedder.dimensions for line in lines)

    def vectors(store: App) -> dict[str, bytes]:
        with store.uow() as uow:
            rows = uow.session.execute(select(NoteRow.id, NoteRow.embedding)).all()
        return {i: np.asarray(v, dtype=np.float32).tobytes() for i, v in rows}

    other = make_sqlite_app(tmp_path / "copy")
    try:
        copied = dream(url_of(other), "notes", "import", "-", input=out.stdout)
        assert copied.exit_code == 0, copied.output
        assert vectors(other) == vectors(app)
        assert dream(url_of(other), "notes", "export", "--with-embedding").stdout == out.stdout
    finally:
        other.dispose()


def test_bad_line_in_big_file_writes_nothing(db: App) -> None:
    """R22: line 1,001 is bad, so none of the 1,000 good lines before it are written."""
    good = [{"agent_id": "a1", "content": f"fact number {i}"} for i in range(1000)]
    result = dream(url_of(db), "notes", "import", "-", input=jsonl(good) + '{"agent_id": 5}\n')
    assert "line 1001" in one_error_line(result)
    assert counts(db)["notes"] == 0


def test_sessions_and_the_gate_through_the_cli(app: App) -> None:
    """`sessions add` feeds the gate: 4 sessions → not due (message, exit 0, no run); the 5th
    makes `dream run` run; `sessions import` is idempotent by id."""
    for day in range(1, 5):
        res = dream(url_of(app), "sessions", "add", "--agent", "a1", "--user", "u1",
                    "--at", f"2026-03-0{day}T10:00:00Z")
        assert res.exit_code == 0 and res.stdout.startswith('session recorded for ["a1","u1",null]')
    wait = dream(url_of(app), "run", "--agent", "a1", "--user", "u1")
    assert wait.exit_code == 0
    assert wait.stdout.startswith('not due for ["a1","u1",null]: 4 of 5 sessions')
    assert counts(app)["dream_runs"] == 0
    line = jsonl([{"id": "s5", "agent_id": "a1", "user_id": "u1", "started_at": "2026-03-05T10:00:00Z"}])
    assert dream(url_of(app), "sessions", "import", "-", input=line).stdout.strip() == \
        "read 1 sessions: 1 added, 0 already present"
    assert dream(url_of(app), "sessions", "import", "-", input=line).stdout.strip() == \
        "read 1 sessions: 0 added, 1 already present"
    ran = dream(url_of(app), "run", "--agent", "a1", "--user", "u1", "--now", "2026-03-06T00:00:00Z")
    assert ran.exit_code == 0 and " succeeded " in ran.stdout.splitlines()[0]
    assert [ln.split()[0] for ln in ran.stdout.splitlines()[1:5]] == list(PHASES)


def test_entities_import_upserts(app: App) -> None:
    """`entities import` writes agents/users/companies/conversations and re-importing updates."""
    rows: list[dict[str, Any]] = [
            {"kind": "agent", "id": "a1", "status": "active", "note_retention_days": 30},
            {"kind": "user", "id": "u1", "status": "deleted", "deleted_at": "2026-01-01T00:00:00Z"},
            {"kind": "company", "id": "c1"},
            {"kind": "conversation", "id": "conv-9", "status": "deleted", "deleted_reason": "gdpr"}]
    res = dream(url_of(app), "entities", "import", "-", input=jsonl(rows))
    assert res.exit_code == 0 and res.stdout.strip() == "read 4 entities: 4 upserted"
    res = dream(url_of(app), "entities", "import", "-",
                input=jsonl([{"kind": "agent", "id": "a1", "status": "disabled"}]))
    assert res.stdout.strip() == "read 1 entities: 1 upserted"
    with app.uow() as uow:
        agent = uow.entities.agent("a1")
        assert agent is not None and agent.status == "disabled"
        assert uow.entities.fetch("user", ["u1", "nobody"])["u1"].status == "deleted"


def test_an_agent_staleness_bound_without_an_idle_wait_is_imported_with_a_warning(
        app: App) -> None:
    """An agent's gate_max_stale_hours only ends an idle wait: without its own
    gate_idle_minutes or DREAM_GATE_IDLE_MINUTES it does nothing. It is still imported (the
    deployment may set an idle wait later), with one warning line naming the line and agent;
    an agent that has both, or none, says nothing."""
    rows: list[dict[str, Any]] = [{"kind": "agent", "id": "a1", "gate_max_stale_hours": 48},
            {"kind": "agent", "id": "a2", "gate_max_stale_hours": 48, "gate_idle_minutes": 30},
            {"kind": "agent", "id": "a3"}]
    res = dream(url_of(app), "entities", "import", "-", input=jsonl(rows))
    assert res.exit_code == 0 and res.stdout.strip() == "read 3 entities: 3 upserted"
    assert res.stderr.splitlines() == [
        "warning: line 1: agent 'a1' has gate_max_stale_hours but no gate_idle_minutes, and "
        "DREAM_GATE_IDLE_MINUTES is not set: a maximum staleness only ends an idle wait, so it "
        "does nothing; give the agent gate_idle_minutes too"]
    with app.uow() as uow:
        agent = uow.entities.agent("a1")
        assert agent is not None and agent.gate_max_stale_hours == 48


def test_an_agent_retention_past_the_protected_days_is_imported_with_a_warning(
        app: App) -> None:
    """Archive takes a protected note once it is unread past both its agent's
    note_retention_days and DREAM_ARCHIVE__PROTECTED_INACTIVE_DAYS (365): an agent keeping
    notes 400 days had protected notes that went as soon as any other, silently. Imported
    still, with one warning line naming the line and agent; 364 days says nothing."""
    rows: list[dict[str, Any]] = [{"kind": "agent", "id": "a1", "note_retention_days": 364},
                                  {"kind": "agent", "id": "a2", "note_retention_days": 400}]
    res = dream(url_of(app), "entities", "import", "-", input=jsonl(rows))
    assert res.exit_code == 0 and res.stdout.strip() == "read 2 entities: 2 upserted"
    assert res.stderr.splitlines() == [
        "warning: line 2: agent 'a2' has note_retention_days 400, not below "
        "DREAM_ARCHIVE__PROTECTED_INACTIVE_DAYS (365): archive takes a protected note once it is "
        "unread past both, so its protected notes go as soon as any other; give it fewer days, "
        "or raise DREAM_ARCHIVE__PROTECTED_INACTIVE_DAYS"]
    with app.uow() as uow:
        agent = uow.entities.agent("a2")
        assert agent is not None and agent.note_retention_days == 400


# ---- runs --------------------------------------------------------------------------------------

def test_run_options_and_run_inspection(app: App) -> None:
    """--force bypasses the gate, --dry-run changes no note, --phase skips the others, and
    `runs list/show --json` describe the runs; text `runs show` prints the step tree."""
    expired = {"id": "old", "agent_id": "a1", "content": "Offer ends Friday",
               "created_at": "2026-01-01T00:00:00Z", "expires_at": "2026-02-01T00:00:00Z"}
    dream(url_of(app), "notes", "import", "-", input=jsonl([expired, NOTES[2] | {"agent_id": "a1"}]))
    before = dream(url_of(app), "notes", "export").stdout

    dry = dream(url_of(app), "run", "--agent", "a1", "--force", "--dry-run",
                "--now", "2026-06-01T00:00:00Z")
    assert dry.exit_code == 0, dry.output
    assert dream(url_of(app), "notes", "export").stdout == before

    only = dream(url_of(app), "run", "--agent", "a1", "--force", "--phase", "archive",
                 "--now", "2026-06-01T00:00:00Z")
    assert only.exit_code == 0, only.output
    run_id = only.stdout.split()[1]

    listed = json.loads(dream(url_of(app), "runs", "list", "--json").stdout)
    assert [r["id"] for r in listed][0] == run_id and len(listed) == 2
    assert listed[1]["dry_run"] is True and listed[0]["phases"] == ["archive"]
    assert all(r["force"] and r["status"] == "succeeded" for r in listed)

    tree = json.loads(dream(url_of(app), "runs", "show", run_id, "--json").stdout)
    assert tree["clock"].startswith("2026-06-01T00:00:00")
    status = {s["phase"]: s["status"] for s in tree["steps"]}
    assert status == {"consolidate": "skipped", "contradictions": "skipped", "prune": "skipped",
                      "archive": status["archive"]}
    assert status["archive"] in ("succeeded", "no_items")
    text_tree = dream(url_of(app), "runs", "show", run_id).stdout
    assert text_tree.startswith(f"run {run_id}  succeeded")
    assert dream(url_of(app), "runs", "list").stdout.splitlines()[0].startswith(run_id)


def test_runs_list_filters_by_agent_user_company_and_status(db: App) -> None:
    """`runs list --agent A` lists A's runs of every user and company (before: no filter at
    all, so a new user's run hid among every agent's); --user, --company and --status narrow
    it; a filter of a known scope matching nothing says so; a bad status is one line, exit 2."""
    from worker.domain.types import Scope
    from worker.runs import service

    made = {}
    for scope in (Scope("a1"), Scope("a1", "u1"), Scope("a1", "u2", "c1"), Scope("a2", "u1")):
        made[scope] = service.create_run(db, scope)
    service.cancel_run(db, str(made[Scope("a1", "u1")]), "test")

    def ids(*args: str) -> set[str]:
        out = dream(url_of(db), "runs", "list", "--json", *args)
        assert out.exit_code == 0, out.output
        return {r["id"] for r in json.loads(out.stdout)}

    assert ids("--agent", "a1") == {made[s] for s in made if s.agent_id == "a1"}
    assert ids("--user", "u1") == {made[Scope("a1", "u1")], made[Scope("a2", "u1")]}
    assert ids("--agent", "a1", "--company", "c1") == {made[Scope("a1", "u2", "c1")]}
    assert ids("--agent", "a1", "--status", "cancelled") == {made[Scope("a1", "u1")]}
    assert dream(url_of(db), "sessions", "add", "--agent", "a3").exit_code == 0
    assert ids("--agent", "a3") == set()
    assert "no runs match" in dream(url_of(db), "runs", "list", "--agent", "a3").stdout
    assert "'--status': 'done' is not one of" in one_error_line(
        dream(url_of(db), "runs", "list", "--status", "done"))


def test_runs_list_prints_a_failed_runs_error_on_one_line(db: App) -> None:
    """A failed run's error is an exception's first line, which may quote what a phase read:
    a terminal escape or bidi override in it reached the terminal as it was."""
    from sqlalchemy import update

    from worker.domain.types import Scope
    from worker.runs import service
    from worker.store.models import DreamRunRow

    run_id = service.create_run(db, Scope("a1"))
    with db.engine.begin() as conn:
        conn.execute(update(DreamRunRow).where(DreamRunRow.id == run_id).values(
            status="failed", error="ValueError: bad \x1b]0;owned\x07 \u202eeman"))
    listed = dream(url_of(db), "runs", "list").stdout
    assert listed.rstrip("\n").endswith("(ValueError: bad \\x1b]0;owned\\x07 \\u202eeman)"), listed


def test_runs_list_pages_on_with_after(db: App) -> None:
    """`--limit` was the only bound: the runs past it could not be listed at all. Now a cut
    list says on stderr how to go on (`--json` stays one document), `--after` gives the next
    page, and a cursor of another listing is one line naming --after, exit 2."""
    from worker.domain.types import Scope
    from worker.runs import service

    made = service.create_runs(db, [Scope(f"a{k}") for k in range(3)], trigger="beat")
    first = dream(url_of(db), "runs", "list", "--json", "--limit", "2")
    shown = [r["id"] for r in json.loads(first.stdout)]
    assert first.stderr.strip() == f"more runs: add --after {shown[-1]}"
    rest = dream(url_of(db), "runs", "list", "--json", "--limit", "2", "--after", shown[-1])
    assert [r["id"] for r in json.loads(rest.stdout)] == [made[Scope("a2")]]
    assert rest.stderr == ""
    other = made[Scope("a1")]
    assert other is not None
    line = one_error_line(dream(url_of(db), "runs", "list", "--agent", "a0", "--after", other))
    assert line == (f"error: after: {made[Scope('a1')]!r} is no run of this listing; pass the "
                    "last run id of the page before (the one it named to go on with), with the "
                    "same filters"), line  # before: "(its 'next')", a name only the API uses


def test_a_cancel_reason_with_nothing_visible_is_refused_and_the_run_stays(db: App) -> None:
    """The reason is the run's status_reason on every dashboard: one of zero-width characters
    cancelled the run with a reason nobody could read. Now it is one line naming --reason,
    exit 2, and the run is still queued."""
    from worker.domain.types import Scope
    from worker.runs import service

    run_id = service.create_run(db, Scope("a1"))
    assert run_id is not None
    line = one_error_line(dream(url_of(db), "runs", "cancel", run_id, "--reason", "\u200b "))
    assert "reason has no visible text" in line and "--reason" in line
    with db.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and (run.status, run.status_reason) == ("queued", None)
    # before: accepted, and every run row printed the rest of its line reversed
    line = one_error_line(dream(url_of(db), "runs", "cancel", run_id, "--reason",
                                "stop\u202e devlos"))
    assert line.startswith("error: reason has a bidi override")
    with db.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and (run.status, run.status_reason) == ("queued", None)


def test_runs_list_finds_the_runs_kept_of_an_erased_user(app: App) -> None:
    """After `dream erase --user u1` the user's runs are kept under the placeholder their scope
    column shows; `runs list --user` takes it as a filter (before: refused as reserved, though
    listing those runs is what it is reserved for)."""
    from worker.domain.types import ERASED_USER, Scope
    from worker.runs import service
    from worker.safety.erase import erase

    kept = service.create_run(app, Scope("a1", "u1"))
    other = service.create_run(app, Scope("a1", "u2"))
    assert kept is not None and other is not None
    erase(app, user_id="u1")
    out = dream(url_of(app), "runs", "list", "--json", "--user", ERASED_USER)
    assert out.exit_code == 0, out.output
    assert [(r["id"], r["scope"]) for r in json.loads(out.stdout)] == [
        (kept, Scope("a1", ERASED_USER).key)]
    # the erased id itself names nothing any more: no note, session or run has it
    assert "unknown scope user_id 'u1'" in one_error_line(
        dream(url_of(app), "runs", "list", "--user", "u1"), NotFound.exit_code)


def test_second_run_for_a_busy_scope_is_refused(db: App) -> None:
    """A queued run for the scope makes `dream run` refuse with one line (the DB constraint)."""
    from worker.domain.types import Scope
    from worker.runs import service

    assert service.create_run(db, Scope("a1")) is not None
    before = counts(db)
    assert "is already queued" in one_error_line(
        dream(url_of(db), "run", "--agent", "a1", "--force"), Conflict.exit_code)
    assert counts(db) == before


def test_demo_on_a_temp_database(tmp_path: Path) -> None:
    """`dream demo --database F` builds the demo store in F, dreams, and says where to look next;
    the runs it made are then visible with `dream runs list`."""
    path = tmp_path / "demo.db"
    res = dream("sqlite:////nonexistent-dir/never-used.db", "demo", "--database", str(path))
    assert res.exit_code == 0, res.output
    assert path.exists() and "Next:" in res.stdout and "dream runs show" in res.stdout
    # each phase's line says what happened (before: every counter, zeros included)
    phases = [line for line in res.stdout.splitlines() if line.startswith("  consolidate ")]
    assert phases and "clusters_merged=1" in phases[0] and "=0" not in res.stdout, res.stdout
    listed = json.loads(dream(f"sqlite:///{path}", "runs", "list", "--json").stdout)
    assert len(listed) >= 1 and all(r["status"] == "succeeded" for r in listed)


def test_demo_with_the_scripted_model_does_what_its_notes_say(tmp_path: Path) -> None:
    """`DREAM_LLM_PROVIDER=fake DREAM_FAKE_LLM_SCRIPT=examples/fake-llm-demo.json dream demo`
    (the README's and the demo's own suggestion): the Python preferences are fused, the newer
    unit system retires the older, tea and coffee both stay, and every run succeeds (it ended
    blocked by the blast-radius guard, with the tea note retired by the Python one)."""
    from worker.demo import AGENT, USER

    path = tmp_path / "demo.db"
    script = str(Path(__file__).resolve().parents[2] / "examples" / "fake-llm-demo.json")
    res = dream("sqlite:////nonexistent-dir/never-used.db", "demo", "--database", str(path),
                DREAM_LLM_PROVIDER="fake", DREAM_FAKE_LLM_SCRIPT=script)
    assert res.exit_code == 0, res.output
    listed = json.loads(dream(f"sqlite:///{path}", "runs", "list", "--json").stdout)
    assert [r["status"] for r in listed] == ["succeeded", "succeeded"], listed
    exported = dream(f"sqlite:///{path}", "notes", "export", "--agent", AGENT, "--user", USER)
    status = {n["id"]: n for n in map(json.loads, exported.stdout.splitlines())}
    assert status["tea"]["status"] == status["coffee"]["status"] == "active"
    assert status["units-new"]["status"] == "active"
    assert status["units-old"]["consolidated_into_id"] == "units-new"
    assert all(status[f"py-{i}"]["status"] == "revoked" for i in range(1, 6))


def test_abandoned_queued_run_frees_the_scope(db: App) -> None:
    """A run the broker never received is marked failed with the reason, so the scope's next
    run is not refused by the one-active-run index forever."""
    from worker.domain.types import Scope
    from worker.runs import service

    run_id = service.create_run(db, Scope("a1"))
    assert run_id is not None and service.create_run(db, Scope("a1")) is None
    service.abandon_run(db, run_id, "could not enqueue: OperationalError")
    tree = json.loads(dream(url_of(db), "runs", "show", run_id, "--json").stdout)
    assert tree["status"] == "failed" and tree["error"] == "could not enqueue: OperationalError"
    assert service.create_run(db, Scope("a1")) is not None


def test_version_names_the_installed_package() -> None:
    from importlib.metadata import version

    from worker.cli import main

    shown = CliRunner().invoke(main, ["--version"])
    assert shown.exit_code == 0 and shown.output == f"dream, version {version('dream-worker')}\n"


def test_dream_mcp_help_names_every_tool_the_server_serves() -> None:
    """`dream mcp --help` lists each MCP tool (before: the four review_* tools were missing)."""
    pytest.importorskip("mcp", reason="the mcp extra is not installed")
    from tests.mcp.test_server import EXPECTED_ANNOTATIONS  # the tools the server is held to

    helped = " ".join(CliRunner().invoke(main, ["mcp", "--help"]).output.split())
    assert [t for t in EXPECTED_ANNOTATIONS if t not in helped] == []


def test_sessions_import_help_names_every_field_it_takes() -> None:
    """`dream sessions import --help` left out the optional ``id`` (the README's way to make a
    re-import add nothing) and stdin; it names every field the importer takes now."""
    helped = " ".join(CliRunner().invoke(main, ["sessions", "import", "--help"]).output.split())
    fields = ("agent_id", "started_at", "id,", "user_id", "company_id", "ended_at", "- for stdin")
    assert [f for f in fields if f not in helped] == [], helped
    assert "idempotent by id" in helped


@pytest.mark.parametrize("option", [["--dry-run"], ["--phase", "consolidate"]])
def test_run_due_refuses_what_it_cannot_honour_and_writes_nothing(db: App,
                                                                   option: list[str]) -> None:
    """`dream run --due` runs what the gate hands out, whole and for real, as beat does: it
    ignored --dry-run and --phase, so `--due --dry-run` on a due scope archived its expired
    notes. Now both are one usage line (as --force and --allow-retire are), nothing written."""
    expired = {"agent_id": "a1", "content": "Spring coupon SPRING10 is valid",
               "expires_at": "2026-01-01T00:00:00+00:00"}
    assert dream(url_of(db), "notes", "import", "-", input=jsonl([expired])).exit_code == 0
    for _ in range(5):
        assert dream(url_of(db), "sessions", "add", "--agent", "a1").exit_code == 0
    before = counts(db)
    line = one_error_line(dream(url_of(db), "run", "--due", *option))
    assert f"{option[0]} goes with --agent" in line
    assert counts(db) == before
    with db.uow() as uow:
        assert uow.session.scalar(select(NoteRow.status)) == "active"


def test_runs_show_of_a_run_that_never_finished_counts_no_notes_after(db: App) -> None:
    """A run cancelled while running has its notes counted before but never after (only the
    finish counts them): `dream runs show` printed "after {}", which reads as a run that left
    the scope with no notes. It prints "after —", as the dashboard does."""
    from worker.domain.types import Scope
    from worker.runs import service

    assert dream(url_of(db), "notes", "import", "-", input=jsonl(NOTES)).exit_code == 0
    snap = service.create_claimed_run(db, Scope("a2"), force=True)
    assert snap is not None
    service.cancel_run(db, snap.run_id, "ops test")
    shown = dream(url_of(db), "runs", "show", snap.run_id)
    assert shown.exit_code == 0, shown.output
    line = next(x for x in shown.stdout.splitlines() if "notes before" in x)
    assert line.strip() == "notes before {'active': 1} → after —"


def test_a_cancel_reason_past_500_characters_is_refused_and_the_run_stays(db: App) -> None:
    """A decline's reason is at most 500 characters; a cancel's had no bound: 100,000 were
    stored as the run's reason and in each of its four steps, and every `dream runs list` line
    and dashboard row of the run carried them. Now one line naming --reason, the run queued."""
    from worker.domain.types import Scope
    from worker.runs import service

    run_id = service.create_run(db, Scope("a1"))
    assert run_id is not None
    line = one_error_line(dream(url_of(db), "runs", "cancel", run_id, "--reason", "x" * 501))
    assert "--reason has 501 characters; at most 500" in line
    with db.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and (run.status, run.status_reason) == ("queued", None)
    assert dream(url_of(db), "runs", "cancel", run_id, "--reason", "x" * 500).exit_code == 0
