"""Write-time dedup: a host's new note becomes NOOP (already known), UPDATE (supersedes a shorter
near-duplicate) or ADD, with one light indexed query and one vectorised comparison per write."""

from __future__ import annotations

import unicodedata
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np
import structlog
from sqlalchemy.exc import IntegrityError

from worker.app import App
from worker.clock import next_write_seq, utcnow
from worker.domain.limits import ident_problem, scope_problem, text_problem
from worker.domain.types import (
    NoteStatus,
    NoteType,
    Scope,
    content_hash,
    conversations_of,
    normalise_text,
    stands_in,
)
from worker.host.errors import Conflict, Invalid
from worker.host.note_ids import derived_id, id_key, salt_held, scope_salt
from worker.host.remember_cache import cache_of, hash_words, hex_words
from worker.phases.consolidate.core import lineage_conversations
from worker.phases.kit import ItemStatus, NewNote, WriteConflict, WriteTarget, open_write, supersede
from worker.phases.kit.kept_apart import bind_again
from worker.review.propose import holding_item, settle_stale
from worker.safety.undo import REMEMBER_PREFIX
from worker.text.words import is_blank

log = structlog.get_logger(__name__)

Action = Literal["NOOP", "UPDATE", "ADD"]
_TYPES = {t.value.lower(): t.value for t in NoteType}
_ACTIVE = NoteStatus.ACTIVE.value
LONGER_BY = 1.2  # an UPDATE must carry at least 20% more text than the note it supersedes


@dataclass(frozen=True)
class RememberResult:
    action: Action
    id: str
    reason: str
    similarity: float | None = None
    superseded_id: str | None = None
    undo_id: str | None = None  # an UPDATE's: `dream undo` gives the superseded note back

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "id": self.id, "reason": self.reason,
                "similarity": self.similarity, "superseded_id": self.superseded_id,
                "undo_id": self.undo_id}


def decide(
    best: float | None, new_len: int, old_len: int, noop_threshold: float, update_threshold: float,
    note_type: str = "",
) -> tuple[Action, str]:
    """Pure policy for a write not identical (after normalisation) to a note. Only notes of its
    type are compared: an ADD's reason names it, or another type's look-alike reads unexplained."""
    notes = f"{note_type} notes" if note_type else "notes of this type"
    if best is None:
        return "ADD", f"no active {notes} in the scope"
    if best >= noop_threshold:
        return "NOOP", f"similarity {best:.2f} ≥ noop threshold {noop_threshold:.2f}"
    if best >= update_threshold and new_len >= LONGER_BY * old_len:
        return "UPDATE", (f"similarity {best:.2f} ≥ update threshold {update_threshold:.2f} and "
                          f"the new text is {new_len / max(old_len, 1):.2f}× as long")
    if best >= update_threshold:
        return "ADD", (f"similarity {best:.2f} but the new text is not 20% longer; kept both")
    return "ADD", (f"most similar of the scope's {notes} {best:.2f} < update threshold "
                   f"{update_threshold:.2f}")


def held_to_words(action: Action, reason: str, text: str, old: Any) -> tuple[Action, str]:
    """A similarity's NOOP or UPDATE held to the words (``same_or_contained``: nothing dropped,
    no negation, number, name or quantity changed). A NOOP's text must say nothing ``old``
    lacks, an UPDATE's must say all ``old`` says; else both notes stay (ADD) for a dream's
    judge. Before, "flies business class …" was a NOOP on "flies economy class …" (0.87 alike):
    the changed value was dropped at the write. A NOOP whose text only adds to ``old`` is an
    UPDATE (nothing is lost either way, and the detail is kept)."""
    from worker.llm.rules import same_or_contained

    if action == "NOOP" and not same_or_contained(text, old.content):
        if same_or_contained(old.content, text):
            return "UPDATE", f"{reason}, and the new text adds to note {old.id}"
        return "ADD", (f"{reason}, but it says what note {old.id} does not (a changed value or "
                       "another fact); kept both for the dream to judge")
    if action == "UPDATE" and not same_or_contained(old.content, text):
        return "ADD", (f"{reason}, but it leaves out or changes what note {old.id} says; "
                       "kept both for the dream to judge")
    return action, reason


def words(normalised: str) -> set[str]:
    return set(normalised.split())




# ---- the service ----------------------------------------------------------------------------
def canonical_type(note_type: str | None) -> str:
    """The NoteType spelled as stored, from any case; Invalid for anything else."""
    canonical = _TYPES.get((note_type or "").lower())
    if canonical is None:
        raise Invalid(f"type must be one of {', '.join(t.value for t in NoteType)}")
    return canonical


def _validate(app: App, content: str, note_type: str) -> tuple[str, str]:
    text = (content or "").strip()
    # In words: "!!!" or "🙂" alone is refused (import and fuse keep it, as its own identity).
    if not any(c.isalnum() or c == "_" for c in unicodedata.normalize("NFKC", text)) \
            or is_blank(text):
        raise Invalid("content is empty (or only invisible characters, punctuation or symbols)")
    if problem := text_problem(text):  # NUL or a lone surrogate (MCP and Python callers too)
        raise Invalid(f"content {problem}")
    limit = app.settings.host.max_note_chars
    if len(text) > limit:
        raise Invalid(f"content has {len(text)} characters; the limit is {limit} "
                      "(DREAM_HOST__MAX_NOTE_CHARS)")
    return text, canonical_type(note_type)


def remember(
    app: App, scope: Scope, content: str, note_type: str = NoteType.CONTEXT.value,
    importance: float = 0.5, conversation_id: str | None = None, manual: bool = True,
) -> RememberResult:
    """Store a host's note unless the scope already knows it; see the module docstring.
    ``conversation_id``: the conversation it was said in, recorded as its source (what
    `dream erase --conversation` finds it by). ``manual``: a person's note, which no dream
    retires (R26); False for an agent's own note, which dreams maintain as any other."""
    if problem := scope_problem(scope):  # the API, MCP and the CLI check it; a Python host not
        raise Invalid(f"scope: {problem}")  # (a surrogate was a traceback, a NUL was stored)
    text, kind = _validate(app, content, note_type)
    if not 0.0 <= importance <= 1.0:
        raise Invalid("importance must be between 0 and 1")
    if conversation_id is not None and (problem := ident_problem(conversation_id)):
        raise Invalid(f"conversation id {problem}")
    for _ in range(2):
        result = _remember_once(app, scope, text, kind, importance,
                                _Said(conversation_id, manual))
        if result is not None:
            log.info("host.remembered", scope=scope.key, action=result.action, note_id=result.id)
            return result
    raise Conflict("the note to update changed twice while writing; retry the request")


@dataclass(frozen=True)
class _Said:
    """Who said a note and where: its conversation, and whether a person wrote it."""

    conversation_id: str | None
    manual: bool

    def stands_in(self, held_in: frozenset[str]) -> bool:
        """Whether a note said in the conversations ``held_in`` may stand in for this statement
        (a NOOP on it, or an UPDATE of it): ``domain.types.stands_in`` (a NOOP's log row then
        names this conversation: ``said_in``)."""
        return stands_in(held_in, self.conversation_id)


def _remember_once(
    app: App, scope: Scope, text: str, kind: str, importance: float, said: _Said
) -> RememberResult | None:
    settings = app.settings.remember
    normalised = normalise_text(text)
    h = content_hash(text)
    now = utcnow()
    key = id_key(app)
    with app.uow() as uow:
        same = sorted(uow.notes.with_hash(scope, h), key=lambda r: (r[1] != _ACTIVE, r[0]))
        # An expired note is archive's to take: a statement made again now is a note of its
        # own, never a NOOP on it (the next run archived it, and the fact just said with it).
        live = [r for r in same if r[1] in (_ACTIVE, NoteStatus.PENDING.value)
                and said.stands_in(r[2]) and (r[3] is None or r[3] > now)]
        if live:
            _used(uow, scope, live[0][0], now, said.conversation_id)
            return RememberResult("NOOP", live[0][0], "identical content already in the scope", 1.0)
        best_hash, best, old_len, vector = _most_similar(app, uow, scope, kind, normalised, text)
        best_id = (uow.notes.active_with_hash(scope, kind, best_hash)
                   if best_hash is not None else None)
        action, reason = decide(best, len(normalised), old_len, settings.noop_threshold,
                                settings.update_threshold, kind)
        action, reason, old = _matched(uow, action, reason, best_id, text, said, now)
        if action == "NOOP" and best_id is not None:  # its use written in this one transaction
            _used(uow, scope, best_id, now, said.conversation_id)
            return RememberResult("NOOP", best_id, reason, _round(best))
        held = holding_item(uow, scope, old[0].id) if old else None
        new_id, salt = _free_id(uow, key, scope, normalised, {r[0] for r in same}, h)
    if best_hash is not None and best_id is None:
        return None  # the best match was retired between the two reads: decide again
    if action == "UPDATE" and not old:
        return None  # retired meanwhile: decide again
    if old and (not old[0].retirable or held is not None):
        # A protected or immutable note is never superseded (R23), nor one an open review item
        # would change (it waits for the reviewer, as a run leaves it): both stay, an ADD.
        kept = (f"the similar note is {old[0].protection}" if not old[0].retirable else
                f"the similar note waits for open review item {held}")
        action, reason, old = "ADD", f"{reason}; {kept}, kept both", []
    note = _new_note(new_id, text, kind, importance, action, said, old)
    # ADD is a supersede of nothing: the same one write inserts the note (and its log row).
    change = supersede("remember", old, new_note=note, relation="updated",
                       reason="remember update", valid_to=now,
                       comment=f"superseded by a longer note {new_id}")
    undo_id = f"{REMEMBER_PREFIX}{uuid.uuid4()}" if old else None
    try:
        with open_write(WriteTarget(app=app, scope=scope, now=now, log_id=undo_id)) as w:
            (result,) = w.apply([change], vectors={new_id: vector} if vector is not None else {})
            if result.status != ItemStatus.APPLIED:
                raise WriteConflict("the note to update changed")
            if not salt_held(w.uow, key, scope, salt):  # an erasure in the scope meanwhile
                raise WriteConflict("the scope's id salt changed")
            if old:  # an item over the superseded note was stale already (else: an ADD)
                settle_stale(w.uow, scope, now, f"the host's remember {undo_id}", by="host",
                             naming=[old[0].id])
    except WriteConflict:
        return None
    except IntegrityError:
        return _concurrent_noop(app, scope, new_id, now, said.conversation_id)
    return RememberResult(action, new_id, reason, _round(best), old[0].id if old else None,
                          undo_id)


def _new_note(new_id: str, text: str, kind: str, importance: float, action: Action,
              said: _Said, old: list[Any]) -> NewNote:
    """The note an ADD or UPDATE writes, said as ``said`` (manual by default, R26); an UPDATE
    restates the note it supersedes, so it carries that note's conversations too, and stays
    manual when that note was (as a fusion with a manual source does)."""
    auto = not said.manual and all(n.is_auto_generated for n in old)
    return NewNote(id=new_id, content=text, type=kind, importance=importance,
                   consolidation_generation=0, is_auto_generated=auto,
                   reason=f"remember {action.lower()}", write_seq=next_write_seq(),
                   source_conversation_id=said.conversation_id,
                   lineage_conversation_ids=lineage_conversations(old))


def _free_id(uow: Any, key: str, scope: Scope, normalised: str, taken: set[str],
             text_hash: str) -> tuple[str, str]:
    """The first derived id no note of this text read before holds (the same text remembered
    and retired since: a counter suffix) nor a note of another text: one whose id was derived
    from a fold that dropped the symbols it holds ("C++" read as "C" before 0015). A note of
    this text that holds it now was written meanwhile: its insert collides, the write a NOOP.
    With the scope's salt it was derived under (``note_ids``), read after the notes of this
    text were: an erasure committed since deleted the salt with them."""
    salt = scope_salt(uow, key, scope)
    attempt = 0
    while True:
        candidate = derived_id(key, scope, normalised, attempt, salt=salt)
        if candidate not in taken:
            held = uow.notes.get_many([candidate])
            if not held or content_hash(held[0].content) == text_hash:
                return candidate, salt
        attempt += 1


def _concurrent_noop(app: App, scope: Scope, note_id: str, now: Any,
                     said_in: str | None) -> RememberResult:
    with app.uow() as uow:
        _used(uow, scope, note_id, now, said_in)
    return RememberResult("NOOP", note_id, "identical content written concurrently", 1.0)


def _matched(uow: Any, action: Action, reason: str, best_id: str | None,
             text: str, said: _Said, now: datetime) -> tuple[Action, str, list[Any]]:
    """``decide``'s answer held to the words of the note it matched (``held_to_words``), to
    its conversation (``_Said.stands_in``) and to its life (an expired note is archive's: the
    statement is a note of its own), and the note an UPDATE supersedes ([] otherwise)."""
    old = uow.notes.get_many([best_id]) if action != "ADD" and best_id else []
    if old and old[0].expired(now):
        return "ADD", (f"{reason}; but note {old[0].id} expired at "
                       f"{old[0].expires_at.isoformat()}: kept as a note of its own"), []
    held_in = conversations_of(old[0].source_conversation_id,
                               old[0].lineage_conversation_ids) if old else frozenset()
    if old and not said.stands_in(held_in):
        where = (f"conversation {said.conversation_id}" if said.conversation_id is not None
                 else "no conversation")
        return "ADD", (f"{reason}; but note {old[0].id} was said in conversation "
                       f"{', '.join(sorted(held_in))} and this in {where}: kept as this "
                       "statement's own note, so that erasing one leaves the other, for the "
                       "dream to merge"), []
    if old:
        action, reason = held_to_words(action, reason, text, old[0])
    return action, reason, old if action == "UPDATE" else []


def _used(uow: Any, scope: Scope, note_id: str, now: Any, said_in: str | None) -> None:
    """A NOOP's statement, committed; an open archive item that decided on the note: stale.
    The note's fact was stated again: it is dated now (logged, a new version, with the
    conversation ``said_in``), as the latest statement of its value. Before, it kept its first
    date, and a value stated in between read as newer to every later judge. Its text is the
    same: a keep-apart (a declined merge) that bound it binds its new version (``bind_again``;
    before, saying a note again ended the host's keep-apart and the next dream merged the notes).
    A statement is no
    read: the note's access count and last access are the host's reads alone (before, the count
    a NOOP added made archive read the scope as one whose host reports reads, and archive every
    old fact nobody had reported reading, current ones too)."""
    (note,) = uow.notes.get_many([note_id]) or (None,)
    if note is not None and note.status == _ACTIVE and (
            note.created_at is None or note.created_at < now):
        was = {note.id: note.version}
        if uow.notes.change(note, run_id=None, reason="remember: stated again", now=now,
                            said_in=said_in, created_at=now, write_seq=next_write_seq()):
            bind_again(uow, was, {}, now)  # said again is no change: a keep-apart still holds
    settle_stale(uow, scope, now, f"the host's remember used note {note_id}", by="host",
                 naming=[note_id])
    uow.commit()


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


def _most_similar(
    app: App, uow: Any, scope: Scope, kind: str, normalised: str, text: str,
) -> tuple[str | None, float | None, int, np.ndarray | None]:
    """Best (content hash, similarity, its normalised length) among the scope's active notes of
    ``kind``, plus the new text's vector when the measure is cosine. One read of the active
    hashes; contents not seen before load in one bulk query; one vectorised comparison."""
    cosine = app.settings.remember.measure == "cosine"
    embedder = app.embedder
    vector = embedder.embed([text])[0] if cosine else None
    active = hash_words(uow.notes.active_hashes(scope, kind))
    if len(active) == 0:
        return None, None, 0, vector
    cache = cache_of(app)
    key = (scope.key, kind, app.settings.remember.measure)
    with cache.lock:
        feats = cache.features(key, embedder.dimensions if cosine else 0, len(active))
        rows = feats.rows(active)
    unknown = rows < 0
    if unknown.any():
        missing = sorted({hex_words(w) for w in active[unknown]})
        loaded = uow.notes.contents_by_hash(scope, missing)
        vecs: list[Any] = [None] * len(loaded)
        if cosine:
            vecs = [row[2] if row[2] is not None and row[3] == embedder.model_name else None
                    for row in loaded]
            need = [i for i, v in enumerate(vecs) if v is None]
            if need:
                fresh = embedder.embed([loaded[i][1] for i in need])
                for k, i in enumerate(need):
                    vecs[i] = fresh[k]
        with cache.lock:
            known = feats.rows(hash_words("".join(h for h, *_ in loaded)))
            for (h, content, _, _), vec, row in zip(loaded, vecs, known, strict=True):
                if row < 0:
                    norm = normalise_text(content)
                    feats.add(h, norm, cache.token_ids(words(norm)), vec)
            rows[unknown] = feats.rows(active[unknown])
    rows = rows[rows >= 0]
    if len(rows) == 0:
        return None, None, 0, vector
    with cache.lock:
        if cosine:
            assert feats.vectors is not None and vector is not None
            sims_all = feats.vectors.view @ vector.astype(np.float32)
        else:
            new_ids = cache.token_ids(words(normalised))
            hit = np.isin(feats.tok_flat.view, new_ids)
            inter = np.bincount(feats.tok_owner.view[hit], minlength=feats.n)
            union = feats.sizes.view + len(new_ids) - inter
            sims_all = inter / np.maximum(union, 1)
        sims = sims_all[rows]
        k = int(np.argmax(sims))  # first maximum
        best_row = int(rows[k])
        return (hex_words(feats.hashes.view[best_row]), float(sims[k]),
                int(feats.lengths.view[best_row]), vector)
