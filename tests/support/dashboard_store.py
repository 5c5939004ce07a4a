"""A store of several real runs for dashboard tests, dreamt by the worker itself.

Two Apps on one database stand for two worker deployments: one judged by the scripted fake model
(examples/fake-llm-demo.json, so model calls and tokens are recorded), one rules-only (nobody
judges its open pairs, so they grow run after run until the run is blocked for it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from worker.app import App, build_app
from worker.clock import utcnow
from worker.demo import AGENT, USER, demo_notes
from worker.domain.types import Scope
from worker.ingest.entities import import_entities
from worker.ingest.notes import import_notes
from worker.ingest.sessions import import_sessions
from worker.runs import service

DEMO_SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "fake-llm-demo.json"
DEMO = Scope(AGENT, USER)
QUIET = Scope("quiet-bot")
OTHER = Scope("agent-2")


@dataclass
class SeededStore:
    runs: dict[str, list[str]] = field(default_factory=dict)  # scope key → run ids, in order

    def add(self, scope: Scope, run_id: str) -> None:
        self.runs.setdefault(scope.key, []).append(run_id)


def _jsonl(rows: list[dict[str, object]]) -> list[str]:
    return [json.dumps(r) for r in rows]


def dream(app: App, scope: Scope, store: SeededStore, **options: object) -> str:
    run_id = service.create_run(app, scope, trigger="test", force=True, **options)  # type: ignore[arg-type]
    assert run_id is not None
    service.execute_run(app, run_id)
    store.add(scope, run_id)
    return run_id


def _python_round(k: int, now_iso: object) -> list[dict[str, object]]:
    """Three more wordings of the Python preference: the scripted model merges them."""
    at = now_iso(1)  # type: ignore[operator]
    return [{"id": f"py-r{k}-{i}", "agent_id": AGENT, "user_id": USER, "type": "Preference",
             "content": text, "created_at": at} for i, text in enumerate((
                 f"User prefers Python 3.12 with type hints and unittest (round {k})",
                 f"user prefers python 3.12, type hints, unittest; round {k}",
                 f"User prefers Python 3.12 plus unittest and type hints, round {k}"))]


def _quiet_round(k: int) -> list[dict[str, object]]:
    """Near-identical reminders the rules cannot settle: more open pairs every round."""
    return [{"id": f"q{k}-{i}", "agent_id": QUIET.agent_id, "type": "Context",
             "content": f"Weekly report goes to the finance team on Friday, variant {k}.{i}"}
            for i in range(k + 1)]


def seed_dashboard_store(modelled: App, rules_only: App) -> SeededStore:
    """Blocked, succeeded, dry-run and growing-open runs across three scopes."""
    store = SeededStore()
    now = utcnow()

    def now_iso(days: int) -> str:
        return (now - timedelta(days=days)).isoformat()

    import_entities(modelled, _jsonl([
        {"kind": "agent", "id": AGENT, "status": "active", "note_retention_days": 90},
        {"kind": "user", "id": USER, "status": "active"},
        {"kind": "conversation", "id": "conv-deleted", "status": "deleted"}]))
    import_notes(modelled, _jsonl([n for n in demo_notes(now_iso) if n["agent_id"] == AGENT]))
    import_sessions(modelled, _jsonl([{"agent_id": AGENT, "user_id": USER,
                                       "started_at": now_iso(d)} for d in range(5)]))
    dream(modelled, DEMO, store)  # the blast-radius guard stops it: blocked
    dream(modelled, DEMO, store, dry_run=True)
    dream(modelled, DEMO, store, allow_retire=20)
    for k in range(1, 3):
        import_notes(modelled, _jsonl(_python_round(k, now_iso)))
        dream(modelled, DEMO, store)
    import_notes(modelled, _jsonl([{"agent_id": OTHER.agent_id, "content": "Works from Lisbon."}]))
    dream(modelled, OTHER, store)
    for k in range(1, 4):
        import_notes(rules_only, _jsonl(_quiet_round(k)))
        dream(rules_only, QUIET, store)
    return store


def second_app(app: App) -> App:
    """Another deployment on the same database: same settings, no model (rules judge)."""
    settings = app.settings.model_copy(update={"llm_provider": "none", "fake_llm_script": None})
    return build_app(settings, embedder=app.embedder)
