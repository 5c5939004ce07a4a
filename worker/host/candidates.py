"""What a host's model is offered to fuse (``fusion_candidates``): the scope's similar pairs,
the contradictions phase's open pairs and the latest run's open items, as topics.

Nothing is written here; ``worker.host.fusion`` applies what the host fuses or keeps apart."""

from __future__ import annotations

from typing import Any

from worker.app import App
from worker.clock import utcnow
from worker.domain.attempts import latest_attempts
from worker.domain.types import Note, Scope, fingerprint_notes
from worker.host.errors import Invalid
from worker.host.fusion import FUSED, MAX_SOURCE_IDS
from worker.host.records import note_record
from worker.host.topic import chained, topic_item, topic_pieces
from worker.phases.consolidate.core import clusterable
from worker.review.propose import held_notes
from worker.safety.injection import injection_signals
from worker.similarity import neighbour_pairs
from worker.store.models import RunStepRow

_OPEN_TYPES = {"consolidate": "cluster", "contradictions": "contradiction"}


def fusion_candidates(
    app: App, scope: Scope, threshold: float = 0.88, limit: int | None = 50
) -> list[dict[str, Any]]:
    """Similar active pairs of the scope (most similar first), then the contradictions phase's
    candidate pairs no rule settles as the scope stands now (``open_pairs``: what a dream would
    ask a model about), each pair with the ``sources`` that found it, plus the open items of
    its latest run; pairs chained by shared notes as one topic (``chained``), and last, in a
    small scope, its short notes as one (``topic_item``): what a dream's model is asked about.

    Excludes pairs/clusters holding two notes kept apart (a host's "keep apart", a reviewer's
    declined merge, revocation or flag) or already fused at their current versions,
    anything involving a protected or immutable note, a note whose text reads like instructions
    (``offered``), and anything involving a note an open review item would change
    (``held_notes``: it waits for the reviewer).
    """
    if not 0.0 <= threshold <= 1.0:
        raise Invalid("threshold must be between 0 and 1")
    from worker.phases.contradictions.service import open_pairs_read

    # One read of the scope (every note embedded first) for both kinds of pair.
    live, read, loaded = open_pairs_read(app, scope)
    snap = read.notes.live(utcnow())  # an expired note is archive's: offered for no fusion
    with app.uow() as uow:
        run = uow.run_history.latest_finished(scope)
        # The latest attempts' (an interrupted attempt's open clusters were judged again).
        steps = latest_attempts(uow.runs.steps(run.id)) if run is not None else []
        notes = snap.notes
        pairs = [(i, j, s) for i, j, s in neighbour_pairs(
            snap.vectors, threshold, app.settings.ann_threshold)
            if offered(notes[i]) and offered(notes[j])]
        sources = {(i, j): ["cosine"] for i, j, _ in pairs}
        pairs += _live_pairs(live, notes, sources)
        by_id = snap.by_id()
        open_items = _open_items(steps, by_id, run.id if run is not None else None)
        groups = [[notes[i], notes[j]] for i, j, _ in pairs] + [g for _, g in open_items]
        fps = [fingerprint_notes(g) for g in groups]
        hidden = set(uow.judgements.known(scope, FUSED, fps))
        # Any two notes a host kept apart or a reviewer declined (merge, revoke, flag) at their
        # versions: a group holding both is not offered, whatever else it holds.
        apart = read.memory.kept_apart(notes)  # the read holds KEEP_APART, DECLINED_APART
        hidden |= {fp for fp, g in zip(fps, groups, strict=True)
                   if any(frozenset((a.id, b.id)) in apart
                          for k, a in enumerate(g) for b in g[k + 1:])}
        # A note an open review item would change waits for the reviewer, as a run leaves it:
        # fusing it here would only make the item stale.
        held = held_notes(uow, scope)
        hidden |= {fp for fp, g in zip(fps, groups, strict=True) if any(n.id in held for n in g)}
    seen: set[str] = set()
    out = chained(_pair_items(pairs, fps, notes, sources, hidden, seen),
                  app.settings.contradictions.topic_size, apart | loaded.apart)
    out += _run_items(open_items, fps[len(pairs):], hidden, seen)
    shown = [n for n in notes if offered(n) and n.id not in held]
    listed = [item["note_ids"] for item in out]
    topic = topic_item(loaded.small, by_id, shown, loaded.apart, listed, MAX_SOURCE_IDS)
    out += [topic] if topic is not None else []
    out += topic_pieces(loaded.large, by_id, shown, loaded.apart, listed,
                        min(MAX_SOURCE_IDS, app.settings.contradictions.small_scope_notes))
    return out[:limit] if limit is not None else out


def _pair_items(pairs: list[tuple[int, int, float]], fps: list[str], notes: list[Note],
                sources: dict[tuple[int, int], list[str]], hidden: set[str],
                seen: set[str]) -> list[dict[str, Any]]:
    """The pairs as listed (``seen``: the fingerprints listed, this adds to it); a pair the
    latest run left open is listed as that item instead (its run, step and reason)."""
    out: list[dict[str, Any]] = []
    left_open = set(fps[len(pairs):])
    for (i, j, sim), fp in zip(pairs, fps, strict=False):
        if fp in hidden or fp in seen or (fp in left_open and sources[(i, j)] != ["cosine"]):
            continue
        seen.add(fp)
        out.append({"type": "pair", "note_ids": [notes[i].id, notes[j].id],
                    "record_a": note_record(notes[i]), "record_b": note_record(notes[j]),
                    "similarity": round(sim, 4), "sources": sources[(i, j)]})
    return out


def _run_items(open_items: list[tuple[dict[str, Any], list[Note]]], fps: list[str],
               hidden: set[str], seen: set[str]) -> list[dict[str, Any]]:
    """The latest run's open items as listed, but those ``hidden`` or listed (``seen``: this
    adds to it)."""
    out: list[dict[str, Any]] = []
    for (meta, group), fp in zip(open_items, fps, strict=True):
        if fp in hidden or fp in seen:
            continue
        seen.add(fp)
        item: dict[str, Any] = {"type": meta["type"], "note_ids": [n.id for n in group],
                                "records": [note_record(n) for n in group],
                                "similarity": meta.get("similarity"), "reason": meta.get("reason"),
                                "run_id": meta["run_id"], "step_id": meta["step_id"]}
        if len(group) == 2:
            item["record_a"], item["record_b"] = item["records"]
        out.append(item)
    return out


def _live_pairs(live: list[dict[str, Any]], notes: list[Note],
                sources: dict[tuple[int, int], list[str]]) -> list[tuple[int, int, float]]:
    """The contradictions phase's candidate pairs that no rule settles, as they stand now
    (``open_pairs``), after the similar pairs (``sources``: each listed pair's searches, this
    adds to it): what a dream would ask a model about, found however the notes are worded."""
    row = {n.id: k for k, n in enumerate(notes)}
    out = []
    for p in live:
        i, j = sorted((row.get(p["a"], -1), row.get(p["b"], -1)))
        if i >= 0 and (i, j) not in sources and offered(notes[i]) and offered(notes[j]):
            sources[(i, j)] = list(p["sources"])
            out.append((i, j, float(p["similarity"])))
    return out


def offered(note: Note) -> bool:
    """Whether a host's model may be shown ``note`` as a candidate: retirable, neither flagged
    nor reading like instructions. The worker's own judge never sees such a note in a cluster
    or a pair either (R14); a host's model must not be the way round it."""
    return clusterable(note) and not injection_signals(note.content)


def held_for_review(app: App, scope: Scope) -> dict[str, int]:
    """Note id → the open review item that holds it out of ``fusion_candidates``."""
    with app.uow() as uow:
        return held_notes(uow, scope)


def _step_note_ids(step: RunStepRow) -> list[str]:
    for blob in (step.output or {}, step.input or {}):
        for key in ("note_ids", "ids", "pair", "cluster"):
            value = blob.get(key)
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return list(value)
    return []


def _open_items(
    steps: list[RunStepRow], by_id: dict[str, Note], run_id: str | None
) -> list[tuple[dict[str, Any], list[Note]]]:
    """Child steps the rule-based judge left open, whose notes are all still active and
    ``offered``."""
    items: list[tuple[dict[str, Any], list[Note]]] = []
    for step in steps:
        output = step.output or {}
        if step.parent_id is None or output.get("verdict") != "open":
            continue
        ids = _step_note_ids(step)
        group = [by_id[i] for i in ids if i in by_id]
        if len(group) < 2 or len(group) != len(ids) or not all(map(offered, group)):
            continue
        sim = output.get("similarity", (step.input or {}).get("similarity"))
        items.append(({"type": _OPEN_TYPES.get(step.phase, step.phase), "run_id": run_id,
                       "step_id": step.id, "reason": output.get("reason"),
                       "similarity": sim if isinstance(sim, int | float) else None}, group))
    return items
