"""A first dream over a store too large for its contradictions budget: which histories settle
first, how many runs the store takes, and what each run reports as deferred.

Each profile of the evolving-fact suite (tests/bench/evolving.py) is loaded whole as its own
scope, never dreamed before, and dreamed once a day with the oracle judge
(tests/bench/eval_endstate.py) under a budget of ``--calls`` contradiction calls of
``--notes-per-call`` notes each. A history (a slot that changed) is settled when its current
value is the one active note of it. Per run: the histories settled, those changed in the
profile's last ``--recent-days`` days apart (what retrieval returns today), the topics deferred
and the largest ``oldest_deferral_days`` a step reported.
Run: ``.venv/bin/python -m tests.bench.eval_deferral [--profiles 20] [--runs 12]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from tests.bench.eval_endstate import OracleLLM, _line
from tests.bench.evolving import Profile, generate

Slot = tuple[str, str]  # (profile, slot)


def settled(app: Any, profiles: Sequence[Profile]) -> dict[Slot, bool]:
    """Each changing slot: whether its current value is its one active note."""
    from sqlalchemy import select

    from worker.store.models import NoteRow

    with app.uow() as uow:
        rows = uow.session.execute(
            select(NoteRow.user_id, NoteRow.content).where(NoteRow.status == "active")).all()
    active: dict[str, list[str]] = {}
    for user, content in rows:
        active.setdefault(user, []).append(content)
    out: dict[Slot, bool] = {}
    for p in profiles:
        gold = {n.text: n for n in p.notes}
        held: dict[str, list[str]] = {}
        for content in active.get(p.user_id, []):
            if (g := gold.get(content)) is not None:
                held.setdefault(g.slot, []).append(g.value)
        for slot, value in p.current.items():
            if p.changes.get(slot, 0) >= 1:
                out[(p.user_id, slot)] = held.get(slot) == [value]
    return out


def recent_slots(profiles: Sequence[Profile], days: int) -> set[Slot]:
    """The slots whose last change is at most ``days`` before the profile's last session."""
    last: dict[Slot, datetime] = {}
    for p in profiles:
        for n in p.notes:
            if n.kind == "version":
                key = (p.user_id, n.slot)
                last[key] = max(last.get(key, n.created_at), n.created_at)
    ends = {p.user_id: p.last_session for p in profiles}
    return {k for k, at in last.items() if ends[k[0]] - at <= timedelta(days=days)}


def dream_day(app: Any, profiles: Sequence[Profile], day: int) -> tuple[int, float]:
    """One dream per profile ``day`` days after its last session: (topics deferred, largest
    ``oldest_deferral_days``)."""
    from worker.domain.types import Scope
    from worker.reporting import run_tree
    from worker.runs import service

    deferred, oldest = 0, 0.0
    for p in profiles:
        run_id = service.create_run(app, Scope("eval", p.user_id), trigger="eval", force=True,
                                    clock=p.last_session + timedelta(days=day),
                                    allow_retire=len(p.notes))
        assert run_id is not None
        service.execute_run(app, run_id)
        for step in run_tree(app, run_id)["steps"]:
            if step["phase"] == "contradictions":
                out = step.get("output") or {}
                deferred += int(out.get("topics_deferred") or 0)
                oldest = max(oldest, float(out.get("oldest_deferral_days") or 0))
    return deferred, oldest


def evaluate(profiles: Sequence[Profile], runs: int, calls: int, notes_per_call: int,
             recent_days: int) -> list[str]:
    from tests.support.factories import add_entities, add_notes
    from worker.app import build_app
    from worker.config import Settings
    from worker.store.migrate import upgrade

    recent = recent_slots(profiles, recent_days)
    lines: list[str] = []
    first: dict[Slot, int] = {}
    now: dict[Slot, bool] = {}
    new: list[Slot] = []
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{tmp}/deferral.db", llm_provider="none")
        s = settings.contradictions
        s.max_calls_per_run, s.notes_per_call, s.small_scope_notes = calls, notes_per_call, 0
        app = build_app(settings, llm=OracleLLM({n.text: n for p in profiles for n in p.notes}))
        upgrade(app.engine)
        add_entities(app, {"kind": "agent", "id": "eval"},
                     *({"kind": "user", "id": p.user_id} for p in profiles))
        add_notes(app, *(_line(p, n, False, p.last_session) for p in profiles for n in p.notes))
        for day in range(1, runs + 1):
            deferred, oldest = dream_day(app, profiles, day)
            now = settled(app, profiles)
            for k, ok in now.items():
                if ok:
                    first.setdefault(k, day)
            new = [k for k in now if k in recent]
            lines.append(f"run {day}: recent histories settled {sum(now[k] for k in new)}/"
                         f"{len(new)}, older {sum(now[k] for k in now if k not in recent)}/"
                         f"{len(now) - len(new)}, topics deferred {deferred}, largest "
                         f"oldest_deferral_days {oldest}")
        app.dispose()
    older = [k for k in now if k not in recent]
    mean = {name: sum(first.get(k, runs + 1) for k in ks) / max(1, len(ks))
            for name, ks in (("recent", new), ("older", older))}
    lines.append(f"mean run a history settled: recent {mean['recent']:.2f}, "
                 f"older {mean['older']:.2f} (unsettled counted as run {runs + 1})")
    return lines


def main(argv: list[str] | None = None) -> int:
    from worker.logging import configure_logging

    ap = argparse.ArgumentParser(prog="eval_deferral", description=__doc__)
    ap.add_argument("--profiles", type=int, default=20)
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--calls", type=int, default=1, help="contradiction calls per run")
    ap.add_argument("--notes-per-call", type=int, default=8)
    ap.add_argument("--recent-days", type=int, default=30)
    args = ap.parse_args(argv)
    configure_logging("auto", "WARNING")
    profiles = generate(args.profiles, seed=args.seed, families_per_profile=(8, 12))
    print(f"# {len(profiles)} profiles, {sum(len(p.notes) for p in profiles)} notes, a first "
          f"dream each, {args.calls} call(s) of {args.notes_per_call} notes a run")
    for line in evaluate(profiles, args.runs, args.calls, args.notes_per_call,
                         args.recent_days):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
