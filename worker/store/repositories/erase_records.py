"""What erasure does to the records of a scope besides its notes: the audit trail, verdict
memory, reviews and review items, other notes' comments, flags and metadata, runs and steps that
name or quote an erased note (``scrub_scope``), and the scopes a user's erasure empties
(``forget_user_scopes``). The SQL behind ``SafetyRepository.erase_notes``."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session

from worker.domain.types import (
    CONTRADICTION_REVIEW_FLAG,
    CONTRADICTION_REVIEW_KIND,
    ERASED_USER,
    Scope,
    fingerprint_versions,
)
from worker.store.chunks import chunked
from worker.store.models import (
    DreamRunRow,
    ExampleRow,
    JudgementRow,
    NoteLineageRow,
    NoteRow,
    OperationLogRow,
    ReviewItemRow,
    ReviewRow,
    RunStepRow,
    SessionRow,
)
from worker.store.repositories.mentions import Mentions
from worker.store.repositories.retention import append_comment

# worker.phases.kit.snapshot.APART_KINDS (the store imports no phase): "never retire one of these
# notes in favour of another", a host's keep-apart or a declined review.
_APART_KINDS = ("keep_apart", "declined_apart")
UNFLAGGED_COMMENT = ("[Erasure: the note this was flagged against was erased; review flag "
                     "removed]")


def _bump(counts: dict[str, int], key: str, by: int = 1) -> None:
    counts[key] = counts.get(key, 0) + by


def scrub_scope(session: Session, key: str, ids: set[str], erased: Mentions,
                counts: dict[str, int]) -> None:
    """Every record of scope ``key`` that names an erased note (``ids``) or quotes its text."""
    _scrub_log(session, key, erased, counts)
    _scrub_reviews(session, key, ids, erased, counts)
    _scrub_notes(session, key, ids, erased, counts)
    _scrub_runs(session, key, erased, counts)


def _scrub_log(session: Session, key: str, erased: Mentions, counts: dict[str, int]) -> None:
    mentions = erased.mentions
    for row in session.scalars(select(OperationLogRow).where(OperationLogRow.scope_key == key)):
        if mentions(row.before) or mentions(row.after) or mentions(row.reason):
            # Field by field: a survivor's image keeps its status and version (what undo of
            # that run restores and checks); only what names or quotes the note goes.
            row.before, row.after = erased.scrub(row.before), erased.scrub(row.after)
            row.reason = erased.scrub(row.reason)
            _bump(counts, "operation_log_scrubbed")


def _scrub_reviews(session: Session, key: str, ids: set[str], erased: Mentions,
                   counts: dict[str, int]) -> None:
    """Judgements, reviews and review items naming or quoting an erased note go; a note kept
    whose contradiction review went with them loses the flag that review stood behind."""
    mentions = erased.mentions
    rests: list[JudgementRow] = []
    for j in session.scalars(select(JudgementRow).where(JudgementRow.scope_key == key)):
        if set(j.note_ids or []) & ids or mentions(j.reason):
            rest = None if mentions(j.reason) else _apart_rest(session, j, ids)
            rests += [rest] if rest is not None else []
            session.delete(j)
            _bump(counts, "judgements")
    session.flush()  # the deletes first: a rest may take the fingerprint of a row deleted here
    for rest in rests:
        if session.scalar(select(JudgementRow.id).where(
                JudgementRow.scope_key == rest.scope_key, JudgementRow.kind == rest.kind,
                JudgementRow.fingerprint == rest.fingerprint)) is None:
            session.add(rest)
    unreasoned: set[str] = set()  # flagged by a contradiction review that goes
    still: set[str] = set()  # named by a contradiction review that stays
    for rv in session.scalars(select(ReviewRow).where(ReviewRow.scope_key == key)):
        named = set(rv.note_ids or [])
        if named & ids or mentions(rv.reason):
            session.delete(rv)
            _bump(counts, "reviews")
            if rv.kind == CONTRADICTION_REVIEW_KIND:
                unreasoned |= named - ids
        elif rv.kind == CONTRADICTION_REVIEW_KIND:
            still |= named
    _unflag(session, unreasoned - still, counts)
    # A proposed change holds the fused text and the notes' ids: open, it could only go
    # stale; decided, it is the record of a decision about erased text. Either way it goes.
    for item in session.scalars(select(ReviewItemRow).where(ReviewItemRow.scope_key == key)):
        named = set(item.versions or {}) | set(item.source_ids or [])
        if named & ids or any(mentions(v) for v in (item.content, item.reason, item.payload,
                                                     item.outcome)):
            session.delete(item)
            _bump(counts, "review_items")


def _apart_rest(session: Session, j: JudgementRow, ids: set[str]) -> JudgementRow | None:
    """A keep-apart (a host's, a declined review's) over three notes or more, one of them
    erased, still says the others are not the same: they keep it, at the versions it bound
    (it named them all at their versions then), so erasure takes nothing else (R28)."""
    rest = sorted(set(j.note_ids or []) - ids)
    if j.kind not in _APART_KINDS or len(rest) < 2:
        return None
    versions = {r.id: r.version for r in session.execute(
        select(NoteRow.id, NoteRow.version).where(NoteRow.id.in_(j.note_ids)))}
    if len(versions) != len(j.note_ids) or \
            fingerprint_versions(list(versions.items())) != j.fingerprint:
        return None  # it no longer bound: a note changed since
    return JudgementRow(scope_key=j.scope_key, kind=j.kind, note_ids=rest, verdict=j.verdict,
                        fingerprint=fingerprint_versions([(i, versions[i]) for i in rest]),
                        reason=j.reason, run_id=j.run_id, created_at=j.created_at)


def _unflag(session: Session, note_ids: Iterable[str], counts: dict[str, int]) -> None:
    """The contradiction flag off these notes (its review is gone: nothing is left to review),
    with a comment saying why; like the flag itself an annotation, so the version stays."""
    for note in (n for chunk in chunked(sorted(set(note_ids)))
                 for n in session.scalars(select(NoteRow).where(NoteRow.id.in_(chunk)))):
        if CONTRADICTION_REVIEW_FLAG in (note.flags or []):
            note.flags = [f for f in note.flags or [] if f != CONTRADICTION_REVIEW_FLAG]
            note.comments = append_comment(note.comments, UNFLAGGED_COMMENT)
            _bump(counts, "flags_removed")


def _scrub_notes(session: Session, key: str, ids: set[str], erased: Mentions,
                 counts: dict[str, int]) -> None:
    """Other notes' comments and metadata. A comment line naming an erased note loses what
    follows the name (``Mentions.unsay``): a judge's reason about the pair it was in."""
    mentions, unsay = erased.mentions, erased.unsay
    for note in session.scalars(select(NoteRow).where(
            NoteRow.scope_key == key,
            or_(NoteRow.comments.is_not(None), NoteRow.meta.is_not(None)))):
        if note.id in ids:
            continue
        if mentions(note.comments):
            comments = unsay(note.comments or "")
            note.comments = "[erased]" if mentions(comments) else comments
            _bump(counts, "comments_scrubbed")
        if mentions(note.meta):  # a host's metadata quoting or naming an erased note
            note.meta = {"erased": True}
            _bump(counts, "metadata_scrubbed")


def _scrub_runs(session: Session, key: str, erased: Mentions, counts: dict[str, int]) -> None:
    mentions, unname = erased.mentions, erased.unname
    for run in session.scalars(select(DreamRunRow).where(
            DreamRunRow.scope_key == key,
            or_(DreamRunRow.error.is_not(None), DreamRunRow.totals.is_not(None),
                DreamRunRow.status_reason.is_not(None)))):
        if mentions(run.error) or mentions(run.totals) or mentions(run.status_reason):
            run.error = None if run.error is None else "erased"
            run.totals = None if run.totals is None else {"erased": True}
            if run.status_reason is not None:  # ids and counts: keep the counts
                reason = unname(run.status_reason)
                run.status_reason = "erased" if mentions(reason) else reason
            _bump(counts, "runs_scrubbed")
    for st in session.scalars(select(RunStepRow).where(RunStepRow.scope_key == key)):
        if mentions(st.input) or mentions(st.output) or mentions(st.error):
            st.input = {"erased": True}
            st.output = {"erased": True}
            st.error = None if st.error is None else "erased"
            _bump(counts, "run_steps_scrubbed")


def erased_user_key(key: str) -> str:
    """Scope ``key`` with its user replaced by ``ERASED_USER``."""
    scope = Scope.from_key(key)
    return Scope(scope.agent_id, ERASED_USER, scope.company_id).key


def forget_user_scopes(session: Session, user_id: str, note_keys: Iterable[str]) -> dict[str, int]:
    """After a user's notes are erased: nothing in the user's scopes names the user any more.

    What existed only for those scopes goes: their operation log (it logged the user's notes and
    examples, all gone), verdict memory, reviews, review items and lineage, the user's examples
    and sessions. The runs and their steps stay as the record of what ran when and what it
    spent (the counts ``/metrics`` and the dashboard add up), under the scope with the user
    replaced by ``ERASED_USER``; the erase cancelled the user's unfinished runs first, so no two
    runs of one placeholder scope are ever active together."""
    keys = {k for k in note_keys if Scope.from_key(k).user_id == user_id}
    for owned in (DreamRunRow, ExampleRow, SessionRow):
        keys.update(session.scalars(select(owned.scope_key).where(owned.user_id == user_id)
                                    .distinct()))
    counts: dict[str, int] = {}
    ordered = sorted(keys)
    for name, table in (("operation_log", OperationLogRow), ("judgements", JudgementRow),
                        ("reviews", ReviewRow), ("review_items", ReviewItemRow),
                        ("lineage", NoteLineageRow)):
        _bump(counts, name, _deleted(session, table, ordered))
    counts["examples"] = int(session.execute(
        delete(ExampleRow).where(ExampleRow.user_id == user_id)).rowcount)  # type: ignore[attr-defined]
    counts["sessions"] = int(session.execute(
        delete(SessionRow).where(SessionRow.user_id == user_id)).rowcount)  # type: ignore[attr-defined]
    for key in ordered:
        placeholder = erased_user_key(key)
        _relabel(session, key, placeholder, counts)
        _bump(counts, "runs_kept_as_erased", int(session.execute(
            update(DreamRunRow).where(DreamRunRow.scope_key == key)
            .values(scope_key=placeholder, user_id=ERASED_USER)).rowcount))  # type: ignore[attr-defined]
        session.execute(update(RunStepRow).where(RunStepRow.scope_key == key)
                        .values(scope_key=placeholder))
    return counts


def _relabel(session: Session, key: str, placeholder: str, counts: dict[str, int]) -> None:
    """The text of the runs and steps of scope ``key`` that names it says ``placeholder``
    instead: who undid or cancelled a run is recorded by the caller's label (``api:<scope
    key>``, ``mcp:<scope key>``), which names the user; a step quotes it as the run's reason."""
    said = {key: placeholder, json.dumps(key)[1:-1]: json.dumps(placeholder)[1:-1]}

    def swap(value: Any) -> Any:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if value is None or not any(old in text for old in said):
            return value
        for old, new in said.items():
            text = text.replace(old, new)
        return text if isinstance(value, str) else json.loads(text)

    relabelled = 0
    for run in session.scalars(select(DreamRunRow).where(DreamRunRow.scope_key == key)):
        fields = {"status_reason": run.status_reason, "error": run.error, "totals": run.totals}
        relabelled += _assign(run, {f: swap(v) for f, v in fields.items()}, fields)
    for st in session.scalars(select(RunStepRow).where(RunStepRow.scope_key == key)):
        fields = {"input": st.input, "output": st.output, "error": st.error}
        relabelled += _assign(st, {f: swap(v) for f, v in fields.items()}, fields)
    if relabelled:
        _bump(counts, "run_records_relabelled", relabelled)


def _assign(row: Any, values: dict[str, Any], before: dict[str, Any]) -> int:
    """Set the fields that changed (an untouched row stays clean); 1 if any did."""
    changed = {f: v for f, v in values.items() if v is not before[f]}
    for name, value in changed.items():
        setattr(row, name, value)
    return int(bool(changed))


def _deleted(session: Session, table: Any, keys: list[str]) -> int:
    deleted = 0
    for chunk in chunked(sorted(keys)):  # a statement per chunk of the user's scopes
        result: Any = session.execute(delete(table).where(table.scope_key.in_(chunk)))
        deleted += int(result.rowcount)
    return deleted
