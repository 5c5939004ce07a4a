"""Fusion for hosts that bring their own model: fuse with host text, keep apart.

No model call happens here; the host's LLM judges and writes the fused text, the worker checks
and applies it in one transaction with the same guarantees as the consolidate phase. What a
host is offered to fuse is listed by ``worker.host.candidates``."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from worker.app import App
from worker.clock import utcnow
from worker.domain.limits import INT_MAX, ident_problem, text_problem
from worker.domain.types import (
    Note,
    NoteStatus,
    Scope,
    fingerprint_notes,
)
from worker.host.errors import Conflict, Invalid, NotFound
from worker.host.records import note_record
from worker.host.remember import canonical_type
from worker.phases.consolidate.core import (
    fused_fields,
    majority_type,
    revocation_comment,
)
from worker.phases.kit import ItemStatus, NewNote, WriteConflict, WriteTarget, open_write, supersede
from worker.phases.kit.snapshot import KEEP_APART
from worker.review.propose import settle_stale
from worker.safety.undo import FUSE_PREFIX
from worker.store.scope_locks import lock_scopes
from worker.text.grounding import check_fusion
from worker.text.temporal import allowed_dates_lazily
from worker.text.words import is_blank

log = structlog.get_logger(__name__)

FUSED = "fused"
# Ids one fuse or keep-apart may name (the API's schema says the same): as many as the largest
# small scope holds (DREAM_CONTRADICTIONS__SMALL_SCOPE_NOTES, at most 100), so a small scope's
# topic item can always be answered whole; at 50, a scope of 51-60 short notes got none.
MAX_SOURCE_IDS = 100


@dataclass
class FuseResult:
    note: dict[str, Any]
    superseded: list[str]
    warnings: list[str]
    undo_id: str  # `dream undo` (the API's and MCP's undo) takes it and revokes the fusion
    # Open review items that named a source: recorded stale with the fusion (never to apply).
    review_items_stale: list[int]

    def as_dict(self) -> dict[str, Any]:
        """What the API and the MCP tool answer."""
        return {"note": self.note, "superseded": self.superseded, "warnings": self.warnings,
                "undo_id": self.undo_id, "review_items_stale": self.review_items_stale}


def _load_sources(app: App, source_ids: Iterable[str], allowed: Scope | None,
                  done: str = "fused") -> list[Note]:
    ids = list(dict.fromkeys(source_ids))
    if len(ids) < 2:
        raise Invalid("give at least two distinct source ids")
    if len(ids) > MAX_SOURCE_IDS:
        raise Invalid(f"give at most {MAX_SOURCE_IDS} source ids, not {len(ids)}")
    # Checked before the read: PostgreSQL refuses a NUL and neither driver encodes a lone
    # surrogate, so an id no note can have would be an internal error, not an answer.
    for number, note_id in enumerate(ids, start=1):
        if problem := ident_problem(note_id):
            raise Invalid(f"source id {number} {problem}")
    with app.uow() as uow:
        notes = uow.notes.get_many(ids)
    found = {n.id: n for n in notes if allowed is None or n.scope == allowed}
    missing = [i for i in ids if i not in found]
    if missing:
        raise NotFound(f"unknown note id {missing[0]}" + (
            f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    ordered = [found[i] for i in ids]
    if len({n.scope for n in ordered}) > 1:
        raise Invalid(f"source notes belong to different scopes; notes are only {done} "
                      "within one scope")
    return ordered


def check_judged_versions(notes: list[Note], judged: Mapping[str, int] | None) -> None:
    """A host's verdict is about the text its model read. With ``judged`` (note id → the
    version the candidates listing showed it) a source changed since is refused, as a dream's
    stale plan is (R10): otherwise the host's fusion of what a note said replaced what it says
    now, and its keep-apart bound a text nobody judged. Checked on the notes as read for the
    write (fuse's write checks those versions again)."""
    if not judged:
        return
    ids = {n.id for n in notes}
    if extra := [i for i in judged if i not in ids]:
        raise Invalid(f"source_versions names note {str(extra[0])[:64]!r}, which is not one of "
                      "the source ids; give the version of each source your model judged")
    for n in notes:
        seen = judged.get(n.id)
        if seen is None:
            continue
        if isinstance(seen, bool) or not isinstance(seen, int) or not 1 <= seen <= INT_MAX:
            # A larger one is no version any note has: not "changed since", a wrong number.
            raise Invalid(f"source_versions of note {n.id} must be a version number from 1 to "
                          f"{INT_MAX}")
        if seen != n.version:
            raise Conflict(f"note {n.id} is at version {n.version}, not version {seen} that "
                           "your model judged: it changed since; fetch candidates again and "
                           "judge its current text")


def _check_fusable(notes: list[Note]) -> None:
    for n in notes:
        if n.status != NoteStatus.ACTIVE.value:
            raise Conflict(f"note {n.id} is {n.status}, not active; only active notes can be fused")
        if not n.retirable:
            raise Conflict(f"note {n.id} is {n.protection}; protected notes are never superseded")
        if n.expired(utcnow()):  # archive's to take: it neither wins nor joins a fusion
            raise Conflict(f"note {n.id} expired at {n.expires_at}; it is fused with nothing")


def _checked_text(app: App, fused_content: str, fused_importance: float | None) -> str:
    text = (fused_content or "").strip()
    if is_blank(text):
        raise Invalid("fused_content is empty (or only invisible characters)")
    if problem := text_problem(text):  # NUL or a lone surrogate (MCP and Python callers too)
        raise Invalid(f"fused_content {problem}")
    limit = app.settings.host.max_fused_chars
    if len(text) > limit:
        raise Invalid(f"fused_content has {len(text)} characters; the limit is {limit} "
                      "(DREAM_HOST__MAX_FUSED_CHARS)")
    if fused_importance is not None and not 0.0 <= fused_importance <= 1.0:
        raise Invalid("fused_importance must be between 0 and 1")
    return text


def fuse(
    app: App, source_ids: list[str], fused_content: str, fused_importance: float | None = None,
    strict: bool = False, *, allowed_scope: Scope | None = None, note_type: str | None = None,
    source_versions: Mapping[str, int] | None = None,
) -> FuseResult:
    """Create the host's fused note and supersede every source, atomically (R9).

    Sources end revoked with importance 0.0, ``consolidated_into_id`` pointing at the new note, a
    lineage edge each and an operation-log entry each. ``allowed_scope`` limits which ids exist for
    the caller (a scoped API token); ``source_versions`` refuses a source changed since the
    host's model read it (``check_judged_versions``). Ungrounded text (``grounding_problems``) is a warning, or a
    refusal when ``strict``; omissions are always only warnings.
    """
    text = _checked_text(app, fused_content, fused_importance)
    if note_type is not None:
        note_type = canonical_type(note_type)
    sources = _load_sources(app, source_ids, allowed_scope)
    check_judged_versions(sources, source_versions)
    _check_fusable(sources)
    problems, warnings = grounding_problems(sources, text)
    if problems and strict:
        raise Invalid(f"fused_content is not grounded in the sources: {'; '.join(problems[:3])}")
    warnings = problems + warnings
    scope = sources[0].scope
    fields = fused_fields(sources, sources)  # same policy as the consolidate phase
    if fused_importance is not None:
        fields["importance"] = fused_importance
    kind = note_type or majority_type(sources)
    vector = app.embedder.embed([text])[0]
    now = utcnow()
    new_id = str(uuid.uuid4())
    note = NewNote(id=new_id, content=text, type=kind, reason="host fuse",
                   comments=f"fused by the host from {len(sources)} notes", **fields)
    change = supersede("host fuse", sources, new_note=note, relation=FUSED, reason="host fuse",
                       comment=revocation_comment(new_id, "fused by the host"), valid_to=now,
                       importance=0.0)
    changed = sources[0].id
    undo_id = f"{FUSE_PREFIX}{uuid.uuid4()}"
    try:  # one write, no run: no fence and no blast-radius share (the host decided)
        with open_write(WriteTarget(app=app, scope=scope, now=now, log_id=undo_id)) as w:
            (result,) = w.apply([change], vectors={new_id: vector})
            if result.status != ItemStatus.APPLIED:
                changed = (result.stale_ids or [changed])[0]
                raise WriteConflict(f"note {changed} changed")
            w.judgement(FUSED, fingerprint_notes(sources), [n.id for n in sources], FUSED,
                        "host fuse")
            stale = settle_stale(w.uow, scope, now, f"the host's fuse {undo_id}", by="host",
                                 naming=[n.id for n in sources])
    except WriteConflict:
        raise Conflict(f"note {changed} changed or was retired meanwhile; fetch candidates "
                       "again") from None
    with app.uow() as uow:
        created = uow.notes.get_many([new_id])[0]
    log.info("host.fused", scope=scope.key, note_id=new_id, sources=len(sources),
             ungrounded=len(problems), undo_id=undo_id, review_items_stale=len(stale))
    return FuseResult(note_record(created), [n.id for n in sources], warnings, undo_id, stale)


def grounding_problems(sources: list[Note], text: str) -> tuple[list[str], list[str]]:
    """What ``strict`` refuses (invented facts, flipped negations, a reversed relation, a
    dropped source, relative time), and what is only a warning (omitted phrases); the
    consolidate phase's own check."""
    check = check_fusion([n.content for n in sources], text, allowed=allowed_dates_lazily(sources))
    problems = []
    if check.invented:
        problems.append(f"not found in any source: {', '.join(check.invented[:10])}")
    if check.negation_flips:
        problems.append(f"negation changed: {', '.join(check.negation_flips[:5])}")
    if check.reversed:
        problems.append(f"relation reversed: {', '.join(check.reversed[:5])}")
    if check.dropped:
        problems.append("leaves out most of "
                        + ", ".join(sources[i].id for i in check.dropped[:5]))
    if check.relative_time:
        problems.append(f"relative time: {', '.join(check.relative_time[:5])}")
    warnings = [f"omits: {', '.join(check.omitted[:10])}"] if check.omitted else []
    return problems, warnings


def keep_apart(
    app: App, source_ids: list[str], *, allowed_scope: Scope | None = None,
    source_versions: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Record "not the same" for these notes at their current versions (until one changes).
    Under the scope's lock, the notes read again after it: a run's write holding it is waited
    for and its changes seen, and one waiting for it sees this record (``PhaseWrite._apply``)."""
    notes = _load_sources(app, source_ids, allowed_scope, done="kept apart")
    scope = notes[0].scope
    with app.uow() as uow:
        lock_scopes(uow.session, [scope.key])
        now = {n.id: n for n in uow.notes.get_many([n.id for n in notes])}
        if gone := [n.id for n in notes if n.id not in now]:
            raise NotFound(f"unknown note id {gone[0]}")
        notes = [now[n.id] for n in notes]
        check_judged_versions(notes, source_versions)
        for n in notes:  # a verdict on a retired note binds nothing: no dream or host sees it
            if n.status != NoteStatus.ACTIVE.value:
                raise Conflict(f"note {n.id} is {n.status}, not active; only active notes can "
                               "be kept apart")
        fp = fingerprint_notes(notes)
        when = utcnow()
        uow.judgements.record(scope, KEEP_APART, fp, [n.id for n in notes], KEEP_APART,
                              "host said keep apart", None, when)
        # A merge or revocation proposed over two of them can never apply now: stale.
        stale = settle_stale(uow, scope, when, "the host kept notes "
                             f"{', '.join(n.id for n in notes)} apart", by="host",
                             naming=[n.id for n in notes])
        uow.commit()
    log.info("host.kept_apart", scope=scope.key, notes=len(notes), review_items_stale=len(stale))
    return {"note_ids": [n.id for n in notes], "fingerprint": fp, "review_items_stale": stale}
