"""Verdict memory no run can read again, deleted: so the table a run loads per scope stays
the size of what it still decides, not of every question ever asked in the scope.

A run's verdicts (``RUN_KINDS``: a judge's cluster and pair answers, a retirement held back, a
question or a pair cooling off) hold at their notes' versions. Once one of those notes is no
longer active (revoked, archived, erased) the row never matches again: every way back to
active (an undo, an erasure giving co-sources back) bumps the note's version. A question or a
pair remembered as unanswered or unsettled is read only within ``DREAM_LLM_UNANSWERED_HOURS``
of its date. A cluster, pair or held-back row (``_AT_VERSIONS``: its fingerprint is its notes'
ids and versions, nothing else) on active notes whose version has moved since (a host's edit,
a run re-dating the note) never matches again either: versions only go up, and a row of an
earlier run was recorded at versions no later than the load's. Consolidation and a held-back
retirement read theirs by fingerprint only; contradictions also reads its pair rows without
versions, to ask a pair never judged before one judged at older versions (``judged_before``),
so of those the newest row of each pair of notes stays. Such rows, recorded by an earlier run,
go: one DELETE by id per scope, only when there is one, by the last phase of the run that loads
the memory (contradictions; consolidation in a run without it, ``dream run --phase``).
What a person decided (a host's keep-apart or fuse, a reviewer's decline) is never deleted
here, nor a row this run recorded (an undo of the run deletes those). The price of a row
deleted too early (a note given back by hand in the table, the period raised later) is one
question asked again, as for any pair at a new version."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import structlog

from worker.domain.types import fingerprint_versions
from worker.llm.unanswered import hours
from worker.store.repositories.judgements import PENDING_RETIREMENT, RUN_KINDS, UNSETTLED

log = structlog.get_logger(__name__)

_COOLING = frozenset({"unanswered", UNSETTLED})  # read only within the period of their date
_RUN_KINDS = frozenset(RUN_KINDS)
# Kinds whose fingerprint is ``fingerprint_versions`` of their note ids alone (the others key
# the model and the prompt too, and cool off by date).
_AT_VERSIONS = frozenset({"cluster", "pair", PENDING_RETIREMENT})
_ORDERED = "pair"  # also read without versions: its newest row per pair of notes stays
# The phases that load the verdict memory, in run order: the last one a run runs prunes.
READERS = ("consolidate", "contradictions")


def dead(rows: Sequence[Any], live: Mapping[str, int], since: datetime | None,
         run_id: str) -> list[int]:
    """The ids of the loaded rows (``Judged``, oldest first) no run reads again: of
    ``RUN_KINDS``, recorded by another run, naming a note not in ``live`` (the scope's active
    notes, id → version), or of ``_AT_VERSIONS`` at other versions than ``live`` (a pair
    row only when a later row names the same notes), or, for a cooling kind, recorded before
    ``since`` (None: the period is 0, nothing is remembered by date)."""
    newest = {frozenset(r.note_ids or ()): k for k, r in enumerate(rows) if r.kind == _ORDERED}
    out = []
    for k, r in enumerate(rows):
        if r.row_id is None or r.run_id is None or r.run_id == run_id \
                or r.kind not in _RUN_KINDS:
            continue
        ids = r.note_ids or ()
        if any(i not in live for i in ids) or (
                since is not None and r.kind in _COOLING and r.at is not None and r.at < since
        ) or (ids and r.kind in _AT_VERSIONS and _moved(r, live)
              and (r.kind != _ORDERED or newest[frozenset(ids)] != k)):
            out.append(r.row_id)
    return out


def _moved(r: Any, live: Mapping[str, int]) -> bool:
    """Whether a note of the row has another version now than the row was recorded at."""
    return bool(r.fingerprint != fingerprint_versions([(i, live[i]) for i in r.note_ids]))


def prunes(ctx: Any, phase: str) -> bool:
    """Whether ``phase`` is the last of the run's phases (``ctx.requested``) to load the memory."""
    return phase == next((p for p in reversed(READERS) if p in ctx.requested), None)


def forget_dead(ctx: Any, load: Any, phase: str) -> int | None:
    """Delete the dead rows of the phase's loaded memory (``load``: a ``ScopeLoad`` with its
    memory) in one short write, and drop them from the carried memory, when ``phase`` is the
    run's last to load it; how many the DELETE removed, None when there was none to remove (or
    a dry run, or no run, or a later phase of the run prunes)."""
    memory = load.memory
    if memory is None or ctx.dry_run or ctx.run_id is None or not prunes(ctx, phase):
        return None
    period = hours(ctx.settings)
    since = ctx.now - timedelta(hours=period) if period > 0 else None
    ids = dead(memory.rows, {n.id: n.version for n in load.notes.notes}, since, ctx.run_id)
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
