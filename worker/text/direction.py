"""Is a relation in a fused text turned round (R13)? "Bob reports to Anna" fused as "Anna
reports to Bob", "prefers tea over coffee" as "prefers coffee over tea", "runs before breakfast"
as "runs after breakfast": the same words, so a comparison of word sets finds nothing.

A directional marker (to, from, by, than, over, instead of, before, after, above, below) orders
the content words of its clause: those before it against those after it. A fused pair of words
across a marker is reversed when a source orders the two the other way across a marker of the
same relation and no source orders them the fused way. Only both words changing sides counts:
a reworded clause moves one phrase ("In the morning Alice drinks tea"), not the two ends of a
relation; and a verbatim source, or all of them joined, never reverses anything.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from operator import attrgetter

from worker.text.words import Kind, Token, stem

# Marker → (relation, sign): a minus marker states its relation's converse ("B after A" is
# "A before B"), so "runs after breakfast" reverses "runs before breakfast".
MARKERS: dict[str, tuple[str, int]] = {
    "to": ("to", 1), "from": ("from", 1), "by": ("by", 1),
    # the left side is preferred or greater: tea over coffee, taller than, tea instead of coffee
    "over": ("over", 1), "than": ("over", 1), "instead": ("over", 1),
    "before": ("before", 1), "after": ("before", -1),
    "above": ("above", 1), "below": ("above", -1), "under": ("above", -1),
}
# A word that makes its marker symmetric: "married to Bob" is "Bob is married to Alice".
_SYMMETRIC = frozenset(stem(w) for w in [
    "married", "engaged", "next", "close", "closer", "similar", "related", "equal", "identical",
    "adjacent", "connected", "linked", "near", "compared", "opposite", "different", "far",
    "separate", "separated", "divorced", "apart", "distinct", "parallel", "friends", "friend",
    "talk", "talking", "speak", "speaking", "chat", "chatting"])
_PARTICIPLE = ("ed", "en", "wn", "ung", "ught", "lt", "nt", "de", "ne")

_SURFACE = attrgetter("surface")
Pair = tuple[str, str, str]  # relation, the word its left side holds, the word its right holds


def relation_pairs(toks: Sequence[Token]) -> Iterator[tuple[Pair, int, int, int]]:
    """Every (relation, left, right) a text orders, oriented by the marker's sign, with the
    token indices of the left word, the marker and the right word as written."""
    if MARKERS.keys().isdisjoint(map(_SURFACE, toks)):  # most texts state no relation
        return
    start = 0
    for end in [*(i for i, t in enumerate(toks) if t.kind is Kind.BREAK), len(toks)]:
        yield from _clause_pairs(toks, start, end)
        start = end + 1


def _clause_pairs(toks: Sequence[Token], start: int, end: int
                  ) -> Iterator[tuple[Pair, int, int, int]]:
    markers = [m for m in range(start, end)
               if toks[m].surface in MARKERS and _marker(toks, m, start)]
    # A marker's sides end at the next marker: "moved from Paris to Berlin" orders Paris
    # before Berlin, and "decided to plead guilty to conspiring to aid" no verb with another.
    for k, m in enumerate(markers):
        relation, sign = MARKERS[toks[m].surface]
        before = markers[k - 1] + 1 if k else start
        after = markers[k + 1] if k + 1 < len(markers) else end
        left = [i for i in range(before, m) if toks[i].content]
        right = [j for j in range(m + 1, after) if toks[j].content]
        for i in left:
            for j in right:
                a, b = toks[i].key, toks[j].key
                if a != b:
                    yield ((relation, a, b) if sign > 0 else (relation, b, a)), i, m, j


def _marker(toks: Sequence[Token], m: int, start: int) -> bool:
    t = toks[m]
    if t.kind is not Kind.WORD or t.surface not in MARKERS:
        return False
    previous = toks[m - 1].surface if m > start else ""
    following = toks[m + 1].surface if m + 1 < len(toks) else ""
    if stem(previous) in _SYMMETRIC or following == "by":  # "clung to by a bee": passive
        return False
    # "by" is an agent after a participle ("replaced by", "hired by", "ridden by", "clung to
    # by"), not a means ("by having refunds deposited") or a place ("by a creek").
    return t.surface != "by" or previous.endswith(_PARTICIPLE) or previous in MARKERS


def stated_pairs(toks: Sequence[Token]) -> frozenset[Pair]:
    """The (relation, left, right) pairs a source orders, for ``reversals``."""
    return frozenset(pair for pair, *_ in relation_pairs(toks))


def reversals(stated: Callable[[], Collection[Pair]], fused_tokens: Sequence[Token]
              ) -> list[str]:
    """The fused phrases ("anna reports to bob") whose relation the sources state the other
    way round and never this way; one per fused marker, from its first reversed word to its
    last. ``stated``: the sources' ``stated_pairs`` joined, asked for only when the fusion
    orders a pair at all (most fusions state no relation, and the sources' pairs are the
    costly part)."""
    fused = list(relation_pairs(fused_tokens))
    if not fused:
        return []
    known = stated()
    found: dict[int, tuple[int, int]] = {}  # marker index → the span of its reversed words
    for (relation, a, b), i, m, j in fused:
        if (relation, b, a) in known and (relation, a, b) not in known:
            first, last = found.get(m, (i, j))
            found[m] = (min(first, i), max(last, j))
    return list(dict.fromkeys(
        " ".join(t.surface for t in fused_tokens[i:j + 1]) for i, j in found.values()))
