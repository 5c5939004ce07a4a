"""Pure planning for consolidation: clusters, prompt context, reply validation, the fused note."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from worker.domain.types import Note, NoteType, Protection, lasting_expiry, said_order
from worker.llm.ask import ReplyRejected
from worker.text.grounding import Grounding, check_fusion
from worker.text.temporal import allowed_dates_lazily
from worker.text.words import strip_invisible

PROMPT_NAME = "consolidate"


# ---- clustering ---------------------------------------------------------------------------
@dataclass
class PlannedCluster:
    """Indices into the scope snapshot, with how similar the members are to each other."""

    members: list[int]
    similarity: float  # mean pairwise cosine
    min_similarity: float
    topical: bool = False  # found by the second pass, over shared rare terms


@dataclass
class ClusterPlan:
    clusters: list[PlannedCluster]
    leftovers: list[int]  # candidates (had a neighbour) that ended up in no cluster


@dataclass(frozen=True)
class TopicalLinks:
    """The second signal: pairs of rows (i < j) on one topic of one subject, whatever their
    cosine (worker.similarity.terms.topical_pairs), the length a topical cluster's texts may
    reach together, and the pairs no topical cluster may hold both of (two values of one
    attribute: notes of one frame a short span apart)."""

    pairs: Collection[tuple[int, int]]
    max_chars: int
    apart: Collection[tuple[int, int]] = ()


def clusterable(note: Note) -> bool:
    """Immutable and protected notes are never cluster members; nor are flagged ones."""
    return note.retirable and not (note.flags and any(f.startswith("injection")
                                                      for f in note.flags))


def plan_clusters(
    notes: Sequence[Note], vectors: np.ndarray, pairs: Sequence[tuple[int, int, float]],
    threshold: float, min_size: int, max_size: int, ephemeral_pairs: bool = True,
    topical: TopicalLinks | None = None, apart: Collection[tuple[int, int]] = (),
) -> ClusterPlan:
    """Deterministic clusters of ``min_size``..``max_size`` notes, each coherent.

    Within each connected component of the similarity graph, a cluster grows greedily from the
    best-connected seed (ties by id), each time adding the note with the highest mean similarity
    to the members so far, while that mean is at least ``threshold``; so a chain A~B~C with
    A≁C does not become one cluster and an oversized component splits into several coherent
    clusters. A group smaller than ``min_size`` is kept only as a pair containing an ephemeral
    note; members that fit nowhere are returned as leftovers.

    ``topical``: a second pass over the notes no cluster took, on the cosine pairs and the
    topical links among them, growing the same way except that two linked notes count as alike
    as ``threshold`` at least (so a member needs a link to most members, not one), and only
    while the members' texts joined by spaces fit in ``max_chars``: a topical member states
    another fact, which the fused note must keep. No pair is a topical cluster, ephemeral or
    not (two throwaway notes on one topic are no duplicate). Its clusters follow the first
    pass's.

    ``apart``: pairs no cluster of either pass may hold both of (what a host kept apart): a
    member shuts its pair out, so the cluster grows around it and the rest still merges.
    """
    eligible = {i for i, n in enumerate(notes) if clusterable(n)}
    ids = [n.id for n in notes]
    cosine = [(i, j) for i, j, _ in pairs]
    first = _Growth(vectors, ids, threshold, max_size, apart=_adjacency(apart, eligible))
    plan = _cluster(notes, _adjacency(cosine, eligible), first, min_size, ephemeral_pairs)
    if topical is None:
        return plan
    rest = eligible - {m for c in plan.clusters for m in c.members}
    if len(rest) < min_size:  # no pair is a topical cluster
        return plan
    links = _adjacency([*cosine, *topical.pairs], rest)
    lengths = [len(n.content) + 1 for n in notes]  # + a space
    second = _Growth(vectors, ids, threshold, max_size, links, lengths, topical.max_chars + 1,
                     _adjacency([*topical.apart, *apart], rest))
    found = _cluster(notes, links, second, min_size, ephemeral_pairs=False)
    for c in found.clusters:
        c.topical = True
    taken = {m for c in found.clusters for m in c.members}
    return ClusterPlan([*plan.clusters, *found.clusters],
                       [i for i in plan.leftovers if i not in taken])


@dataclass(frozen=True)
class _Growth:
    """How a cluster grows: the snapshot's vectors and ids, the bar and size, and for the
    topical pass the links that lift a pair to the bar and the texts' lengths with their cap."""

    vectors: np.ndarray
    ids: list[str]
    threshold: float
    max_size: int
    links: dict[int, set[int]] | None = None
    lengths: list[int] | None = None
    max_chars: int = 0
    apart: dict[int, set[int]] | None = None  # a member shuts these out


_EPHEMERAL = Protection.EPHEMERAL.value


def _adjacency(pairs: Iterable[tuple[int, int]], eligible: set[int]) -> dict[int, set[int]]:
    adjacency: dict[int, set[int]] = {}
    for i, j in pairs:
        if i in eligible and j in eligible and i != j:
            adjacency.setdefault(i, set()).add(j)
            adjacency.setdefault(j, set()).add(i)
    return adjacency


def _cluster(
    notes: Sequence[Note], adjacency: dict[int, set[int]], growth: _Growth, min_size: int,
    ephemeral_pairs: bool,
) -> ClusterPlan:
    ids = growth.ids
    clusters: list[PlannedCluster] = []
    leftovers: list[int] = []
    for component in _components(adjacency, ids):
        pool = set(component)
        while pool:
            if len(pool) < min_size and not (ephemeral_pairs and any(
                    notes[m].protection == _EPHEMERAL for m in pool)):
                leftovers.extend(pool)  # what growing from each seed in turn would leave
                break
            seed = min(pool, key=lambda i: (-len(adjacency[i] & pool), ids[i]))
            members = _grow(seed, pool, growth)
            ephemeral = any(notes[m].protection == _EPHEMERAL for m in members)
            if len(members) >= min_size or (ephemeral_pairs and ephemeral and len(members) >= 2):
                pool.difference_update(members)
                clusters.append(_planned(sorted(members, key=lambda m: ids[m]), growth.vectors))
            else:
                pool.discard(seed)
                leftovers.append(seed)
    clusters.sort(key=lambda c: ids[c.members[0]])
    return ClusterPlan(clusters, sorted(leftovers, key=lambda m: ids[m]))


def _grow(seed: int, pool: set[int], g: _Growth) -> list[int]:
    """Add, one at a time, the pool note most similar on average to the members so far (and,
    with a length cap, whose text still fits). Sums and means stay numpy's float32 from one
    matrix-vector product a step (a matrix product's or float64's bits differ and flip ties or
    the bar); only the choice among the few candidates is plain Python."""
    members = [seed]
    rest = sorted(pool - {seed}, key=g.ids.__getitem__)
    if not rest:
        return members
    candidates = g.vectors.take(rest, axis=0)  # gathered once, not on every step
    at = {r: k for k, r in enumerate(rest)} if g.links is not None or g.apart else {}
    sums = _lifted(candidates @ g.vectors[seed], seed, at, g)
    alive = [True] * len(rest)
    _shut_out(alive, seed, at, g)
    lengths = [g.lengths[i] for i in rest] if g.lengths is not None else None
    room = g.max_chars - g.lengths[seed] if g.lengths is not None else 0
    bar = float(np.float32(g.threshold - 1e-6))  # as numpy compares a float32 mean with it
    while len(members) < g.max_size:
        means = (sums / len(members)).tolist()
        best = _best(means, alive, lengths, room)
        if best < 0 or means[best] < bar:
            break
        members.append(rest[best])
        alive[best] = False
        _shut_out(alive, rest[best], at, g)
        if lengths is not None:
            room -= lengths[best]
        if len(members) == g.max_size or not any(alive):
            break  # no step follows: its sums would go unread
        sums += _lifted(candidates @ candidates[best], rest[best], at, g)
    return members


def _best(means: list[float], alive: list[bool], lengths: list[int] | None, room: int) -> int:
    """As ``argmax`` over the usable means: the first maximum, a NaN before all; -1 if none."""
    best, top = -1, -math.inf
    for k, mean in enumerate(means):
        if alive[k] and (lengths is None or lengths[k] <= room):
            if mean != mean:  # NaN
                return k
            if mean > top:
                best, top = k, mean
    return best


def _shut_out(alive: list[bool], member: int, at: dict[int, int], g: _Growth) -> None:
    """The candidates that may not share a cluster with ``member`` can no longer join."""
    if g.apart:
        for i in g.apart.get(member, ()):
            if i in at:
                alive[at[i]] = False


def _lifted(sims: np.ndarray, member: int, at: dict[int, int], g: _Growth) -> np.ndarray:
    """``sims`` (cosine of each candidate to ``member``) with the candidates linked to the
    member raised to the threshold: a topical link counts as a neighbour."""
    if g.links is None:
        return sims
    linked = [at[i] for i in g.links.get(member, ()) if i in at]
    if linked:
        sims[linked] = np.maximum(sims[linked], g.threshold)
    return sims


def _components(adjacency: dict[int, set[int]], ids: list[str]) -> list[list[int]]:
    seen: set[int] = set()
    out = []
    for start in sorted(adjacency, key=lambda i: ids[i]):
        if start in seen:
            continue
        stack, comp = [start], []
        seen.add(start)
        while stack:
            node = stack.pop()
            comp.append(node)
            for nxt in adjacency[node]:
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        out.append(sorted(comp, key=lambda i: ids[i]))
    return out


def _planned(members: list[int], vectors: np.ndarray) -> PlannedCluster:
    sims = [float(vectors[a] @ vectors[b]) for k, a in enumerate(members) for b in members[k + 1 :]]
    return PlannedCluster(members, round(sum(sims) / len(sims), 4), round(min(sims), 4))


# ---- the question -------------------------------------------------------------------------
class FusionReply(BaseModel):
    """What the model answers for one cluster (aliases, never note ids)."""

    should_consolidate: bool
    content: str = ""
    type: str = ""
    source_ids: list[str] = Field(default_factory=list)
    reason: str = ""


def _day(value: datetime | None) -> str | None:
    return value.date().isoformat() if value else None


def prompt_context(sources: Sequence[Note], now: datetime, max_chars: int) -> dict[str, Any]:
    """Notes as a JSON array under short aliases n1..nK, oldest first (the prompt shows days:
    the order tells two statements of one day apart); the reply names every alias."""
    ordered = sorted(sources, key=lambda n: (said_order(n), n.id))
    notes = [
        {"alias": f"n{k + 1}", "type": n.type, "content": n.content,
         "created_at": _day(n.created_at), "last_accessed_at": _day(n.last_accessed_at),
         "access_count": n.access_count}
        for k, n in enumerate(ordered)
    ]
    return {"notes": notes, "today": now.date().isoformat(), "max_chars": max_chars,
            "note_types": [t.value for t in NoteType]}


# ---- validation ---------------------------------------------------------------------------
RELATIVE_TIME = "relative_time"  # ReplyRejected.code: the fusion kept "yesterday" & co.


def validate_fusion(
    reply: FusionReply, aliases: Sequence[str], sources: Sequence[Note], max_chars: int,
    block_on_omission: bool = False, *, relative_time_reasked: bool = False,
) -> list[str]:
    """Raise ReplyRejected when the reply cannot be applied; return warnings (omissions).

    Refusals are valid replies and skip the text checks. Relative time left in the text is
    re-asked once: with ``relative_time_reasked`` the rejection is final.
    """
    if not reply.should_consolidate:
        return []
    given = list(reply.source_ids)
    unknown = sorted(set(given) - set(aliases))
    if unknown:
        raise ReplyRejected(f"source_ids has unknown alias {unknown[0]!r}; use only "
                            f"{', '.join(aliases)}")
    missing = [a for a in aliases if a not in given]
    if missing:
        raise ReplyRejected(f"source_ids must list every note; missing {', '.join(missing)}")
    text = reply.content.strip()
    # Invisible characters or bare punctuation would replace every source with nothing (R12).
    if not any(ch.isalnum() for ch in text):
        raise ReplyRejected("content is empty (no letters or digits)")
    if len(text) > max_chars:
        raise ReplyRejected(f"content has {len(text)} characters; the limit is {max_chars}")
    # The notes reach a model without such characters (the outbound boundary strips them), so
    # any in its text are its own: a message hidden in tag characters or variation selectors
    # (an obedient model's, R14), a bidi override or an escape sequence would enter memory.
    if strip_invisible(text) != text:
        raise ReplyRejected("content holds invisible or control characters (zero-width, bidi, "
                            "tag, variation selector or escape characters) that no note "
                            "shown to you has; write visible text only")
    check = check_fusion([n.content for n in sources], text, allowed=allowed_dates_lazily(sources))
    if (changed := _changed_fact(check)) is not None:
        raise ReplyRejected(changed)
    if check.dropped:
        alias = aliases[check.dropped[0]] if check.dropped[0] < len(aliases) else "a note"
        raise ReplyRejected(f"content leaves out most of {alias}; keep every note's facts or "
                            "refuse")
    if check.relative_time:
        raise ReplyRejected(
            f"content keeps the relative time {check.relative_time[0]!r}; write the absolute "
            "date from the created_at of the note that says it, or leave it out",
            final=relative_time_reasked, code=RELATIVE_TIME)
    warnings = [f"omits {s!r}" for s in check.omitted]
    if check.omitted and block_on_omission:
        raise ReplyRejected(f"content drops {check.omitted[0]!r} stated by a source; keep every "
                            "specific detail or refuse")
    return warnings


def _changed_fact(check: Grounding) -> str | None:
    """The re-ask line for a fact the fusion states otherwise than its notes: an invented word,
    a flipped negation or a relation turned round; None when it states none."""
    if check.invented:
        return (f"content adds {check.invented[0]!r}, which no source note states; use only "
                "facts and words from the notes")
    if check.negation_flips:
        return (f"content changes a negation ({check.negation_flips[0]!r}) that the notes "
                "state the other way; keep each fact's polarity")
    if check.reversed:
        return (f"content turns a relation round ({check.reversed[0]!r}) that the notes state "
                "the other way; keep each word on its side")
    return None


# ---- the fused note -----------------------------------------------------------------------
def majority_type(notes: Sequence[Note]) -> str:
    """Most common type; ties go to the type of the newest note among the tied."""
    counts = Counter(n.type for n in notes)
    best = max(counts.values())
    tied = {t for t, c in counts.items() if c == best}
    newest = max((n for n in notes if n.type in tied), key=lambda n: (said_order(n), n.id))
    return newest.type


def fused_fields(members: Sequence[Note], generation_sources: Sequence[Note]) -> dict[str, Any]:
    """Columns of the fused note that code decides (policy), not the model."""
    accessed = [n.last_accessed_at for n in members if n.last_accessed_at is not None]
    newest = max(members, key=said_order)
    return {
        "importance": max(n.importance for n in members),
        "access_count": sum(n.access_count for n in members),
        "consolidation_generation": max(n.consolidation_generation for n in generation_sources) + 1,
        "last_accessed_at": max(accessed) if accessed else None,
        # A fusion that carries a person's note is still that person's note (R26): manual, so
        # no later archive or contradiction retires it.
        "is_auto_generated": all(n.is_auto_generated for n in [*members, *generation_sources]),
        # Fusing throwaway notes gives a throwaway note; anything else is ordinary memory.
        "protection": Protection.EPHEMERAL.value
        if all(n.protection == Protection.EPHEMERAL.value for n in members)
        else Protection.STANDARD.value,
        "lineage_conversation_ids": lineage_conversations([*members, *generation_sources]),
        # When its facts were stated: the newest member's (``NewNote.stated_at``), and
        # where that member stands among notes stated at the same time.
        "stated_at": newest.created_at,
        "write_seq": newest.write_seq,
        # It stands for every member: it lives as long as the longest-lived of them.
        "expires_at": lasting_expiry(n.expires_at for n in members),
    }


def lineage_conversations(sources: Sequence[Note]) -> tuple[str, ...]:
    """The source conversations a note written from ``sources`` carries facts of: theirs, and
    those of the notes they were written from (prune checks a fused note against them)."""
    found = {c for n in sources for c in (n.source_conversation_id,
                                          *n.lineage_conversation_ids) if c is not None}
    return tuple(sorted(found))


def revocation_comment(new_id: str, reason: str) -> str:
    reason = " ".join(reason.split())[:200] or "merged overlapping notes"
    return f"Consolidated into {new_id}: {reason}"
