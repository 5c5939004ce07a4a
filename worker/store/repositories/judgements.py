"""All SQL touching verdict memory and review records."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, exists, insert, literal_column, select
from sqlalchemy.orm import Session

from worker.domain.types import RunStatus, Scope
from worker.store.chunks import chunked
from worker.store.models import DreamRunRow, JudgementRow, ReviewRow
from worker.store.repositories.writes import NEW_JUDGEMENTS, UNSETTLED
from worker.store.row_locks import is_postgres
from worker.store.scope_locks import LOCK_KEY, lock_term

_J = cast(Table, JudgementRow.__table__)
_KNOWN = select(_J.c.fingerprint, _J.c.verdict).where(
    _J.c.scope_key == bindparam("scope_key"), _J.c.kind == bindparam("kind"),
    _J.c.fingerprint.in_(bindparam("fps", expanding=True)))
_OF_KINDS = select(_J.c.kind, _J.c.fingerprint, _J.c.note_ids, _J.c.verdict, _J.c.reason).where(
    _J.c.scope_key == bindparam("scope_key"), _J.c.kind.in_(bindparam("kinds", expanding=True)),
).order_by(_J.c.id)
_MEMORY = _OF_KINDS.add_columns(_J.c.created_at, _J.c.id, _J.c.run_id)
# A retirement a phase decided but the blast-radius guard (R20) held back for a later run.
PENDING_RETIREMENT = "retire_pending"
# The kinds a run records of its own (a judge's answers, a retirement held back, a question or
# a pair cooling off): what ``forget`` may delete once no run can read it again. Never a
# person's decision: a host's keep_apart or fuse, a reviewer's declined_apart or
# review_declined (nor the cluster and pair rows a decline records, which carry no run).
RUN_KINDS = ("cluster", "pair", PENDING_RETIREMENT, "unanswered", UNSETTLED)
_RUNS = cast(Table, DreamRunRow.__table__)
__all__ = ["PENDING_RETIREMENT", "RUN_KINDS", "UNSETTLED", "JudgementRepository"]


class JudgementRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def _first_wins(self, row: dict[str, Any]) -> None:
        """One verdict row, unless its fingerprint is recorded already: in the statement
        itself, so two hosts recording the same keep-apart at once both succeed (a look, then
        an insert, let the second fail on the unique fingerprint)."""
        self._run(NEW_JUDGEMENTS[self.session.get_bind().dialect.name == "postgresql"], [row])

    def _run(self, stmt: Any, params: Any = None) -> Any:
        """Core execution on the session's connection (same transaction): skips the ORM
        session's per-statement work, ≈0.25 ms a statement, ~20% of a dream run's CPU."""
        return self.session.connection().execute(stmt, params)

    def known(self, scope: Scope, kind: str, fingerprints: Iterable[str]) -> dict[str, str]:
        """Fingerprint → verdict for those already judged in this scope."""
        fps = list(set(fingerprints))
        out: dict[str, str] = {}
        for chunk in chunked(fps):
            rows = self._run(_KNOWN, {"scope_key": scope.key, "kind": kind, "fps": chunk}).all()
            out.update({r.fingerprint: r.verdict for r in rows})
        return out

    def memory_rows(self, scope: Scope, kinds: Iterable[str]) -> list[Any]:
        """``of_kinds`` with each row's ``created_at``, ``id`` and ``run_id`` last (one SELECT):
        a phase's verdict memory, whose remembered unanswered questions cool off from their
        date, and whose dead rows the run deletes by id (``forget``)."""
        return list(self._run(_MEMORY, {"scope_key": scope.key, "kinds": list(kinds)}).all())

    def of_kinds(self, scope: Scope, kinds: Iterable[str]) -> list[Any]:
        """Every verdict-memory row of these kinds in the scope, oldest first (one SELECT):
        kind, fingerprint, note_ids, verdict, reason."""
        return list(self._run(_OF_KINDS, {"scope_key": scope.key, "kinds": list(kinds)}).all())

    def judged_pairs(self, scope: Scope, kind: str = "pair") -> set[tuple[str, str]]:
        """Id pairs with a verdict at any version (fair selection puts them after new pairs)."""
        rows = self._run(
            select(JudgementRow.note_ids).where(
                JudgementRow.scope_key == scope.key, JudgementRow.kind == kind
            )
        ).all()
        out: set[tuple[str, str]] = set()
        for (ids,) in rows:
            if ids and len(ids) == 2:
                a, b = sorted(ids)
                out.add((a, b))
        return out

    def record(
        self, scope: Scope, kind: str, fingerprint: str, note_ids: list[str], verdict: str,
        reason: str | None, run_id: str | None, now: datetime,
    ) -> None:
        """A verdict, unless one is recorded for the fingerprint already (first writer wins)."""
        self._first_wins({"scope_key": scope.key, "kind": kind, "fingerprint": fingerprint,
                          "note_ids": sorted(note_ids), "verdict": verdict, "reason": reason,
                          "run_id": run_id, "created_at": now})

    def of_kind_since(self, scope: Scope, kind: str, fingerprints: Iterable[str],
                      after: datetime) -> dict[str, tuple[str, datetime]]:
        """Fingerprint → (verdict, when recorded), for those recorded at or after ``after``."""
        fps = list(set(fingerprints))
        out: dict[str, tuple[str, datetime]] = {}
        for chunk in chunked(fps):
            rows = self._run(select(_J.c.fingerprint, _J.c.verdict, _J.c.created_at).where(
                _J.c.scope_key == scope.key, _J.c.kind == kind, _J.c.fingerprint.in_(chunk),
                _J.c.created_at >= after)).all()
            out.update({r.fingerprint: (r.verdict, r.created_at) for r in rows})
        return out

    def replace(self, scope: Scope, kind: str, rows: list[dict[str, Any]]) -> None:
        """Rows of ``kind`` (fingerprint, note_ids, verdict, reason, run_id, created_at), each
        in place of the one its fingerprint had (a memory renewed, not kept at first write)."""
        for chunk in chunked([r["fingerprint"] for r in rows]):
            self._run(delete(_J).where(_J.c.scope_key == scope.key, _J.c.kind == kind,
                                       _J.c.fingerprint.in_(chunk)))
        self._run(insert(_J), [{"scope_key": scope.key, "kind": kind, **r} for r in rows])

    def forget(self, scope: Scope, ids: Iterable[int], run_id: str, epoch: int | None) -> int:
        """Delete these verdict-memory rows of the scope (one statement per 500 ids), only of
        ``RUN_KINDS`` and recorded by another run than ``run_id``, and only while that run
        still holds its lease at ``epoch`` (none given: unfenced); on PostgreSQL the scope's
        lock first, in the statement. How many went."""
        params = {LOCK_KEY: scope.key} if is_postgres(self.session) else {}
        gone = 0
        for chunk in chunked(sorted(set(ids))):
            terms = [lock_term()] if params else []  # first: taken before any row is read
            terms += [_J.c.scope_key == scope.key, _J.c.id.in_(chunk), _J.c.kind.in_(RUN_KINDS),
                      _J.c.run_id.is_not(None), _J.c.run_id != run_id]
            if epoch is not None:
                terms.append(exists(select(literal_column("1")).where(
                    _RUNS.c.id == run_id, _RUNS.c.lease_epoch == epoch,
                    _RUNS.c.status == RunStatus.RUNNING.value)))
            gone += int(self._run(delete(_J).where(*terms), params or None).rowcount)
        return gone

    def add_review(
        self, scope: Scope, kind: str, note_ids: list[str], reason: str | None,
        run_id: str | None, now: datetime,
    ) -> None:
        self._run(
            insert(ReviewRow),
            [{"scope_key": scope.key, "kind": kind, "note_ids": sorted(note_ids),
              "reason": reason, "run_id": run_id, "created_at": now}],
        )

    def reviews(self, scope: Scope) -> list[ReviewRow]:
        return list(self.session.scalars(select(ReviewRow).where(ReviewRow.scope_key == scope.key)))
