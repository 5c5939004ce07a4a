"""Verdict memory no run can read again, deleted: so the table a run loads per scope stays
the size of what it still decides, not of every question ever asked in the scope.

A run's verdicts (``RUN_KINDS``: a judge's cluster and pair answers, a retirement held back, a
question or a pair cooling off) hold at their notes' versions. Once one of those notes is no
longer active (revoked, archived, erased) the row never matches again: every way back to
active (an undo, an erasure giving co-sources back) bumps the note's version. A question or a
pair remembered as unanswered or unsettled is read only within ``DREAM_LLM_UNANSWERED_HOURS``
of its date. Such rows, recorded by an earlier run, go: one DELETE by id per scope, only when
there is one. What a person decided (a host's keep-apart or fuse, a reviewer's decline) is
never deleted here, nor a row this run recorded (an undo of the run deletes those).
The price of a row deleted too early (a note given back by hand in the table, the period
raised later) is one question asked again, as for any pair at a new version."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime, timedelta
from typing import Any

import structlog

from worker.llm.unanswered import hours
from worker.store.repositories.judgements import RUN_KINDS, UNSETTLED

log = structlog.get_logger(__name__)

_COOLING = frozenset({"unanswered", UNSETTLED})  # read only within the period of their date
_RUN_KINDS = frozenset(RUN_KINDS)


def dead(rows: Iterable[Any], live: Collection[str], since: datetime | None,
         run_id: str) -> list[int]:
    """The ids of the loaded rows (``Judged``) no run reads again: of ``RUN_KINDS``, recorded
    by another run, naming a note not in ``live`` (the scope's active notes) or, for a cooling
    kind, recorded before ``since`` (None: the period is 0, nothing is remembered by date)."""
    out = []
    for r in rows:
        if r.row_id is None or r.run_id is None or r.run_id == run_id \
                or r.kind not in _RUN_KINDS:
            continue
        if any(i not in live for i in r.note_ids or ()) or (
                since is not None and r.kind in _COOLING and r.at is not None and r.at < since):
            out.append(r.row_id)
    return out


def forget_dead(ctx: Any, load: Any) -> int | None:
    """Delete the dead rows of the phase's loaded memory (``load``: a ``ScopeLoad`` with its
    memory) in one short write, and drop them from the carried memory; how many the DELETE
    removed, None when there was none to remove (or a dry run, or no run)."""
    memory = load.memory
    if memory is None or ctx.dry_run or ctx.run_id is None:
        return None
    period = hours(ctx.settings)
    since = ctx.now - timedelta(hours=period) if period > 0 else None
    ids = dead(memory.rows, {n.id for n in load.notes.notes}, since, ctx.run_id)
    if not ids:
        return None
    with ctx.uow() as uow:
        gone: int = uow.judgements.forget(ctx.scope, ids, ctx.run_id, ctx.epoch)
        uow.commit()
    drop = set(ids)
    for r in memory.rows:
        if r.row_id in drop:
            memory.verdicts.pop((r.kind, r.fingerprint), None)
    memory.rows[:] = [r for r in memory.rows if r.row_id not in drop]
    log.info("verdict_memory.pruned", run_id=ctx.run_id, scope=ctx.scope.key, rows=gone)
    return gone
