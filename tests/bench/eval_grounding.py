"""The grounding check's reversed-relation finding (worker/text/direction.py) on real rewordings
from ../shared/eval-data, read at run time (never copied).

Each MSRP paraphrase pair and SICK ENTAILMENT pair, both ways round, is a one-source "fusion":
how many does ``check_fusion`` call reversed (false rejections), and how many of those the rest
of the check would have passed (newly rejected)? SICK pairs of the same content words, whose
meaning differs (NEUTRAL / CONTRADICTION: "the dog chases the man"), are what it should catch.
Run: ``.venv/bin/python -m tests.bench.eval_grounding [--show N]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.bench.eval import load_msrp, load_sick
from tests.bench.report import table
from worker.text.grounding import Grounding, check_fusion
from worker.text.words import tokens


@dataclass
class Share:
    pairs: int = 0
    reversed: int = 0  # the reversed-relation finding fired
    newly: int = 0  # ... on a pair the rest of the check passes
    examples: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, source: str, fused: str) -> None:
        check = check_fusion([source], fused)
        self.pairs += 1
        if check.reversed:
            self.reversed += 1
            self.newly += _passes_otherwise(check)
            self.examples.append((source, fused, check.reversed[0]))

    def row(self, name: str) -> list[object]:
        return [name, self.pairs, self.reversed, _pct(self.reversed, self.pairs), self.newly,
                _pct(self.newly, self.pairs)]


def _passes_otherwise(check: Grounding) -> bool:
    return not (check.invented or check.negation_flips or check.dropped)


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.2f}%" if d else "-"


def both_ways(pairs: Iterable[tuple[str, str]]) -> Iterable[tuple[str, str]]:
    for a, b in pairs:
        yield a, b
        yield b, a


def _same_words(a: str, b: str) -> bool:
    def keys(s: str) -> set[str]:
        return {t.key for t in tokens(s) if t.content}
    return keys(a) == keys(b)


def measure() -> dict[str, Share]:
    shares: dict[str, Share] = {}
    for split in ("train", "val"):
        msrp = load_msrp(split)
        if msrp is not None:
            a, b, y = msrp
            share = shares.setdefault("MSRP paraphrases (1)", Share())
            for s, f in both_ways((x, z) for x, z, q in zip(a, b, y, strict=True) if q == 1):
                share.add(s, f)
    sick = load_sick()
    if sick is not None:
        a, b, labels = sick
        for s, f, label in zip(a, b, labels, strict=True):
            if label == "ENTAILMENT":
                for s2, f2 in both_ways([(s, f)]):
                    shares.setdefault("SICK ENTAILMENT", Share()).add(s2, f2)
            if _same_words(s, f):  # the same content words: only their order can differ
                for s2, f2 in both_ways([(s, f)]):
                    shares.setdefault(f"SICK {label}, same words", Share()).add(s2, f2)
    return shares


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="eval_grounding", description=__doc__)
    ap.add_argument("--show", type=int, default=0, help="examples to print per row")
    args = ap.parse_args(argv)
    shares = measure()
    if not shares:
        print("# no eval data (MSRP / SICK) found")
        return 0
    table("Reversed relations on real pairs (source → fused, both ways)",
          ["pairs", "count", "flagged reversed", "share", "of them passing the rest",
           "share"], [s.row(name) for name, s in shares.items()])
    for name, s in shares.items():
        for source, fused, found in s.examples[: args.show]:
            print(f"# {name}: {source!r} → {fused!r}: {found!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
