"""Issue 12.5 at scale: SIGKILL in the middle of consolidation's merges, recover, compare.

    .venv/bin/python -m tests.bench.crash_mid_merge [--topics 150] [--kill-at 100]

One scope of TOPICS × 10 paraphrases (each topic splits into a cluster of 7 and one of 3), a
fake model that fuses every cluster into its topic sentence. Database A runs crash-free; B's
`dream run` is SIGKILLed at the n-th merge (`consolidate.before_step@n`), then recovered the way
beat does it (lease expired → gate_check → a fresh process). Prints both active counts and
whether the two end states are equal note for note (tests/integration/test_crash_recovery.py's
`exact_state`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import string
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from tests.integration.test_crash_recovery import DETAILS, DREAM, exact_state
from tests.support.factories import NOW, days_ago
from worker.app import App, build_app
from worker.clock import utcnow
from worker.config import Settings
from worker.ingest import import_notes
from worker.runs import service
from worker.store.migrate import upgrade

AGENT = "bench-crash"


def _topics(count: int, rng: random.Random) -> list[str]:
    def word() -> str:
        return "".join(rng.choice(string.ascii_lowercase) for _ in range(7))

    return [" ".join(word() for _ in range(5)) for _ in range(count)]


def _store(app: App, topics: list[str]) -> None:
    import_notes(app, [json.dumps({"agent_id": AGENT, "id": f"t{t:04}-{k}",
                                   "content": f"{text} {detail}", "created_at": days_ago(40 - k)})
                       for t, text in enumerate(topics) for k, detail in enumerate(DETAILS)])


def _script(topics: list[str], path: Path) -> None:
    path.write_text(json.dumps({
        "model": "fake-bench",
        "rules": [{"prompt": "consolidate", "contains": [text.split()[0]],
                   "reply": {"should_consolidate": True, "content": text, "type": "Context",
                             "source_ids": "$aliases", "reason": "one fact"}}
                  for text in topics],
        "default": {"should_consolidate": False, "content": "", "type": "Context",
                    "source_ids": [], "reason": "unscripted", "topics": []},
    }))


def _run(env: dict[str, str], crash_at: str | None) -> int:
    environ = {**os.environ, **env}
    environ.pop("DREAM_CRASH_AT", None)
    if crash_at:
        environ["DREAM_CRASH_AT"] = crash_at
    done = subprocess.run([DREAM, "run", "--agent", AGENT, "--force", "--now", NOW.isoformat(),
                           "--phase", "consolidate"], env=environ, capture_output=True,
                          text=True, timeout=3600)
    return done.returncode


def _active(app: App) -> int:
    with app.uow() as uow:
        return int(uow.notes.count_by_status().get("active", 0))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=150)
    parser.add_argument("--kill-at", type=int, default=100)
    args = parser.parse_args()
    rng = random.Random(12)
    topics = _topics(args.topics, rng)
    tmp = Path(tempfile.mkdtemp(prefix="crash-mid-merge-"))
    script = tmp / "script.json"
    _script(topics, script)
    states = {}
    for name, crash in (("crash-free", None), ("killed", f"consolidate.before_step@{args.kill_at}")):
        url = f"sqlite:///{tmp / name}.db"
        app = build_app(Settings(database_url=url, llm_provider="none"))
        upgrade(app.engine)
        _store(app, topics)
        env = {"DREAM_DATABASE_URL": url, "DREAM_LLM_PROVIDER": "fake",
               "DREAM_FAKE_LLM_SCRIPT": str(script), "DREAM_GUARD__MAX_RETIRE_SHARE": "1.0",
               "DREAM_LOG_LEVEL": "WARNING"}
        code = _run(env, crash)
        if crash:
            print(f"{name}: dream run exited {code}; active after the kill: {_active(app)}")
            later = utcnow() + timedelta(seconds=app.settings.lease_seconds + 60)
            (run_id,) = service.gate_check(app, now=later).retried
            recover = ("import sys; from worker.app import build_app; from worker.runs.service "
                       "import execute_run; execute_run(build_app(), sys.argv[1])")
            subprocess.run([sys.executable, "-c", recover, run_id],
                           env={**os.environ, **env}, check=True, capture_output=True)
        print(f"{name}: {len(topics) * len(DETAILS)} notes in {2 * len(topics)} clusters → "
              f"{_active(app)} active")
        states[name] = exact_state(app)
        app.dispose()
    print("end states equal note for note:", states["crash-free"] == states["killed"])


if __name__ == "__main__":
    main()
