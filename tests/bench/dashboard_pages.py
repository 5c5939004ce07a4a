"""Benchmark (not a timed test): dashboard page times over many runs and scopes.

Run: .venv/bin/python -m tests.bench.dashboard_pages [--scopes 1000] [--runs 20] [--url URL]
Rows are written directly (runs, four phase steps and one model child each, 20 notes a scope):
a timing figure for the page reads, not a dream. Prints the median of 5 requests per page.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import insert

from worker.api import create_api
from worker.app import App, build_app
from worker.clock import utcnow
from worker.config import Settings
from worker.logging import configure_logging
from worker.store.migrate import upgrade
from worker.store.models import DreamRunRow, NoteRow, RunStepRow

TOKEN = "bench-admin-token-0123456789"
STATUSES = ["succeeded"] * 8 + ["blocked", "partial", "failed"]
PHASES = ("consolidate", "contradictions", "prune", "archive")


def _run_rows(key: str, agent: str, r: int, at: datetime) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run_id, status = str(uuid.uuid4()), random.choice(STATUSES)
    run = {"id": run_id, "scope_key": key, "agent_id": agent, "status": status, "trigger": "beat",
           "force": False, "dry_run": False, "phases": list(PHASES), "attempts": 1,
           "lease_epoch": 1, "created_at": at, "started_at": at, "requeues": 0,
           "finished_at": at + timedelta(seconds=3),
           "status_reason": None if status == "succeeded" else "bench reason",
           "totals": {"notes_before": {"active": 20}, "notes_after": {"active": 18, "revoked": 2},
                      "open_candidates": r % 5}}
    steps: list[dict[str, Any]] = []
    for k, phase in enumerate(PHASES):
        parent = str(uuid.uuid4())
        steps.append({"id": parent, "run_id": run_id, "parent_id": None, "scope_key": key,
                      "phase": phase, "name": phase, "seq": k, "status": "succeeded",
                      "input": {}, "output": {"notes_revoked": 2, "clusters_deferred": r % 3},
                      "model": None, "tokens_in": 500, "tokens_out": 50, "started_at": at,
                      "duration_ms": 10.0})
        if phase == "consolidate":
            steps.append({"id": str(uuid.uuid4()), "run_id": run_id, "parent_id": parent,
                          "scope_key": key, "phase": phase, "name": "cluster 1", "seq": 9,
                          "status": "succeeded", "input": {"note_ids": ["a", "b"]},
                          "output": {"verdict": "merge"}, "model": "m", "tokens_in": 500,
                          "tokens_out": 50, "started_at": at, "duration_ms": None})
    return run, steps


def seed(app: App, scopes: int, runs: int) -> str:
    """Write the rows; return the newest run's id."""
    now = utcnow()
    all_runs: list[dict[str, Any]] = []
    all_steps: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for s in range(scopes):
        agent = f"agent-{s}"
        key = json.dumps([agent, None, None], separators=(",", ":"))
        for r in range(runs):
            run, steps = _run_rows(key, agent, r, now - timedelta(days=runs - r, seconds=s))
            all_runs.append(run)
            all_steps += steps
        notes += [{"id": str(uuid.uuid4()), "scope_key": key, "agent_id": agent, "content": "x",
                   "content_hash": str(n), "status": "active" if n < 18 else "revoked",
                   "created_at": now, "updated_at": now} for n in range(20)]
    with app.engine.begin() as conn:
        for table, rows in ((DreamRunRow, all_runs), (RunStepRow, all_steps), (NoteRow, notes)):
            for i in range(0, len(rows), 5000):
                conn.execute(insert(table), rows[i:i + 5000])
    print(f"{len(all_runs)} runs, {len(all_steps)} steps, {len(notes)} notes in {scopes} scopes "
          f"({app.engine.dialect.name})")
    return str(max(all_runs, key=lambda r: r["created_at"])["id"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scopes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--url", default=None, help="database URL (default: a fresh SQLite file)")
    args = parser.parse_args()
    configure_logging("console", "WARNING")
    url = args.url or f"sqlite:///{Path(tempfile.mkdtemp()) / 'dashboard.db'}"
    app = build_app(Settings(database_url=url,
                             api_tokens=json.dumps({TOKEN: {"role": "admin"}})))
    upgrade(app.engine)
    newest = seed(app, args.scopes, args.runs)
    with TestClient(create_api(app)) as client:
        for path in ("/dashboard", "/dashboard?page=40", "/dashboard?scope=agent-7",
                     f"/dashboard/runs/{newest}"):
            times = []
            for _ in range(5):
                started = time.perf_counter()
                reply = client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
                times.append(time.perf_counter() - started)
                assert reply.status_code == 200, reply.text[:300]
            print(f"{path:<60} median {sorted(times)[2] * 1000:7.1f} ms")
    app.dispose()


if __name__ == "__main__":
    main()
