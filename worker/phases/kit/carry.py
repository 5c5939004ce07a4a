"""The scope read of a phase, once per in-process run: notes with current vectors, the run's
journal, verdict memory and the agent, carried from phase to phase (``RunCarry.scope_notes``)
and kept current from what each write applied; under Celery every phase reads it afresh."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from worker.domain.types import Note, NoteStatus, content_hash
from worker.phases.kit.changes import ItemResult, ItemStatus, stated_at
from worker.phases.kit.snapshot import (
    _OWNER_GONE,
    _RETIRED,
    DECLINED_APART,
    KEEP_APART,
    Memory,
    RunJournal,
    journal_of,
)
from worker.similarity.terms import NoteWords
from worker.store.repositories.notes import ScopeSnapshot

# Every verdict-memory kind a phase reads (consolidation's refusals, the host's keep-apart and a
# reviewer's declines, contradictions' pairs and held-back retirements): one query per run.
# "unanswered": questions the model refused or answered unusably (worker.llm.unanswered), read
# with the rest so a phase's fan-outs recall them without a statement of their own;
# "unsettled": pairs a contradictions answer settled nothing about, each with its date.
MEMORY_KINDS = ("cluster", KEEP_APART, DECLINED_APART, "pair", "retire_pending", "unanswered",
                "unsettled")


class Judged(NamedTuple):
    """A verdict-memory row as the phases read it (``Memory.rows``)."""

    kind: str
    fingerprint: str
    note_ids: list[str]
    verdict: str
    reason: str | None
    at: datetime | None = None  # when recorded (the memory's load reads it)
    row_id: int | None = None  # the table's id, and the run that recorded it (the load reads
    run_id: str | None = None  # both; a row this run recorded since has neither)


@dataclass
class ScopeLoad:
    """What the phases of one run read of the scope; ``memory`` None until a phase asked."""

    notes: ScopeSnapshot
    journal: RunJournal
    memory: Memory | None = None
    vectors: bool = True  # False: loaded without vectors (prune and archive need none)
    # The clusters this run's consolidation left unmerged, as its steps recorded them (set by
    # consolidation in this process; None: read them from the run's steps).
    unmerged: list[list[str]] | None = None
    # False from the start of a write given this load as its known state (``known``) until
    # ``keep_current`` followed what it committed: a phase that failed in between leaves it
    # False, and later writes re-read under the lock instead of trusting it.
    current: bool = True
    # Each text's words as a lexical signal made them (text → words, worker.similarity.terms):
    # consolidation's topical pass reads the notes' words, contradictions reuses them. Keyed by
    # the text, so no write can leave one stale; a phase without it makes its own.
    words: dict[str, NoteWords] = field(default_factory=dict)


@dataclass(frozen=True)
class Written:
    """What a phase's write applied, captured at the end of its block (before the commit)."""

    results: list[ItemResult]
    state: dict[str, dict[str, Any]]  # after-images of every note the write re-read
    judgements: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    vectors: dict[str, np.ndarray]
    now: datetime
    checked: Sequence[str] = ()  # notes prune marked as looked at
    dry_run: bool = False


def load(ctx: Any, *, vectors: bool = True, memory: bool = False) -> ScopeLoad:
    """The scope as the phase plans with it: from the run's carry when an earlier phase of this
    run loaded it, else one read (notes, journal, memory and the agent, on one transaction).
    Each phase gets its own copies of the notes: what it sets on them while planning (a dry
    run's flags, a loser marked revoked) never reaches the carry."""
    carry = ctx.carry
    held: ScopeLoad | None = carry.scope_notes if carry is not None else None
    if held is not None and (held.vectors or not vectors):
        if memory and held.memory is None:
            with ctx.uow() as uow:
                held.memory = _memory(uow, ctx)
        if memory:
            _hand_unanswered(ctx, held.memory)
        return _copy(held)
    with ctx.uow() as uow:
        model = ctx.app.embedder.model_name if vectors else None
        snap = uow.notes.load_scope(ctx.scope, model=model, vectors=vectors)
        journal = held.journal if held is not None else _journal(uow, ctx)
        mem = (held.memory if held is not None else None) or (_memory(uow, ctx) if memory
                                                             else None)
        ctx.agent(uow)  # read once with the rest; proposals and retention ask it later
    if snap.unembedded:
        snap = _embed(ctx, snap)
    if memory:
        _hand_unanswered(ctx, mem)
    fresh = ScopeLoad(snap, journal, mem, vectors, words=held.words if held is not None else {})
    if carry is not None:
        carry.scope_notes = fresh
    return _copy(fresh)


def _journal(uow: Any, ctx: Any) -> RunJournal:
    if ctx.run_id is None or (ctx.carry is not None and ctx.carry.fresh):
        return RunJournal()  # a first attempt just claimed here: this run wrote nothing yet
    return journal_of(uow.writes.journal(ctx.run_id, ctx.scope.key))


def _memory(uow: Any, ctx: Any) -> Memory:
    rows = [Judged(*r) for r in uow.judgements.memory_rows(ctx.scope, MEMORY_KINDS)]
    return Memory({(r.kind, r.fingerprint): r.verdict for r in rows}, rows)


def _hand_unanswered(ctx: Any, memory: Memory | None) -> None:
    """The loaded memory's unanswered questions on the context, for the phase's fan-outs
    (``worker.llm.unanswered.recall``): fingerprint → (verdict, when recorded)."""
    if memory is not None and hasattr(ctx, "unanswered"):
        ctx.unanswered = {r.fingerprint: (r.verdict, r.at) for r in memory.rows
                          if r.kind == "unanswered" and getattr(r, "at", None) is not None}


def _embed(ctx: Any, snap: ScopeSnapshot) -> ScopeSnapshot:
    """Embed the notes the load found without a vector from the configured model, store them
    (one executemany), and put them in the matrix."""
    embedder = ctx.app.embedder
    todo = snap.unembedded
    fresh = embedder.embed([snap.notes[k].content for k in todo])
    with ctx.uow() as uow:
        uow.notes.set_embeddings([(snap.notes[k].id, fresh[i]) for i, k in enumerate(todo)],
                                 embedder.model_name, ctx.scope.key)
        uow.commit()
    dim = len(fresh[0])
    matrix = (np.array(snap.vectors, dtype=np.float32) if snap.vectors.shape[1] == dim
              else np.zeros((len(snap.notes), dim), dtype=np.float32))
    for i, k in enumerate(todo):
        matrix[k] = fresh[i]
    matrix.setflags(write=False)
    return ScopeSnapshot(snap.notes, matrix, checked=snap.checked, rest=snap.rest,
                         absorbed=snap.absorbed, began=snap.began)


def _copy_note(n: Note) -> Note:
    """A field-for-field copy, without ``__init__``'s defaults (its own dict: one copy in C)."""
    c: Note = object.__new__(Note)
    c.__dict__ = n.__dict__.copy()
    return c


def _copy(held: ScopeLoad) -> ScopeLoad:
    notes = []
    new = object.__new__
    for n in held.notes.notes:
        c = new(Note)  # a field-for-field copy, without __init__'s defaults (one dict copy)
        c.__dict__ = n.__dict__.copy()
        notes.append(c)
    # The matrix is read-only, the journal frozen; memory, the checked marks and the rest of
    # each row are only read; the words are shared, each phase adding the texts it read.
    return ScopeLoad(ScopeSnapshot(notes, held.notes.vectors, checked=held.notes.checked,
                                   rest=held.notes.rest, absorbed=held.notes.absorbed,
                                   began=held.notes.began),
                     held.journal, held.memory, held.vectors, held.unmerged, words=held.words)


def known(ctx: Any) -> ScopeLoad | None:
    """The run's carried scope as the state a write may check its changes against instead of
    re-reading them (``PhaseWrite.apply(known=...)``): in-process only, and only while every
    write so far was followed (under Celery, or after a failed phase: None, the write re-reads).
    """
    held: ScopeLoad | None = ctx.carry.scope_notes if ctx.carry is not None else None
    return held if held is not None and held.current else None


def written(w: Any, results: Sequence[ItemResult], vectors: dict[str, np.ndarray] | None = None,
            checked: Sequence[str] = ()) -> Written:
    """What ``w`` (a ``PhaseWrite``) applied so far; call it last in the write's block."""
    return Written(list(results), {k: dict(v) for k, v in w.state.items()},
                   list(w._judgements), list(w._steps), dict(vectors or {}), w.target.now,
                   tuple(checked), w.target.dry_run)


def keep_current(ctx: Any, done: Written) -> ScopeLoad | None:
    """After the write committed: the carried scope as a fresh read would show it now.

    Only what this write applied is taken from its after-images. A note the host changed
    meanwhile keeps the version and text the carry had, so a later phase's plan for it is
    stale and its write skips it (the write re-checks every version) — never applied over the
    host's edit; one seen changed by this write's re-read drops the carry (the next phase
    reads afresh). The carried load, or None when there is none."""
    carry = ctx.carry
    held: ScopeLoad | None = carry.scope_notes if carry is not None else None
    if held is None or done.dry_run:
        return held
    held.current = True
    applied = [r for r in done.results
               if r.status == ItemStatus.APPLIED and r.change.entity == "note"]
    touched = {m.id for r in applied for m in r.change.members} | {
        r.change.into_id for r in applied if r.change.edits_into and r.change.into_id}
    born = [r.change.new_note for r in applied if r.change.new_note is not None]
    known = {n.id: n.version for n in held.notes.notes}
    moved = any(i not in touched and i in known and int(row["version"]) != known[i]
                for i, row in done.state.items())
    if moved or (held.vectors and any(n.id not in done.vectors for n in born)):
        carry.scope_notes = None
        return None
    for i in done.checked:
        held.notes.checked[i] = done.now
    _journal_after(held, applied, done)
    _memory_after(held, done.judgements)
    if touched or born:
        held.notes = _notes_after(ctx.scope, held, touched, born, done)
    return held


def _notes_after(scope: Any, held: ScopeLoad, touched: set[str], born: list[Any],
                 done: Written) -> ScopeSnapshot:
    snap = held.notes
    keep: list[int] = []
    notes: list[Note] = []
    for k, n in enumerate(snap.notes):
        after = done.state.get(n.id) if n.id in touched else None
        if after is None:
            keep.append(k)
            notes.append(n)
        elif after["status"] == NoteStatus.ACTIVE.value:
            c = _copy_note(n)
            c.version, c.flags = int(after["version"]), list(after.get("flags") or [])
            c.importance = after.get("importance", n.importance)
            c.consolidated_into_id, c.updated_at = after.get("consolidated_into_id"), done.now
            c.created_at = after.get("created_at", n.created_at)
            c.write_seq = after.get("write_seq", n.write_seq)
            c.expires_at = after.get("expires_at", n.expires_at)
            keep.append(k)
            notes.append(c)
    new = [_new_note(scope, nn, done.now) for nn in born]
    rows = [snap.vectors[keep]] if held.vectors else []
    if held.vectors and new:
        rows.append(np.vstack([np.asarray(done.vectors[n.id], dtype=np.float32) for n in new]))
    notes += new
    order = sorted(range(len(notes)), key=lambda k: notes[k].id)
    matrix = (np.vstack(rows)[order] if rows and len(notes) else
              np.zeros((len(notes), 0), dtype=np.float32))
    for n in new:
        snap.checked[n.id] = None
        snap.began[n.id] = done.now  # RowBuilder writes it valid from the write's time
    _rest_after(snap.rest, touched, born, done)
    _absorbed_after(snap.absorbed, notes, done)
    return ScopeSnapshot([notes[k] for k in order], matrix, checked=snap.checked,
                         rest=snap.rest, absorbed=snap.absorbed, began=snap.began)


def _rest_after(rest: dict[str, tuple[Any, Any, Any]], touched: set[str], born: list[Any],
                done: Written) -> None:
    """The comments, valid_to and flags the write left on what it touched (its after-images)
    and on what it inserted (its comments; no flags, no valid_to)."""
    for i in touched:
        after = done.state.get(i)
        if after is None or after["status"] != NoteStatus.ACTIVE.value:
            rest.pop(i, None)
            continue
        values = (after.get("comments"), after.get("valid_to"), after.get("flags"))
        if values == (None, None, None):
            rest.pop(i, None)
        else:
            rest[i] = values
    for nn in born:
        if nn.comments is not None:
            rest[nn.id] = (nn.comments, None, None)


def _absorbed_after(absorbed: set[str], notes: list[Note], done: Written) -> None:
    """The notes with a conversation the write retired others into: ones prune may give them
    back from (``ScopeSnapshot.absorbed``, as a fresh load would read it)."""
    kept = {n.id for n in notes if n.source_conversation_id is not None}
    absorbed.update(into for r in done.state.values()
                    if r["status"] == NoteStatus.REVOKED.value
                    and (into := r.get("consolidated_into_id")) in kept)


def _new_note(scope: Any, nn: Any, now: datetime) -> Note:
    """The inserted note as the scope load reads it back (``RowBuilder`` writes these columns)."""
    return Note(id=nn.id, scope=scope, content=nn.content, type=nn.type, protection=nn.protection,
                is_auto_generated=nn.is_auto_generated, importance=nn.importance,
                access_count=nn.access_count, created_at=stated_at(nn, now), updated_at=now,
                last_accessed_at=nn.last_accessed_at,
                consolidation_generation=nn.consolidation_generation,
                content_hash=content_hash(nn.content),
                lineage_conversation_ids=tuple(nn.lineage_conversation_ids),
                source_conversation_id=nn.source_conversation_id, write_seq=nn.write_seq,
                expires_at=nn.expires_at)


def _journal_after(held: ScopeLoad, applied: list[ItemResult], done: Written) -> None:
    produced = {r.change.new_note.id for r in applied if r.change.new_note is not None}
    retired = {m.id for r in applied if not r.change.reason.startswith(_OWNER_GONE)
               for m in r.change.members
               if done.state.get(m.id, {}).get("status") in _RETIRED}
    if produced or retired:
        held.journal = RunJournal(held.journal.produced | produced,
                                  held.journal.retired | retired)


def _memory_after(held: ScopeLoad, rows: list[dict[str, Any]]) -> None:
    """Verdicts the write recorded; first writer wins, as in the table."""
    memory = held.memory
    if memory is None:
        return
    for r in rows:
        key = (r["kind"], r["fingerprint"])
        if key not in memory.verdicts:
            memory.verdicts[key] = r["verdict"]
            memory.rows.append(Judged(r["kind"], r["fingerprint"], list(r["note_ids"]),
                                      r["verdict"], r["reason"]))

