"""How many SICK 2014 pairs the contradictions candidate search surfaces (recall vs. model cost).

The phase only asks a judge about pairs whose cosine similarity reaches
``contradictions.threshold``; a CONTRADICTION pair below it is never seen, a NEUTRAL pair above it
is a wasted model question. Run: ``.venv/bin/python -m tests.bench.eval_contradictions``.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.evaldata import eval_data_dir
from worker.embeddings import Embedder, HashingEmbedder

SICK_DIR = eval_data_dir() / "sts" / "sick2014"
SPLITS = ("SICK_train.txt", "SICK_trial.txt")


def load_sick(data_dir: Path = SICK_DIR, splits: tuple[str, ...] = SPLITS) -> list[tuple[str, str, str]]:
    """(sentence_A, sentence_B, entailment_judgment) rows of the given splits."""
    rows: list[tuple[str, str, str]] = []
    for name in splits:
        with (data_dir / name).open(encoding="utf-8") as fh:
            for r in csv.DictReader(fh, delimiter="\t"):
                rows.append((r["sentence_A"], r["sentence_B"], r["entailment_judgment"]))
    return rows


def candidate_shares(
    threshold: float = 0.70,
    embedder: Embedder | None = None,
    data_dir: Path = SICK_DIR,
) -> dict[str, Any]:
    """Share of each SICK label (CONTRADICTION, NEUTRAL, ENTAILMENT) at or above ``threshold``.

    Uses the same test as the phase's FAISS range search (float32 inner product of L2-normalised
    vectors ≥ threshold); the default embedder is the built-in HashingEmbedder(512).
    """
    embedder = embedder or HashingEmbedder(512)
    rows = load_sick(data_dir)
    a = embedder.embed([r[0] for r in rows]).astype(np.float32)
    b = embedder.embed([r[1] for r in rows]).astype(np.float32)
    sims = np.einsum("ij,ij->i", a, b)
    surfaced = sims >= np.nextafter(np.float32(threshold), np.float32(-1))
    totals: Counter[str] = Counter(r[2] for r in rows)
    hits: Counter[str] = Counter(r[2] for r, s in zip(rows, surfaced, strict=True) if s)
    return {
        "threshold": threshold,
        "embedder": f"{type(embedder).__name__}({embedder.dimensions})",
        "pairs": dict(totals),
        "surfaced": {k: hits.get(k, 0) for k in totals},
        "share": {k: round(hits.get(k, 0) / totals[k], 4) for k in totals},
        "surfaced_total": int(surfaced.sum()),
    }


def main() -> None:
    print(json.dumps(candidate_shares(), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
