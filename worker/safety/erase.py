"""Erasure (R19, R28): the only path that hard-deletes notes (R18).

Removes the subject's notes and every note whose text was written from them (lineage edges
``consolidated``, ``fused``, ``updated``; transitively), with their embeddings, lineage rows,
operation-log rows and any log, judgement, review or step record that names them or quotes their
text — in one transaction. What was retired only because an erased note stood for it is not
erased with it (R28): see ``plan_survivors``. On SQLite the write-ahead log is checkpointed
afterwards so the erased text leaves the files too.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import structlog
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from worker.app import App
from worker.clock import utcnow
from worker.domain.limits import stored_ident_problem
from worker.domain.types import NoteStatus
from worker.errors import Conflict, InvalidInput, NotFound
from worker.phases.kit.kept_apart import bind_again
from worker.phases.kit.rows import Edits, restored_fields
from worker.safety.erase_dates import DatedBack, date_back
from worker.safety.erase_expiry import give_lives_back
from worker.store.db import SQLITE_BUSY_SECONDS
from worker.store.repositories.keys import NOTE_IDS
from worker.store.repositories.retention import append_comment
from worker.store.repositories.safety import Survivor
from worker.store.scope_locks import lock_scopes
from worker.store.uow import UnitOfWork

if TYPE_CHECKING:
    from worker.runs.batches import RunBatchRelease

log = structlog.get_logger(__name__)

# A parent retired because this child stood for it (fused into it, replaced by the host's longer
# version, or judged a duplicate of / contained in it) has its own provenance: when the child is
# erased, the parent's fact would otherwise be lost although nobody asked to erase it.
RESTORE_RELATIONS = frozenset({"consolidated", "fused", "updated", "duplicate", "subsumed"})
# A parent the judge found *outdated* by the child (a conflict): making it active again would
# assert a fact the store knows was replaced; keeping it silently retired would lose it. It stays
# revoked, and a review record asks the host whether it holds again.
REVIEW_RELATIONS = frozenset({"superseded"})

RESTORED_COMMENT = "[Erasure: the note this was merged into was erased; active again]"
HELD_COMMENT = ("[Erasure: the newer note that superseded this one was erased; kept retired "
                "for review]")
HELD_RETIRED_COMMENT = ("[Erasure: the note this was merged into was erased, and it had been "
                        "retired itself; kept retired for review]")
REVIEW_KIND = "erased_successor"
DEADLOCK_ATTEMPTS = 3


@dataclass
class EraseResult:
    subject: str
    note_ids: list[str] = field(default_factory=list)
    derived_ids: list[str] = field(default_factory=list)  # erased because derived from the subject
    restored_ids: list[str] = field(default_factory=list)  # co-sources made active again
    held_ids: list[str] = field(default_factory=list)  # superseded by an erased note: for review
    # Kept notes dated at an erased note's later statement of their fact: dated back (erase_dates).
    redated_ids: list[str] = field(default_factory=list)
    # Operation-log id of the restorations and datings back (`dream undo` takes it).
    erase_id: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    checkpoint: str | None = None  # SQLite only: "done" or why the WAL still holds pages
    # Runs that were reading a scope of the subject: interrupted, resumed by the gate check.
    interrupted_runs: list[str] = field(default_factory=list)
    # A user's erasure empties the user's scopes: their unfinished runs are cancelled instead.
    cancelled_runs: list[str] = field(default_factory=list)
    # What became of those runs' provider batches (cancelled, files deleted, or what is left).
    batches: list[RunBatchRelease] = field(default_factory=list)
    # Kept notes that lived as long as an erased note retired into them: their own expiry again.
    lived_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SurvivorPlan:
    restore: list[Survivor]
    review: list[Survivor]


def plan_survivors(survivors: Iterable[Survivor], erased: set[str],
                   fates: Mapping[str, tuple[str, str | None]] | None = None) -> SurvivorPlan:
    """Which notes outside the erased set come back, and which are held for review.

    Only a note that is revoked *into* an erased note (its pointer names it) is touched: a note
    since revived, archived or retired into something else keeps its state. ``fates``: each
    erased note's (status, consolidated_into_id) before the erase (absent: active).
    """
    restore: list[Survivor] = []
    review: list[Survivor] = []
    for s in sorted(survivors, key=lambda s: s.id):
        if s.id in erased or s.status != NoteStatus.REVOKED.value:
            continue
        if s.consolidated_into_id not in erased:
            continue
        relation = s.relation or "consolidated"  # a pointer with no edge: an older fused note
        if relation in REVIEW_RELATIONS:
            review.append(s)
        elif relation in RESTORE_RELATIONS:
            # Stood for by a note that had been retired itself (superseded by a note that is
            # kept, archived): its fact was no longer current either, so it is not made active.
            live = _ends_live(s.consolidated_into_id, erased, fates or {})
            (restore if live else review).append(s)
    return SurvivorPlan(restore, review)


def _ends_live(note_id: str | None, erased: set[str],
               fates: Mapping[str, tuple[str, str | None]]) -> bool:
    """Whether the erased note, followed through the erased notes it was merged into (a fusion
    fused again), was active (or pending) when the erase began."""
    seen: set[str] = set()
    while note_id is not None and note_id not in seen:
        seen.add(note_id)
        status, into = fates.get(note_id, (NoteStatus.ACTIVE.value, None))
        if status != NoteStatus.REVOKED.value or into not in erased:
            return status in (NoteStatus.ACTIVE.value, NoteStatus.PENDING.value)
        note_id = into
    return False


def erase(
    app: App, *, user_id: str | None = None, conversation_id: str | None = None,
    note_id: str | None = None,
) -> EraseResult:
    given = [v for v in (user_id, conversation_id, note_id) if v is not None]
    if len(given) != 1:
        raise InvalidInput("give exactly one of --user, --conversation or --note")
    for name, value in (("user id", user_id), ("conversation id", conversation_id),
                        ("note id", note_id)):  # any id as stored: one from before the rules
        if value is not None and (problem := stored_ident_problem(value)):
            raise InvalidInput(f"{name} {problem}")  # (a surrogate was the driver's traceback)
    subject = (f"user {user_id}" if user_id is not None else
               f"conversation {conversation_id}" if conversation_id is not None else
               f"note {note_id}")
    for attempt in range(DEADLOCK_ATTEMPTS):
        try:
            result = _erase_once(app, subject, user_id=user_id,
                                 conversation_id=conversation_id, note_id=note_id)
            break
        except OperationalError as exc:
            # The erasure takes its scopes' locks first, as a phase's write and an undo do, so
            # none of them waits for notes another holds. Left for what no scope lock orders:
            # a note of the subject recorded in a new scope after the erase read its scopes.
            if getattr(exc.orig, "sqlstate", None) != "40P01" \
                    or attempt == DEADLOCK_ATTEMPTS - 1:
                raise
            log.info("erase.deadlock_retried", attempt=attempt + 1)
    result.checkpoint = checkpoint_sqlite(app)
    # Remember's feature cache holds what it read of the scopes (content hashes, vectors, the
    # words of every text): this process forgets all of it, and reads it again on its next write.
    app.remember_cache = None
    # The runs it stopped read the erased text: a provider batch of theirs quotes it, in the
    # provider's files (and a cancelled run's batch bills on). Released: cancelled, deleted.
    from worker.runs.batches import release_run_batches

    result.batches = release_run_batches(app, result.interrupted_runs + result.cancelled_runs)
    log.info("erase.finished", subject_kind=subject.split()[0],
             notes=result.counts.get("notes", 0), derived=len(result.derived_ids),
             restored=len(result.restored_ids), held=len(result.held_ids),
             redated=len(result.redated_ids),
             interrupted=len(result.interrupted_runs), checkpoint=result.checkpoint)
    return result


def _erase_once(app: App, subject: str, *, user_id: str | None, conversation_id: str | None,
                note_id: str | None) -> EraseResult:
    """The erase in one transaction (what ``erase`` tries again after a deadlock)."""
    now = utcnow()
    erase_id = f"erase-{uuid.uuid4()}"
    with app.uow() as uow:
        seed, stopped = _hold_subject(uow, now, user_id=user_id,
                                      conversation_id=conversation_id, note_id=note_id)
        if note_id is not None and not seed:
            raise NotFound(f"no note with id {note_id}; find ids with `dream notes export`")
        # What prune archives for a gone conversation goes with it: a note that records it among
        # its sources' (``lineage_conversation_ids``), even with no lineage edge to follow.
        recorded = (uow.safety.recording_conversation(conversation_id)
                    if conversation_id is not None else set())
        ids = uow.safety.derived_closure(seed | recorded)
        found = uow.safety.contents(ids)
        plan = plan_survivors(uow.safety.retired_into(set(found)), set(found),
                              {i: (n.status, n.consolidated_into_id) for i, n in found.items()})
        texts = sorted({n.content for n in found.values()})
        scope_keys = {n.scope_key for n in found.values()}
        counts = uow.safety.erase_notes(set(found), texts, scope_keys)
        _apply_survivors(uow, plan, erase_id, subject, now)
        # A later statement made in the conversation that no note records (a host's remember,
        # an import's line said again) goes with it too: its date, and its name in the log.
        again = uow.safety.said_in(conversation_id) if conversation_id is not None else []
        gone = {n.said for n in found.values()} | {s.said for s in again}
        # A user's erasure empties the user's scopes: no note is left there to date back.
        back = DatedBack() if user_id is not None else date_back(
            uow, gone, scope_keys | {s.scope_key for s in again}, erase_id, subject, now)
        uow.safety.forget_said_in(again)
        # The life an erased note gave the note it was retired into goes with it too.
        into = {i for n in found.values() if (i := n.consolidated_into_id)} - set(found)
        lived = {} if user_id is not None else give_lives_back(uow, into, erase_id, subject,
                                                               now)
        _keep_apart(uow, plan, {**lived, **back.was}, now)
        if again:
            counts["operation_log_scrubbed"] = counts.get("operation_log_scrubbed", 0) + len(again)
        _hold_for_review(uow, back.reopened, "the note that superseded these was dated at an "
                         "erased statement of its fact and is older than them now; reinstate "
                         "any that still hold", erase_id, now)
        if user_id is not None:
            for name, n in uow.safety.forget_user(user_id, scope_keys).items():
                counts[name] = counts.get(name, 0) + n
        # Remember's ids in these scopes derive from new salts: the same text remembered
        # again gets an id unrelated to the one this erasure names (no oracle on its text).
        if scope_keys or user_id is not None:
            uow.keys.forget_salts(uow.keys.get(NOTE_IDS), scope_keys, user_id)
        uow.commit()
    return EraseResult(subject, sorted(seed), sorted(set(found) - seed),
                       [s.id for s in plan.restore],
                       sorted({s.id for s in plan.review}.union(*back.reopened.values())),
                       back.ids, erase_id if plan.restore or plan.review or back.ids or lived
                       else None, counts, lived_ids=sorted(lived),
                       interrupted_runs=[] if user_id is not None else stopped,
                       cancelled_runs=stopped if user_id is not None else [])


def _hold_subject(uow: UnitOfWork, now: datetime,
                  **subject: str | None) -> tuple[set[str], list[str]]:
    """The subject's note ids, locked, and the runs of their scopes stopped, before the erase
    reads anything derived from them: interrupted (to be resumed from a fresh read), or for a
    user cancelled (the erase empties the user's scopes). The order is the one a run's write
    takes its locks in (notes, then the run row) on PostgreSQL, so the two cannot deadlock; on
    SQLite the stopping UPDATE comes first: it takes the write lock, and every read after it
    is current."""
    def stop() -> list[str]:
        user = subject.get("user_id")
        if user is None:  # to be resumed: its open steps end now, with why (not at the resume)
            runs = uow.safety.interrupt_runs(**subject, now=now)
            uow.runs.interrupt_steps(runs, "an erasure in its scope interrupted the run; it "
                                     "resumes from a fresh read", now)
            return runs
        runs = uow.safety.cancel_user_runs(user, now)
        uow.runs.stop_steps(runs, "the run was cancelled: its user was erased", now)
        return runs

    if uow.session.get_bind().dialect.name == "postgresql":
        # The scopes' locks first, as a phase's write and an undo take them: either waits for
        # the erase whole (or it for them) before anyone holds notes the other wants.
        lock_scopes(uow.session, uow.safety.subject_scopes(**subject))
        seed = uow.safety.subject_note_ids(**subject)
        return seed, stop()
    stopped = stop()
    return uow.safety.subject_note_ids(**subject), stopped


def _apply_survivors(uow: UnitOfWork, plan: SurvivorPlan, erase_id: str, subject: str,
                     now: datetime) -> None:
    """Restore / hold in the erase transaction, logged under ``erase_id`` so undo can revert it.

    The phase kit's write path: one locked re-read, one executemany UPDATE guarded by version
    per set of columns, one executemany into the operation log and one into reviews."""
    everyone = plan.restore + plan.review
    if not everyone:
        return
    # Re-read after erase_notes: it cleared the pointers and scrubbed comments naming erased ids.
    state = uow.writes.lock_state(s.id for s in everyone)
    reason = f"erase of {subject.split()[0]}: a note it stood for was erased"
    restoring = {s.id for s in plan.restore}
    edits = Edits(state, erase_id, now)
    for s in everyone:
        if s.id not in state:
            raise Conflict(f"note {s.id} changed during the erase; nothing was erased, run it "
                           "again")
        restore = s.id in restoring
        values = {**(restored_fields(s.before) if restore else {}), "consolidated_into_id": None,
                  "comments": append_comment(state[s.id]["comments"],
                                             _comment(s, restore))}
        if s.relation in REVIEW_RELATIONS:  # ended at the erased note's date: no known time now
            values["valid_to"] = None
        edits.set(s.scope_key, s.id, values, reason)
    # The host wrote to one meanwhile: roll everything back rather than half-apply.
    edits.write(uow.writes, "a note changed during the erase; nothing was erased, run it again")
    by_scope: dict[str, list[str]] = {}
    for s in plan.review:
        by_scope.setdefault(s.scope_key, []).append(s.id)
    _hold_for_review(uow, by_scope, "the note that superseded these, or that they were merged "
                     "into after it was retired itself, was erased; reinstate any that still "
                     "hold", erase_id, now)


def _keep_apart(uow: UnitOfWork, plan: SurvivorPlan, was: dict[str, int],
                now: datetime) -> None:
    """A keep-apart that bound a note the erase gave back (at its version before it was
    retired), dated back or gave its own expiry back (``was``: at its version before) binds it
    again at its new version: the erase leaves the other conversations' decisions as if the
    erased one had never been said."""
    before = {**was, **{s.id: int(s.before["version"]) for s in plan.restore
                        if isinstance(s.before.get("version"), int)}}
    if before:
        bind_again(uow, before, {}, now)


def _hold_for_review(uow: UnitOfWork, by_scope: dict[str, list[str]], reason: str,
                     erase_id: str, now: datetime) -> None:
    """One review per scope naming the notes kept retired; undoing the erase removes it with
    the restorations (same run id)."""
    uow.writes.add_reviews([
        {"scope_key": key, "kind": REVIEW_KIND, "note_ids": sorted(ids), "reason": reason,
         "run_id": erase_id, "created_at": now}
        for key, ids in sorted(by_scope.items())])


def _comment(s: Survivor, restored: bool) -> str:
    if restored:
        return RESTORED_COMMENT
    return HELD_COMMENT if (s.relation or "") in REVIEW_RELATIONS else HELD_RETIRED_COMMENT


def checkpoint_sqlite(app: App) -> str | None:
    """Fold the WAL into the main file and truncate it, so erased pages leave the disk (R28).

    Another connection reading an older snapshot keeps the WAL from being fully checkpointed;
    the result says so instead of pretending. None on PostgreSQL (see README "Safety").
    """
    if app.engine.dialect.name != "sqlite":
        return None
    with app.engine.connect() as conn:
        # A reader with an open snapshot would make TRUNCATE wait the whole busy timeout.
        conn.execute(text("PRAGMA busy_timeout=2000"))
        try:
            busy, frames, moved = conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)")).one()
        finally:
            conn.execute(text(f"PRAGMA busy_timeout={SQLITE_BUSY_SECONDS * 1000}"))
    if frames < 0:
        return "done"  # not in WAL mode: the pages were written to the main file directly
    if busy or moved < frames:
        return (f"blocked: another connection holds the database open, so {frames - moved} "
                "write-ahead-log frame(s) may still hold erased text; close it and run the same "
                "`dream erase` again (it finds nothing more to erase and checkpoints)")
    return "done"
