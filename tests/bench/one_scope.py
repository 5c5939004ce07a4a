"""Time one full run (all four phases) over 1,000 active notes in one scope with a zero-latency LLM.

    .venv/bin/python -m tests.bench.one_scope [--notes 1000] [--database sqlite|postgres]

The store mixes paraphrase clusters, dated near-duplicates, notes citing deleted conversations,
expired and long-unused notes and filler; the FakeLLM answers at once (no merge, every pair
independent, every review "archive"), so the figure is the worker's own cost.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.support.factories import NOW
from worker.app import build_app
from worker.config import Settings
from worker.ingest import import_entities, import_notes
from worker.llm.fake import FakeLLM, FakeRule
from worker.runs import service

SUBJECTS = ["editor", "language", "database", "framework", "shell", "browser", "cloud", "laptop"]
VALUES = ["Vim", "Emacs", "Python", "Rust", "Go", "PostgreSQL", "SQLite", "Django", "zsh", "AWS"]


def _notes(n: int, rng: random.Random) -> list[dict[str, Any]]:
    notes = []
    for i in range(n):
        kind = i % 10
        note: dict[str, Any] = {"agent_id": "bench", "id": f"n{i:05}",
                                "created_at": (NOW - timedelta(days=rng.randint(1, 60))).isoformat(),
                                "last_accessed_at": (NOW - timedelta(days=rng.randint(0, 30))).isoformat()}
        s, v = rng.choice(SUBJECTS), rng.choice(VALUES)
        if kind < 3:  # paraphrase clusters
            note["content"] = f"User prefers {v} for {s} (variant {i % 7})"
        elif kind == 3:
            note["content"] = f"Fact {i}: the project uses {v}"
            note["source_conversation_id"] = f"gone-{i}"
        elif kind == 4:
            note["content"] = f"Reminder {i}: renew the {s} licence"
            note["expires_at"] = (NOW - timedelta(days=1)).isoformat()
        elif kind == 5:
            note["content"] = f"Old context {i} about {s}"
            note["last_accessed_at"] = (NOW - timedelta(days=120)).isoformat()
        else:
            words = " ".join(rng.choice(SUBJECTS + VALUES) for _ in range(8))
            note["content"] = f"Filler {i}: {words}"
        notes.append(note)
    return notes


def _fake_llm() -> FakeLLM:
    def verdicts(prompt_name: str, system: str, user: str) -> dict[str, Any]:
        found = re.search(r"Topic ids to answer: (.*)\.", user)
        ids = [t.strip() for t in found.group(1).split(",")] if found else []
        return {"topics": [{"topic": t, "attributes": []} for t in ids]}

    def decisions(prompt_name: str, system: str, user: str) -> dict[str, Any]:
        return {"decisions": [{"id": i, "decision": "archive", "reason": "bench"}
                              for i in re.findall(r'"id": "([^"]+)"', user)]}

    return FakeLLM(rules=[
        FakeRule(prompt="consolidate", reply={"should_consolidate": False, "content": "",
                                              "type": "Context", "source_ids": [], "reason": "bench"}),
        FakeRule(prompt="contradictions", reply=verdicts),
        FakeRule(prompt="prune", reply=decisions),
        FakeRule(prompt="archive", reply=decisions),
    ], model="fake-zero-latency")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=1000)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    if args.database == "postgres":
        from tests.conftest import drop_postgres_app, make_postgres_app

        app = make_postgres_app()
    else:
        from worker.store.migrate import upgrade

        tmp = Path(tempfile.mkdtemp())
        app = build_app(Settings(database_url=f"sqlite:///{tmp / 'bench.db'}"))
        upgrade(app.engine)
    llm = _fake_llm()
    app.llm = llm
    app.settings.prune.review = "llm"
    app.settings.archive.review = "llm"
    app.settings.archive.high_importance = 0.5  # every stale note (importance 0.5) goes to review
    rng = random.Random(7)
    import_entities(app, [json.dumps({"kind": "agent", "id": "bench"})])
    import_notes(app, [json.dumps(n) for n in _notes(args.notes, rng)])

    from worker.domain.types import Scope

    # The benchmark measures the phases, not the blast-radius guard: allow every note.
    run_id = service.create_run(app, Scope("bench"), force=True, clock=NOW,
                                allow_retire=args.notes)
    assert run_id
    started = time.perf_counter()
    status = service.execute_run(app, run_id)
    elapsed = time.perf_counter() - started
    from worker.reporting import run_tree

    tree = run_tree(app, run_id)
    print(json.dumps({
        "notes": args.notes, "database": args.database, "status": status,
        "seconds": round(elapsed, 2), "llm_calls": dict(llm.counts()),
        "phase_ms": tree["totals"].get("phase_ms"),
        "outputs": {s["phase"]: {k: v for k, v in (s["output"] or {}).items()
                                 if isinstance(v, int | float)} for s in tree["steps"]},
        "notes_after": tree["totals"].get("notes_after"),
    }, indent=1))
    if args.database == "postgres":
        drop_postgres_app(app)
    else:
        app.dispose()


if __name__ == "__main__":
    main()
