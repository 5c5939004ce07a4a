"""The README quick start, black box through the CLI on a fresh store (SQLite and PostgreSQL):
it must retire nothing (R25: an empty entity registry is no evidence that anyone is gone)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from worker.app import App
from worker.cli import main

NOTES = [
    {"agent_id": "support-bot", "user_id": "alice", "content": "Alice prefers e-mail over calls",
     "type": "Preference", "source_conversation_id": "conv-1"},
    {"agent_id": "support-bot", "user_id": "alice", "content": "Alice's laptop runs Fedora 41",
     "type": "Context", "source_conversation_id": "conv-2"},
    {"agent_id": "support-bot", "user_id": "alice", "company_id": "acme",
     "content": "Acme's support contract renews in March", "type": "Context"},
    {"agent_id": "support-bot", "user_id": "alice", "content": "Never schedule calls on Fridays",
     "type": "Constraint", "source_conversation_id": "conv-1"},
    {"agent_id": "support-bot", "user_id": "bob", "content": "Bob is the billing contact",
     "type": "Context"},
]


def dream(app: App, *args: str) -> Result:
    environ = {"DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LOG_LEVEL": "WARNING",
               "DREAM_BROKER_URL": None, "DREAM_LLM_PROVIDER": "none"}
    result = CliRunner().invoke(main, list(args), env=environ, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_readme_quick_start_on_a_fresh_store_retires_nothing(app: App, tmp_path: Path) -> None:
    """Import notes, add a session, `dream run --force`, no `dream entities import`: every note
    is still active, the run succeeded, and the prune step counts the unknown references it did
    not act on."""
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps(n) + "\n" for n in NOTES), encoding="utf-8")
    dream(app, "db", "upgrade")
    dream(app, "notes", "import", str(notes))
    dream(app, "sessions", "add", "--agent", "support-bot", "--user", "alice")
    ran = dream(app, "run", "--agent", "support-bot", "--user", "alice", "--force")
    assert " succeeded " in ran.stdout.splitlines()[0] + " ", ran.stdout
    run_id = ran.stdout.split()[1]

    exported = [json.loads(line) for line in dream(app, "notes", "export").stdout.splitlines()]
    assert len(exported) == len(NOTES)
    assert {n["status"] for n in exported} == {"active"}
    assert not any(n.get("comments") for n in exported)

    tree = json.loads(dream(app, "runs", "show", run_id, "--json").stdout)
    assert tree["status"] == "succeeded" and tree["status_reason"] is None
    assert tree["totals"]["notes_before"] == tree["totals"]["notes_after"] == {"active": 3}
    prune = next(s for s in tree["steps"] if s["phase"] == "prune")["output"]
    assert prune["notes_archived"] == 0
    # Counted per note: the scope's three notes all name the unregistered agent and user, and
    # each names a conversation the registry has never heard of.
    assert (prune["unknown_agents"], prune["unknown_users"], prune["unknown_conversations"]) == (
        3, 3, 3)
