"""`dream demo`: a small store that exercises every phase, dreamt on, then explained."""

from __future__ import annotations

import json
import shlex
import shutil
import sqlite3
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import platformdirs

from worker.app import App, build_app
from worker.clock import utcnow
from worker.config import load_settings
from worker.domain.limits import shown
from worker.domain.types import Scope
from worker.errors import InvalidInput
from worker.ingest.entities import import_entities
from worker.ingest.notes import import_notes
from worker.ingest.sessions import import_sessions
from worker.logging import configure_logging
from worker.reporting import run_tree, said_counters, step_actions, step_notes
from worker.resources import resource_dir
from worker.runs import service
from worker.store.db import is_sqlite_file
from worker.store.migrate import upgrade

AGENT = "demo-assistant"
USER = "alice"


def demo_notes(now_iso: Callable[[int], str]) -> list[dict[str, object]]:
    """The seed example plus one case for each other phase; ``now_iso(days_ago)`` dates them."""
    scope = {"agent_id": AGENT, "user_id": USER}
    return [
        # Consolidation: one preference stated five ways over three months.
        {"id": "py-1", **scope, "type": "Preference", "content": "User prefers Python",
         "created_at": now_iso(60), "access_count": 4},
        {"id": "py-2", **scope, "type": "Preference", "content": "user prefers python.",
         "created_at": now_iso(55), "access_count": 1},
        {"id": "py-3", **scope, "type": "Preference",
         "content": "User prefers Python 3.12 specifically", "created_at": now_iso(40),
         "access_count": 3},
        {"id": "py-4", **scope, "type": "Preference",
         "content": "User prefers Python 3.12 with type hints and pytest",
         "created_at": now_iso(20), "access_count": 2},
        # Worded close to py-4: the built-in hashing embedder sees shared words, not meaning.
        {"id": "py-5", **scope, "type": "Preference",
         "content": "User prefers Python 3.12 with type hints and unittest, not pytest",
         "created_at": now_iso(3), "access_count": 1},
        # Contradiction: the newer fact should retire the older one (with a model judging).
        {"id": "units-old", **scope, "type": "Preference",
         "content": "Customer uses metric units in every report", "created_at": now_iso(30)},
        {"id": "units-new", **scope, "type": "Preference",
         "content": "Customer uses imperial units in every report", "created_at": now_iso(2)},
        # Complementary facts: both must survive.
        {"id": "tea", **scope, "type": "Preference", "content": "User prefers tea in the afternoon",
         "created_at": now_iso(10)},
        {"id": "coffee", **scope, "type": "Preference",
         "content": "User drinks coffee in the morning", "created_at": now_iso(9)},
        # Archive: expired, and long unused.
        {"id": "expired", **scope, "type": "Context",
         "content": "Sprint 14 demo is scheduled for Friday", "created_at": now_iso(30),
         "expires_at": now_iso(1)},
        {"id": "stale", **scope, "type": "Context",
         "content": "User was evaluating a trial of a diagram tool", "created_at": now_iso(120),
         "last_accessed_at": now_iso(100)},
        # Manual notes are never archived, however old.
        {"id": "manual", **scope, "type": "Constraint", "is_auto_generated": False,
         "content": "Never send email on the user's behalf without asking",
         "created_at": now_iso(400)},
        # Prune: a note from a conversation that was deleted.
        {"id": "orphan-conv", **scope, "type": "Context",
         "content": "User asked about migrating the wiki to a new host",
         "created_at": now_iso(15), "source_conversation_id": "conv-deleted"},
        # Prune: a whole scope whose agent was disabled.
        {"id": "retired-1", "agent_id": "retired-bot", "user_id": USER, "type": "Context",
         "content": "User reports build failures on the old CI runner", "created_at": now_iso(50)},
    ]


def _dream_command() -> str:
    """How the user can call `dream` again: plain if it is on PATH, else this venv's script by
    its absolute path (``make run`` calls it as ``.venv/bin/dream``, valid in the checkout only)."""
    if shutil.which("dream"):
        return "dream"
    script = Path(sys.argv[0])
    return shlex.quote(str(script.absolute())) if script.name == "dream" else "dream"


def _next(echo: Callable[[str], None], path: Path, given: bool, run_id: str,
          provider: str) -> None:
    """Commands to paste from any directory: absolute paths, the same --database."""
    echo("Next:")
    dream = _dream_command()
    url = shlex.quote(f"sqlite:///{path.absolute()}")
    echo(f"  DREAM_DATABASE_URL={url} {dream} runs show {run_id}")
    echo(f"  DREAM_DATABASE_URL={url} {dream} notes export --status revoked")
    if provider != "none":
        return
    script = resource_dir("examples") / "fake-llm-demo.json"
    again = f"{dream} demo" + (f" --database {shlex.quote(str(path.absolute()))}" if given else "")
    if script.is_file():
        echo(f"  DREAM_LLM_PROVIDER=fake DREAM_FAKE_LLM_SCRIPT={shlex.quote(str(script.absolute()))} "
             f"{again}   # the same store judged by a scripted model")
    else:  # an install without the examples: say where the script is to be had
        echo(f"  DREAM_LLM_PROVIDER=fake DREAM_FAKE_LLM_SCRIPT=<examples/fake-llm-demo.json of "
             f"the dream-worker source> {again}   # the same store judged by a scripted model")


def seed_demo(app: App, now: datetime) -> int:
    """The demo's entities, notes and sessions, dated back from ``now``; how many notes."""

    def now_iso(days_ago: int) -> str:
        return (now - timedelta(days=days_ago)).isoformat()

    import_entities(app, [json.dumps(e) for e in (
        {"kind": "agent", "id": AGENT, "status": "active", "note_retention_days": 90},
        {"kind": "agent", "id": "retired-bot", "status": "disabled"},
        {"kind": "user", "id": USER, "status": "active"},
        {"kind": "conversation", "id": "conv-deleted", "status": "deleted"},
    )])
    notes = demo_notes(now_iso)
    import_notes(app, [json.dumps(n) for n in notes])
    import_sessions(app, [json.dumps({"agent_id": AGENT, "user_id": USER,
                                      "started_at": now_iso(d)}) for d in range(5)])
    return len(notes)


def run_demo(database: str | None, echo: Callable[[str], None] = print) -> str:
    path = Path(database) if database else Path(platformdirs.user_data_dir("dream-worker")) / "demo.db"
    refuse_unless_demo_store(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", *_SIDECARS):
        Path(str(path) + suffix).unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    settings = load_settings(database_url=url)
    configure_logging(settings.log_format, "WARNING")
    app = build_app(settings)
    try:
        upgrade(app.engine)
        notes = seed_demo(app, utcnow())
        judge = {"none": "rule-based judge (no model)", "fake": "scripted fake LLM",
                 "openai": f"model {settings.llm_model}"}[settings.llm_provider]
        echo(f"demo store: {path}  ({notes} notes, judge: {judge})")
        # The store is built to be cleaned: with a model judging, one run retires more than
        # the blast-radius guard's share of its 13 notes, which a real store would not.
        echo(f"each run may retire up to {notes} notes past the blast-radius guard's share "
             "(`dream run --allow-retire N`)")
        runs = service.create_runs(app, [Scope(AGENT, USER), Scope("retired-bot", USER)],
                                   trigger="demo", force=True, allow_retire=notes)
        run_ids = []
        for scope, run_id in runs.items():
            assert run_id is not None
            status = service.execute_run(app, run_id)
            run_ids.append(run_id)
            echo("")
            echo(f"dream run {run_id} on {scope.key}: {status}")
            _explain(app, run_id, echo)
        echo("")
        _next(echo, path, database is not None, run_ids[0], settings.llm_provider)
        return run_ids[0]
    finally:
        app.dispose()


DEMO_AGENTS = frozenset({AGENT, "retired-bot"})
_SIDECARS = ("-wal", "-shm")  # SQLite's write-ahead log and its index, deleted with the store
_AGENT_IDS = ("SELECT agent_id FROM notes UNION SELECT agent_id FROM sessions UNION SELECT "
              "agent_id FROM examples UNION SELECT agent_id FROM dream_runs UNION SELECT id FROM "
              "agents")


def refuse_unless_demo_store(path: Path) -> None:
    """The demo deletes its file and builds it afresh: only a missing or empty file or an
    earlier demo store (no agent but the demo's) may go, never a store of the user's own
    (`--database` pointed at it) or any other file."""
    for part in (path, *(Path(f"{path}{suffix}") for suffix in _SIDECARS)):
        # An empty device reads as an empty file: `--database /dev/null` unlinked the device
        # node (as root) and left a regular file in its place; a pipe or a directory likewise.
        if part.exists() and not part.is_file():
            raise InvalidInput(f"--database {path}: {part} is not a regular file (a directory, "
                               "a device or a pipe), and the demo deletes and rebuilds its file: "
                               "give the path of a new file")
    if not path.is_file() or path.stat().st_size == 0:
        return  # missing (a broken link included) or empty: nothing of anyone's is lost
    agents = _store_agents(path)
    if agents is None or not agents <= DEMO_AGENTS:
        raise InvalidInput(f"--database {path} already exists and is not a demo store; the "
                           "demo deletes its file and builds it afresh: give a new path, or "
                           "remove that file yourself if it may go")


def _store_agents(path: Path) -> set[str] | None:
    """The agents an SQLite dream store at ``path`` knows, read-only; None for any other file."""
    try:
        if not is_sqlite_file(path):  # (never a descriptor of our own: worker.store.db)
            return None
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return {str(row[0]) for row in conn.execute(_AGENT_IDS)}
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return None


def _explain(app: object, run_id: str, echo: Callable[[str], None]) -> None:
    tree = run_tree(app, run_id)  # type: ignore[arg-type]
    for step in tree["steps"]:
        output = step["output"] or {}
        echo(f"  {step['phase']:<15} {step['status']:<9} {said_counters(output)}".rstrip())
        for child in step["children"]:
            out = child["output"] or {}
            verdict = out.get("verdict") or child["status"]
            reason = out.get("reason") or ""
            echo(f"      - {child['name']}: {verdict}{' — ' + shown(reason) if reason else ''}")
            label, ids = step_notes(child)
            decided = step_actions(child)  # a contradictions step's decisions name its notes
            if ids and not decided:  # a cluster's notes, what a guard held, what was archived
                echo(f"          {label}: {', '.join(ids)}")
            if out.get("content") and verdict in ("merge", "stale"):
                target = f" → {out['new_note_id']}" if out.get("new_note_id") else ""
                echo(f"          fused{target}: {shown(out['content'])}")
            for said in decided:
                echo(f"          {said}")
    with app.uow() as uow:  # type: ignore[attr-defined]
        scope = Scope(tree["agent_id"], tree["user_id"], tree["company_id"])
        snap = uow.notes.load_scope(scope, statuses=("active", "revoked", "archived"))
    active = [n for n in snap.notes if n.status == "active"]
    echo(f"  active notes now ({len(active)}):")
    for n in sorted(active, key=lambda n: n.id):
        echo(f"      {n.id:<12} {shown(n.content)}")
    retired = [n for n in snap.notes if n.status != "active"]
    if retired:
        echo("  retired (kept, with the reason, undoable):")
        for n in sorted(retired, key=lambda n: n.id):
            pointer = f" → {n.consolidated_into_id}" if n.consolidated_into_id else ""
            echo(f"      {n.id:<12} {n.status}{pointer}")
