"""End states on the evolving-fact suite (tests/bench/evolving.py), per judge, after each run.

Judges: ``oracle`` — a fake model answering every contradictions topic from the gold (same
prompt, same JSON protocol, through the phase's validation) and refusing every fusion, so what
is measured is the pipeline's recall, not a model's quality; ``lumping`` — the oracle, except
that on a share of the topics holding two attributes (``--lump-rate``) it calls them one, the
error that retires a current fact, so what more candidates cost with a fallible model is
measured; ``fusing`` — the oracle, except that it fuses a consolidation cluster of one value's
restatements into one note (worded as the newest), as a model that consolidates would;
``merging`` — likewise a cluster of one attribute's notes whatever their values, into the last
statement the prompt lists (the consolidation prompt's "keep the version stated last");
``rules`` — the rule-based judge; ``host`` — the rule-based judge in the runs, and after each
run a host's perfect model working through the host surface (``fusion_candidates``, then
``fuse`` into the newest statement by the records' order, or ``keep_apart``), so what is
measured is what that surface offers a host's model.
Run: ``.venv/bin/python -m tests.bench.eval_endstate [--profiles N] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from tests.bench.evolving import FAMILIES, MIN_GAP_DAYS, GoldNote, Profile, generate
from worker.llm.base import LLMReply


class OracleLLM:
    """Answers the contradictions prompt from the gold: notes of one slot are one attribute,
    notes of one value are one value group; facts that stand alone are left out."""

    model = "oracle"

    def __init__(self, gold: dict[str, GoldNote], lump_rate: float = 0.0) -> None:
        self.gold = gold  # note text → gold
        self.lump_rate = lump_rate
        self.calls: dict[str, int] = {}
        self.unknown_texts = 0
        self.lumped = 0  # topics answered as one attribute though they held several
        # ``fusing``: one value's restatements become one note ("value"); ``merging``: one
        # attribute's notes, whatever their values, become its last statement ("attribute").
        self.fuses = ""
        self.fused = 0

    def complete_json(self, *, prompt_name: str, system: str, user: str,
                      schema: dict[str, Any]) -> LLMReply:
        from tests.support.topic_judge import prompt_topics

        self.calls[prompt_name] = self.calls.get(prompt_name, 0) + 1
        if prompt_name.startswith("contradictions"):
            data: Any = {"topics": [self._topic(t) for t in prompt_topics(user)]}
        elif prompt_name.startswith("consolidate"):
            data = self._fusion(user) if self.fuses else _refusal(
                "oracle: versions are judged as contradictions")
        else:
            data = {}
        raw = json.dumps(data)
        return LLMReply(data=data, tokens_in=(len(system) + len(user)) // 4,
                        tokens_out=len(raw) // 4, model=self.model, raw=raw)

    def _fusion(self, user: str) -> dict[str, Any]:
        """A cluster of one attribute's one value (``fusing``), or of one attribute
        (``merging``, as the prompt's "keep the version stated last" asks), becomes one note,
        worded as the last statement the prompt lists; anything else is refused."""
        from tests.bench.bench_llm import first_json_array

        notes = first_json_array(user)
        gold = [self.gold.get(n["content"]) for n in notes]
        key = (lambda g: g.slot) if self.fuses == "attribute" else (lambda g: (g.slot, g.value))
        if any(g is None for g in gold) or len({key(g) for g in gold if g}) != 1:
            return _refusal("oracle: not one value")
        # The last the prompt lists (oldest first): a text's gold may be another profile's note.
        newest = notes[-1]
        self.fused += 1
        return {"should_consolidate": True, "content": newest["content"], "type": notes[0]["type"],
                "source_ids": [n["alias"] for n in notes], "reason": "oracle: one value"}

    def _topic(self, topic: dict[str, Any]) -> dict[str, Any]:
        slots: dict[str, dict[str, list[str]]] = {}
        for n in topic["notes"]:
            g = self.gold.get(n["text"])
            if g is None:
                self.unknown_texts += 1
                continue
            slots.setdefault(g.slot, {}).setdefault(g.value, []).append(n["alias"])
        if len(slots) > 1 and self._lumps(topic):
            self.lumped += 1
            values: dict[str, list[str]] = {}
            for by_value in slots.values():
                for value, aliases in by_value.items():
                    values.setdefault(value, []).extend(aliases)
            slots = {"lumped": values}
        attributes = [
            {"name": slot, "confidence": 1.0, "reason": "oracle",
             "values": [{"notes": aliases} for aliases in values.values()]}
            for slot, values in slots.items() if sum(len(a) for a in values.values()) > 1]
        return {"topic": topic["topic"], "attributes": attributes}

    def _lumps(self, topic: dict[str, Any]) -> bool:
        """The same topic (the same notes) is lumped on every run: a fixed draw per topic."""
        digest = hashlib.sha256("\0".join(sorted(n["text"] for n in topic["notes"])).encode())
        return int.from_bytes(digest.digest()[:8], "big") / 2**64 < self.lump_rate


def _refusal(reason: str) -> dict[str, Any]:
    return {"should_consolidate": False, "content": "", "type": "Context", "source_ids": [],
            "reason": reason}


@dataclass
class RunFigures:
    exact: int = 0
    lost: int = 0
    superseded_active: int = 0
    duplicates_active: int = 0
    retired_superseded: int = 0
    retired: int = 0
    calls: int = 0  # contradictions model calls, this run and before
    tokens: int = 0
    consolidate_calls: int = 0
    wasted: int = 0
    deferred: int = 0
    failed: int = 0  # runs failed or partial, this run and before (each an error in the log)
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)  # "profile/slot: expected, held"


@dataclass
class SuiteResult:
    judge: str
    profiles: int
    facts: int
    superseded: int
    per_run: list[RunFigures] = field(default_factory=list)
    fused: int = 0  # ``fusing``: clusters the judge fused (restatements of one value)
    host: HostFigures | None = None  # ``host``: what the host's model was offered and did


@dataclass
class HostFigures:
    offered: int = 0  # items listed by ``fusion_candidates``, every round
    fused: int = 0
    kept_apart: int = 0
    refused: int = 0  # items gone stale within a round (a source fused by an earlier item)


def evaluate(profiles: Sequence[Profile], judge: str, runs: int = 3,
             lift_guard: bool = True, lump_rate: float = 0.1,
             reads: bool | str = True, conversations: bool = False,
             incremental: int = 0, ids: bool = True) -> SuiteResult:
    """Load every profile as its own scope, run ``runs`` daily dreams each, score every run.

    A long history retires most of its notes at once, past the blast-radius guard's share
    (R20); ``lift_guard`` runs with ``allow_retire`` = the profile's size, as an operator
    importing such a history would. Without it the guard spreads the work over the runs.
    ``reads``: True, each note read in the profile's last session; False, none read;
    "written", each note's last access stamped at its creation (a host that stamps it on
    write, never on read). ``conversations``: each note carries its session as its source
    conversation. ``incremental`` N: the notes arrive day by day, a read of every active note
    recorded each day, and a dream after every N-th day, before the ``runs`` final ones.
    ``ids``: False, the lines carry no id (the import makes one, and leaves out a line whose
    text its scope already holds).
    """
    from tests.support.factories import add_entities, add_notes
    from worker.app import build_app
    from worker.config import Settings
    from worker.domain.types import Scope
    from worker.runs import service
    from worker.store.migrate import upgrade

    gold = {n.text: n for p in profiles for n in p.notes}
    superseded = sum(1 for p in profiles for n in p.notes
                     if n.kind == "version" and n.value != p.current[n.slot])
    result = SuiteResult(judge, len(profiles), sum(len(p.current) for p in profiles), superseded)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{tmp}/endstate.db", llm_provider="none")
        oracle = (OracleLLM(gold, lump_rate if judge == "lumping" else 0.0)
                  if judge in ("oracle", "lumping", "fusing", "merging") else None)
        if oracle is not None:
            oracle.fuses = {"fusing": "value", "merging": "attribute"}.get(judge, "")
        app = build_app(settings, llm=oracle)
        upgrade(app.engine)
        add_entities(app, {"kind": "agent", "id": "eval"},
                     *({"kind": "user", "id": p.user_id} for p in profiles))
        totals = RunFigures()
        host = HostFigures() if judge == "host" else None
        if incremental:
            _arrive_daily(app, profiles, incremental, conversations, lift_guard, totals, ids)
        else:
            # The agent read its memory in the last session: nothing is idle (``reads=False``:
            # a host that records no reads).
            add_notes(app, *(_line(p, n, conversations, _read_at(p, n, reads), ids)
                             for p in profiles for n in p.notes))
        for day in range(1, runs + 1):
            started = time.perf_counter()
            for p in profiles:
                clock = p.last_session + timedelta(days=day)
                run_id = service.create_run(
                    app, Scope("eval", p.user_id), trigger="eval", force=True, clock=clock,
                    allow_retire=len(p.notes) if lift_guard else None)
                assert run_id is not None
                service.execute_run(app, run_id)
                _add_usage(app, run_id, totals)
                if host is not None:
                    _host_judges(app, Scope("eval", p.user_id), gold, host)
            figures = _score(app, profiles)
            figures.calls, figures.tokens = totals.calls, totals.tokens
            figures.consolidate_calls, figures.wasted = totals.consolidate_calls, totals.wasted
            figures.deferred, figures.failed = totals.deferred, totals.failed
            totals.deferred = 0
            figures.seconds = time.perf_counter() - started
            result.per_run.append(figures)
        result.fused = oracle.fused if oracle is not None else 0
        result.host = host
        app.dispose()
    return result


def _host_judges(app: Any, scope: Any, gold: dict[str, GoldNote], figures: HostFigures,
                 rounds: int = 5) -> None:
    """A host's perfect model over what ``fusion_candidates`` lists, round after round until a
    round changes nothing: notes of one attribute fused into the statement the records say
    came last (``created_at``, then ``write_seq``), notes of several kept apart."""
    from worker.host import HostError, fuse, fusion_candidates, keep_apart

    for _ in range(rounds):
        acted = 0
        for item in fusion_candidates(app, scope, limit=None):
            records = item.get("records") or [item["record_a"], item["record_b"]]
            facts = [gold.get(r["content"]) for r in records]
            if any(f is None for f in facts):
                continue
            figures.offered += 1
            by_slot: dict[str, list[dict[str, Any]]] = {}
            for r, f in zip(records, facts, strict=True):
                by_slot.setdefault(f.slot if f else "", []).append(r)
            # A topic's notes of one attribute fused; once each attribute holds one, all kept
            # apart (a pair or a cluster is one attribute, or several kept apart).
            groups = [g for g in by_slot.values() if len(g) > 1]
            try:
                for group in groups:
                    last = max(group, key=lambda r: (r["created_at"], r["write_seq"] or 0))
                    fuse(app, [r["id"] for r in group], last["content"],
                         source_versions={r["id"]: r["version"] for r in group})
                    figures.fused += 1
                if not groups:
                    keep_apart(app, [r["id"] for r in records],
                               source_versions={r["id"]: r["version"] for r in records})
                    figures.kept_apart += 1
                acted += 1
            except HostError:
                figures.refused += 1
        if not acted:
            return


def _read_at(p: Profile, n: GoldNote, reads: bool | str) -> Any:
    if reads == "written":
        return n.created_at
    return p.last_session if reads else None


def _line(p: Profile, n: GoldNote, conversations: bool, read: Any,
          ids: bool = True) -> dict[str, Any]:
    return {**({"id": n.id} if ids else {}), "agent_id": "eval", "user_id": p.user_id, "content": n.text,
            "created_at": n.created_at.isoformat(), "importance": n.importance,
            **({"source_conversation_id": n.conversation} if conversations else {}),
            **({"last_accessed_at": read.isoformat()} if read is not None else {})}


def _arrive_daily(app: Any, profiles: Sequence[Profile], every: int, conversations: bool,
                  lift_guard: bool, totals: RunFigures, ids: bool = True) -> None:
    """Each profile's notes imported day by day; after each day the host records a read of
    every active note of the scope (an agent that reads its memory each session), and after
    every ``every``-th day a dream runs two hours after that day's last note."""
    from sqlalchemy import update

    from tests.support.factories import add_notes
    from worker.domain.types import Scope
    from worker.runs import service
    from worker.store.models import NoteRow

    for p in profiles:
        days: dict[Any, list[GoldNote]] = {}
        for n in p.notes:
            days.setdefault(n.created_at.date(), []).append(n)
        for k, batch in enumerate(days.values(), start=1):
            add_notes(app, *(_line(p, n, conversations, None, ids) for n in batch))
            last = max(n.created_at for n in batch)
            with app.uow() as uow:
                uow.session.execute(
                    update(NoteRow).where(NoteRow.user_id == p.user_id,
                                          NoteRow.status == "active")
                    .values(last_accessed_at=last, access_count=NoteRow.access_count + 1))
                uow.commit()
            if k % every:
                continue
            run_id = service.create_run(
                app, Scope("eval", p.user_id), trigger="eval", force=True,
                clock=last + timedelta(hours=2),
                allow_retire=len(p.notes) if lift_guard else None)
            assert run_id is not None
            service.execute_run(app, run_id)
            _add_usage(app, run_id, totals)


def _add_usage(app: Any, run_id: str, totals: RunFigures) -> None:
    from worker.reporting import run_tree

    tree = run_tree(app, run_id)
    totals.failed += tree["status"] in ("failed", "partial")
    for step in tree["steps"]:
        out = step.get("output") or {}
        if step["phase"] == "contradictions":
            totals.calls += int(out.get("calls", 0))
            totals.tokens += int(out.get("tokens_in", 0)) + int(out.get("tokens_out", 0))
            totals.wasted += int(out.get("verdicts_wasted", 0))
            totals.deferred += int(out.get("topics_deferred", 0))
        elif step["phase"] == "consolidate":
            totals.consolidate_calls += int(out.get("calls", 0))


def _score(app: Any, profiles: Sequence[Profile]) -> RunFigures:
    from sqlalchemy import select

    from worker.store.models import NoteRow

    with app.uow() as uow:
        rows = uow.session.execute(
            select(NoteRow.id, NoteRow.user_id, NoteRow.content, NoteRow.status)).all()
    by_user: dict[str, list[tuple[str, str, str]]] = {}
    for nid, user, content, status in rows:
        by_user.setdefault(user, []).append((nid, content, status))
    f = RunFigures()
    for p in profiles:
        gold = {n.text: n for n in p.notes}  # a text is unique within its profile
        active: dict[str, list[str]] = {}
        for nid, content, status in by_user.get(p.user_id, []):
            g = gold.get(content)
            if g is None:
                continue  # a fused note: scored through its text only when it is a source's
            if status == "active":
                active.setdefault(g.slot, []).append(g.value)
            elif status == "revoked" and nid == g.id:
                f.retired += 1
                f.retired_superseded += g.kind == "version" and g.value != p.current[g.slot]
        exact = True
        for slot, value in p.current.items():
            held = active.get(slot, [])
            if value not in held:
                f.lost += 1
                exact = False
            wrong = sum(1 for v in held if v != value)
            f.superseded_active += wrong
            f.duplicates_active += max(0, held.count(value) - 1)
            if wrong or held.count(value) != 1:
                exact = False
                f.failures.append(f"{p.user_id}/{slot}: {value!r}, active {held!r}")
        f.exact += exact
    return f


def table_rows(results: Sequence[SuiteResult]) -> list[list[Any]]:
    rows = []
    for r in results:
        for k, f in enumerate(r.per_run, start=1):
            rows.append([
                r.judge, k, f"{f.exact / r.profiles:.1%} ({f.exact}/{r.profiles})", f.lost,
                f"{f.superseded_active}/{r.superseded}", f.duplicates_active,
                f"{f.retired_superseded}/{r.superseded}", f.calls,
                f"{f.calls / f.retired_superseded:.2f}" if f.retired_superseded else "-",
                f"{f.tokens / f.retired_superseded:.0f}" if f.retired_superseded else "-",
                f.wasted, f.deferred, f.consolidate_calls, f"{f.seconds:.1f}"])
    return rows


HEADERS = ["judge", "after run", "exact end states", "current facts lost",
           "superseded left active", "duplicates left active", "superseded retired",
           "contradiction calls (cumulative)", "calls per retired superseded",
           "tokens per retired superseded", "wasted verdicts", "topics deferred (this run)",
           "consolidation calls", "seconds"]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="eval_endstate", description=__doc__)
    ap.add_argument("--profiles", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--judge", action="append", choices=["oracle", "lumping", "fusing", "merging", "rules", "host"])
    ap.add_argument("--lump-rate", type=float, default=0.1,
                    help="lumping judge: share of the topics with two attributes it calls one")
    ap.add_argument("--keep-guard", action="store_true",
                    help="leave the blast-radius guard at its share (default: lifted per profile)")
    ap.add_argument("--show-failures", type=int, default=0, metavar="N",
                    help="print the first N slots not in their exact end state, per judge")
    ap.add_argument("--rewording", choices=["light", "heavy"], default="light",
                    help="how differently the paraphrased versions are worded")
    ap.add_argument("--attributes", default="4-7", metavar="LO-HI",
                    help="attributes per profile (the suite's 4-7; 8-12: scopes of 30-90 notes)")
    ap.add_argument("--version-gap", type=int, default=MIN_GAP_DAYS, metavar="DAYS",
                    help="least days between two versions of an attribute (sessions are 2-5 "
                         "days apart; 1: version after version; 0: also corrected in the same "
                         "session, minutes later)")
    ap.add_argument("--importance", default="0.5-0.5", metavar="LO-HI",
                    help="each note's importance, drawn uniformly from LO-HI (default 0.5)")
    ap.add_argument("--incremental", type=int, default=0, metavar="N",
                    help="notes arrive day by day, a read of every active note recorded each "
                         "day, and a dream runs after every N days with notes (before --runs)")
    ap.add_argument("--conversations", action="store_true",
                    help="load each note with its session as its source conversation")
    ap.add_argument("--no-reads", action="store_true",
                    help="load the notes with no read recorded (a host that reports none)")
    ap.add_argument("--reads-stamped", action="store_true",
                    help="load each note with its last access stamped at its creation (a host "
                         "that stamps it when writing a note, never when reading one)")
    ap.add_argument("--session-dates", action="store_true",
                    help="each note dated at its session's start (a corpus that dates only "
                         "sessions): with --version-gap 0 a correction shares its timestamp")
    ap.add_argument("--filler", type=int, default=0, metavar="N",
                    help="N more facts per profile, each standing alone (a scope of a few "
                         "hundred notes; at most 360)")
    ap.add_argument("--newest-first", action="store_true",
                    help="each history's lines imported newest first (a table read by date, "
                         "descending); not with --incremental")
    ap.add_argument("--grouped", action="store_true",
                    help="each history's lines listed attribute by attribute, each one's "
                         "oldest first (a corpus written fact by fact, not sorted by date)")
    ap.add_argument("--undated", action="store_true",
                    help="every note of a history dated at its last session, as an import "
                         "without dates gets the import's time: the file's order is all "
                         "that says which came later")
    ap.add_argument("--verbatim", action="store_true",
                    help="a value said again repeats its earlier words exactly (one text, "
                         "several dates)")
    ap.add_argument("--no-ids", action="store_true",
                    help="the lines carry no id: the import makes one, and leaves out a line "
                         "whose text its scope already holds (with --verbatim: a fact said again)")
    ap.add_argument("--wordy", action="store_true",
                    help="each note inside a clause about where it was said (12-30 words)")
    return ap


def _profiles(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[Profile]:
    """The suite the options ask for: generated, then dated and listed as loaded."""
    lo, _, hi = args.attributes.partition("-")
    if not (lo.isdigit() and hi.isdigit() and 1 <= int(lo) <= int(hi) <= len(FAMILIES)):
        ap.error(f"--attributes takes LO-HI, 1 <= LO <= HI <= {len(FAMILIES)}, e.g. 8-12")
    low, _, high = args.importance.partition("-")
    try:
        importance = (float(low), float(high))
    except ValueError:
        ap.error("--importance takes LO-HI, two numbers in 0-1, e.g. 0.9-1")
    if not 0 <= importance[0] <= importance[1] <= 1:
        ap.error("--importance takes LO-HI, 0 <= LO <= HI <= 1, e.g. 0.9-1")
    profiles = generate(args.profiles, seed=args.seed, rewording=args.rewording,
                        wordy=args.wordy, families_per_profile=(int(lo), int(hi)),
                        min_gap_days=max(0, args.version_gap), importance=importance,
                        session_dates=args.session_dates, filler=args.filler,
                        verbatim=args.verbatim)
    if args.undated:
        for p in profiles:
            imported = p.last_session
            p.notes[:] = [replace(n, created_at=imported) for n in p.notes]
    if args.grouped:
        for p in profiles:
            p.notes.sort(key=lambda n: n.slot)  # stable: each attribute's versions in order
    if args.newest_first:
        if args.incremental:
            ap.error("--newest-first lists a whole history at once; drop --incremental")
        for p in profiles:
            p.notes.reverse()
    return profiles


def main(argv: list[str] | None = None) -> int:
    from tests.bench.report import table
    from worker.logging import configure_logging

    ap = _parser()
    args = ap.parse_args(argv)
    configure_logging("auto", "WARNING")
    profiles = _profiles(ap, args)
    notes = sum(len(p.notes) for p in profiles)
    changes = [c for p in profiles for c in p.changes.values()]
    print(f"# evolving suite: {len(profiles)} profiles, {notes} notes, {len(changes)} slots "
          f"changing 1-7 times (mean {sum(changes) / len(changes):.2f}), seed {args.seed}, "
          f"{args.rewording} rewording{', wordy notes' if args.wordy else ''}"
          f"{', values said again verbatim' if args.verbatim else ''}"
          f"{', lines without ids' if args.no_ids else ''}, "
          f"{args.attributes} attributes per profile, versions {args.version_gap}+ days apart, "
          f"importance {args.importance}{', conversations recorded' if args.conversations else ''}"
          f"{', dated by session' if args.session_dates else ''}"
          f"{', undated (one time per history)' if args.undated else ''}"
          f"{', listed newest first' if args.newest_first else ''}"
          f"{', listed attribute by attribute' if args.grouped else ''}"
          f"{f', {args.filler} standalone facts more per profile' if args.filler else ''}"
          f"{f', arriving daily, a dream every {args.incremental} days' if args.incremental else ''}")
    results = [evaluate(profiles, judge, args.runs, lift_guard=not args.keep_guard,
                        lump_rate=args.lump_rate,
                        reads="written" if args.reads_stamped else not args.no_reads,
                        conversations=args.conversations, incremental=args.incremental,
                        ids=not args.no_ids)
               for judge in args.judge or ["oracle", "rules"]]
    guard = ("blast-radius guard kept (its share of a scope per run)" if args.keep_guard
             else "blast-radius guard lifted per profile")
    table(f"Evolving facts: end states per judge after each daily run, {guard}", HEADERS,
          table_rows(results))
    for r in results:
        if r.fused:
            print(f"# {r.judge}: {r.fused} clusters fused")
        if r.host is not None:
            h = r.host
            print(f"# {r.judge}: {h.offered} items offered, {h.fused} fused, {h.kept_apart} "
                  f"kept apart, {h.refused} stale within their round")
        if r.per_run and r.per_run[-1].failed:
            print(f"# {r.judge}: {r.per_run[-1].failed} run(s) failed or partial (see the log)")
        if args.show_failures and r.per_run:
            for line in r.per_run[-1].failures[: args.show_failures]:
                print(f"# {r.judge} not exact: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
