"""The rule-based judge on public pairs: SICK merges by label, MSRP paraphrase precision/recall.

Two figures per data set: the text rules alone (``rule_judge_pairs``), and what the phase does
(the rules only see pairs whose cosine under HashingEmbedder(512) reaches
``consolidate.rule_threshold``). Run: ``.venv/bin/python -m tests.bench.eval_rules``.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.evaldata import eval_data_dir
from worker.config import ConsolidateSettings
from worker.embeddings.hashing import HashingEmbedder
from worker.llm.rules import rule_judge_pairs

EVAL_DIR = eval_data_dir() / "sts"
SICK_DIR = EVAL_DIR / "sick2014"
MSRP_TRAIN = EVAL_DIR / "msrp" / "msr-para-train.tsv"

__all__ = ["rule_judge_pairs", "sick_merges", "msrp_precision_recall"]


def load_sick(data_dir: Path = SICK_DIR) -> list[tuple[str, str, str]]:
    rows = []
    for name in ("SICK_train.txt", "SICK_trial.txt"):
        with (data_dir / name).open(encoding="utf-8") as fh:
            rows += [(r["sentence_A"], r["sentence_B"], r["entailment_judgment"])
                     for r in csv.DictReader(fh, delimiter="\t")]
    return rows


def load_msrp(path: Path = MSRP_TRAIN) -> list[tuple[str, str, bool]]:
    with path.open(encoding="utf-8-sig") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        return [(r[3], r[4], r[0] == "1") for r in reader if len(r) >= 5]


def _with_similarity(pairs: Sequence[tuple[str, str]], threshold: float | None) -> list[bool]:
    verdicts = rule_judge_pairs(pairs)
    if threshold is None:
        return verdicts
    embedder = HashingEmbedder(512)
    a = embedder.embed([p[0] for p in pairs])
    b = embedder.embed([p[1] for p in pairs])
    sims = np.einsum("ij,ij->i", a, b)
    return [v and bool(s >= threshold - 1e-6) for v, s in zip(verdicts, sims, strict=True)]


def sick_merges(threshold: float | None = None) -> dict[str, int]:
    """How many SICK train+trial pairs of each label the rule judge would merge."""
    rows = load_sick()
    merged = _with_similarity([(a, b) for a, b, _ in rows], threshold)
    return dict(Counter(label for (_, _, label), m in zip(rows, merged, strict=True) if m))


def msrp_precision_recall(threshold: float | None = None) -> dict[str, Any]:
    """Precision and recall of "merge" as a paraphrase detector on MSRP train."""
    rows = load_msrp()
    merged = _with_similarity([(a, b) for a, b, _ in rows], threshold)
    tp = sum(m and g for m, (_, _, g) in zip(merged, rows, strict=True))
    fp = sum(m and not g for m, (_, _, g) in zip(merged, rows, strict=True))
    positives = sum(g for _, _, g in rows)
    return {"pairs": len(rows), "paraphrases": positives, "merged": tp + fp, "true_merges": tp,
            "precision": round(tp / (tp + fp), 4) if tp + fp else None,
            "recall": round(tp / positives, 4) if positives else None}


def main() -> None:
    bar = ConsolidateSettings().rule_threshold
    print(json.dumps({
        "sick_merged_by_label": {"rules": sick_merges(), f"rules+cos>={bar}": sick_merges(bar)},
        "msrp_train": {"rules": msrp_precision_recall(),
                       f"rules+cos>={bar}": msrp_precision_recall(bar)},
    }, indent=2))


if __name__ == "__main__":
    main()
