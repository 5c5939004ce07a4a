"""Review items for the CLI, the API, the dashboard and MCP: list, show, approve, decline.

Every call is bound to one scope: another scope's item id is "not found". Approving re-checks
the item's notes (or example) against what its plan decided on (one that moved makes it stale:
refused, never written), then applies it in a run of its own (trigger ``review``, created by
``worker.runs`` under its lease) through the phase's own write path, so `dream undo <that run>`
reverts it like any run (the item then reads ``undone``). Declining records the verdict memory
that keeps the change from being proposed again until one of its notes changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog
from sqlalchemy.exc import SQLAlchemyError

from worker.app import App
from worker.clock import utcnow
from worker.domain.limits import line_problem, visible_problem
from worker.domain.types import Scope
from worker.errors import Conflict, NotFound, RunNotFound
from worker.errors import InvalidInput as Invalid
from worker.review.apply import LOST, end_lost_run
from worker.review.approval import (
    Applied,
    ApprovalStopped,
    Ending,
    ScopeBusy,
    apply_approved,
    cancel_approval_run,
    finish_approval,
    free_interrupted,
    open_approval,
    stop_approval,
)
from worker.review.batch_guard import BatchGuard
from worker.review.declined import remember_declined
from worker.review.items import (
    GONE,
    Decided,
    ItemStatus,
    ProposedChange,
    closed_line,
    entity_of,
    moved_since,
)
from worker.review.meanwhile import decided_meanwhile, meanwhile, taken_back, unless_gone
from worker.review.propose import settle_stale
from worker.review.staleness import apart_line, stale_line
from worker.runs.context import PhaseContext
from worker.runs.lease import executing
from worker.runs.stops import deliver_held_stops, signal_of, stops_held
from worker.store.errors import interruption
from worker.store.scope_locks import lock_scopes
from worker.store.uow import StaleLease

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Selector:
    """Which items a call decides: one id, a run's open items, or every open item of the scope."""

    item_id: int | None = None
    run_id: str | None = None
    all: bool = False

    def check(self) -> None:
        given = sum((self.item_id is not None, self.run_id is not None, self.all))
        if given != 1:
            raise Invalid("name one of item_id (one item), run_id (that run's open items) or all "
                          "(every open item of the scope)")


def item_dict(row: Any) -> dict[str, Any]:
    return {"id": row.id, "run_id": row.run_id, "phase": row.phase, "kind": row.kind,
            "status": row.status, "note_ids": sorted(row.versions or {}),
            "versions": dict(row.versions or {}), "content": row.content,
            "source_ids": list(row.source_ids or []), "relation": row.relation,
            "reason": row.reason, "confidence": row.confidence,
            "payload": dict(row.payload or {}),
            "created_at": row.created_at.isoformat() if row.created_at else None,
            "decided_at": row.decided_at.isoformat() if row.decided_at else None,
            "decided_by": row.decided_by, "applied_run_id": row.applied_run_id,
            "outcome": row.outcome}


def list_items(app: App, scope: Scope, *, status: str | None = ItemStatus.OPEN.value,
               run_id: str | None = None, limit: int | None = 100,
               offset: int = 0) -> list[dict[str, Any]]:
    """A scope's review items of ``status`` (``any`` or None: every status), oldest first."""
    if status == "any":
        status = None
    if status is not None and status not in set(ItemStatus):
        raise Invalid(f"status must be one of {', '.join(ItemStatus)}, any")
    with app.uow() as uow:
        return [item_dict(r) for r in uow.review.list(scope, status=status, run_id=run_id,
                                                      limit=limit, offset=offset)]


def check_run_of(app: App, scope: Scope, run_id: str,
                 foreign: NotFound | None = None) -> None:
    """NotFound unless ``run_id`` is a run of ``scope``: a list filtered by a run that does not
    exist, or is another scope's, is a mistake, not an empty list. Another scope's run answers
    word for word what a missing one does, or ``foreign`` where the caller may say more (the
    operator's CLI names the scope)."""
    with app.uow() as uow:
        run = uow.runs.get(run_id)
    if run is None:
        raise RunNotFound(run_id)
    if run.scope_key != scope.key:
        raise foreign or RunNotFound(run_id)


def show_item(app: App, scope: Scope, item_id: int) -> dict[str, Any]:
    """The item with the current text of each note it names (what the reviewer compares), or
    the current state of the example it would archive; ``changed``: moved since the plan."""
    with app.uow() as uow:
        row = _get(uow, scope, item_id)
        return _shown([row], _read_named(uow, [_named(row)]))[0]


def show_items(app: App, scope: Scope, *, limit: int = 50) -> list[dict[str, Any]]:
    """The scope's first ``limit`` open items, each as ``show_item`` shows it: the items, the
    notes they name and the examples they name, one query each."""
    with app.uow() as uow:
        rows = uow.review.list(scope, limit=limit)
        return _shown(rows, _read_named(uow, [_named(r) for r in rows]))


def recent_decisions(app: App, scope: Scope, *, limit: int = 20) -> list[dict[str, Any]]:
    """The scope's ``limit`` latest items no longer open, newest first."""
    with app.uow() as uow:
        return [item_dict(r) for r in uow.review.decided(scope, limit)]


def _read_named(uow: Any, named: list[tuple[str, set[str]]]) -> dict[str, dict[str, Any]]:
    """kind ("note" | "example") → id → current row, of what the items name; one read per
    kind (none for a kind no item names)."""
    wanted = {kind: {i for k, ids in named if k == kind for i in ids}
              for kind in ("note", "example")}
    return {"note": {n.id: n for n in uow.notes.get_many(wanted["note"])},
            "example": uow.examples.review_state(wanted["example"]) if wanted["example"] else {}}


def _shown(rows: list[Any], current: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        item = item_dict(row)
        kind, ids = _named(row)
        found = current[kind]

        def changed(i: str, now: Any, item: dict[str, Any] = item, row: Any = row) -> bool:
            return i in item["versions"] and moved_since(row.payload, item["versions"][i],
                                                         now) is not None

        shown = [{"id": i, "status": n.status, "version": n.version, "changed": changed(i, n),
                  **({} if kind == "example" else {"content": n.content})}
                 for i in sorted(ids) if (n := found.get(i)) is not None]
        item["notes"], item["examples"] = ([], shown) if kind == "example" else (shown, [])
        out.append(item)
    return out


def _get(uow: Any, scope: Scope, item_id: int) -> Any:
    row = uow.review.get(scope, item_id)
    if row is None:
        raise NotFound(f"no review item {item_id} in this scope; list them with "
                       "`dream review list`")
    return row


def _selected(app: App, scope: Scope, selector: Selector) -> list[Any]:
    selector.check()
    with app.uow() as uow:
        if selector.item_id is not None:
            row = _get(uow, scope, selector.item_id)
            if row.status != ItemStatus.OPEN.value:
                raise Conflict(closed_line(row))
            return [row]
        # Every open item, however many: a batch capped at 1,000 answered "done" and left the
        # rest open, unsaid (the reviewer, a script, read "all decided").
        rows = uow.review.list(scope, run_id=selector.run_id)
    if selector.run_id is not None and not rows:
        # A run id that names no run of the scope is the typo's "no run" (another scope's
        # answers alike), as `dream review list --run` says it; before, "no open review items
        # of run X", sending the reviewer to a listing that then said there was no such run.
        check_run_of(app, scope, selector.run_id)
        raise NotFound(f"no open review items of run {selector.run_id} in this scope; `dream "
                       f"review list --run {selector.run_id} --status any` shows what became of them")
    return rows


def decline(app: App, scope: Scope, selector: Selector, by: str,
            reason: str | None = None) -> list[Decided]:
    """Decline and remember until a note changes; a named item decided meanwhile: Conflict."""
    if reason is not None and (problem := visible_problem(reason)):
        raise Invalid(f"reason {problem}; leave it out when there is none")
    if reason is not None and (problem := line_problem(reason)):
        raise Invalid(f"reason {problem}")
    out = []
    rows = _selected(app, scope, selector)
    batch = frozenset(r.id for r in rows)
    for row in rows:
        change = ProposedChange.from_row(row)
        now = utcnow()
        with app.uow() as uow:
            # A run's write waiting for the scope's lock sees the keep-apart this records
            # (``PhaseWrite._apply``); one holding it is waited for.
            lock_scopes(uow.session, [scope.key])
            if not uow.review.decide(row.id, ItemStatus.DECLINED.value, now=now, by=by,
                                     outcome=(reason or "declined")[:500]):
                out.append(meanwhile(uow, row))
                continue
            remember_declined(uow, scope, change, reason, now)
            if len(rows) == 1:  # a batch settles once, below (one read, not one per item)
                _settle_declined(uow, scope, now, [row], batch)
            uow.commit()
        out.append(Decided(row.id, ItemStatus.DECLINED.value, f"declined item {row.id}"))
    if len(rows) > 1 and (done := [r for r, d in zip(rows, out, strict=True)
                                   if d.status == ItemStatus.DECLINED.value]):
        with app.uow() as uow:
            _settle_declined(uow, scope, utcnow(), done, batch)
            uow.commit()
    log.info("review.declined", scope=scope.key, items=len(out), by=by)
    if selector.item_id is not None and out[0].status not in (ItemStatus.DECLINED.value, GONE):
        raise Conflict(out[0].line)
    return out


def _settle_declined(uow: Any, scope: Scope, now: Any, declined: list[Any],
                     batch: frozenset[int]) -> None:
    """Another open item retiring one of the declined items' notes into another can never
    apply now (the decline kept them apart): recorded stale."""
    names = ", ".join(str(r.id) for r in declined[:5]) + (
        f" and {len(declined) - 5} more" if len(declined) > 5 else "")
    settle_stale(uow, scope, now, f"review item{'s' if len(declined) > 1 else ''} {names} "
                 f"{'were' if len(declined) > 1 else 'was'} declined", by="review",
                 naming={i for r in declined for i in (r.versions or {})}, spare=batch)


def approve(app: App, scope: Scope, selector: Selector, by: str) -> list[Decided]:
    """Apply each selected item in proposal order.

    What the items name is read once for all of them (``_Current``). One named item that is
    stale raises Conflict and writes nothing (the item stays open until a run or a batch
    approval records it stale); a batch records each stale item as stale, and counts its
    retirements together against the guard (``BatchGuard``: one past it stays open, blocked).
    An item an erasure took meanwhile is answered ``gone``, named or in a batch.
    """
    single = selector.item_id is not None
    rows = _selected(app, scope, selector)
    current = _Current(app, rows)
    guard = None if single else BatchGuard.start(app, scope)
    out: list[Decided] = []
    busy = None  # why the batch stopped: the scope's run slot was taken (a dream, a reviewer)
    for row in rows:
        refusal = (f"item {row.id} {busy}" if busy is not None else
                   guard.refusal(row) if guard is not None else None)
        if refusal is not None:
            out.append(Decided(row.id, "blocked", refusal))  # still open
            continue
        try:
            out.append(_approve_one(app, scope, row, by, current, record_stale=not single))
        except ScopeBusy as exc:  # a batch does not end in an error after applying items
            if single:
                raise
            busy = (f"left open: the batch stopped at item {row.id} ({exc}); approve the rest "
                    "again once the scope's run has finished")
            out.append(Decided(row.id, "blocked", f"item {row.id} {busy}"))
            continue
        if out[-1].status != ItemStatus.APPROVED.value:
            if single or out[-1].status == "refused":  # a batch's stale ones are recorded
                out[-1] = unless_gone(app, row, out[-1])
            continue
        if guard is not None:
            guard.applied(row)
        with app.uow() as uow:  # another open item over a note it wrote can never apply now
            settle_stale(uow, scope, utcnow(), f"the approval of review item {row.id} in run "
                         f"{out[-1].run_id}", by="review", naming=_named(row)[1],
                         spare=frozenset(r.id for r in rows))
            uow.commit()
    if single and out[0].status not in (ItemStatus.APPROVED.value, GONE):
        raise Conflict(out[0].line)
    return out


def _named(row: Any) -> tuple[str, set[str]]:
    """("note" | "example", the ids of what the item names: its members and sources)."""
    return entity_of(row.payload), set(row.versions or {}) | set(row.source_ids or ())


class _Current:
    """The notes and examples the selected items name, each kind read in one query for all
    of them; what an applied item wrote is read again before a later item that names it."""

    def __init__(self, app: App, rows: list[Any]) -> None:
        self.app = app
        self.state: dict[str, dict[str, Any]] = {"note": {}, "example": {}}
        self.dirty: set[tuple[str, str]] = set()
        self._read([_named(r) for r in rows])

    def _read(self, named: list[tuple[str, set[str]]]) -> None:
        with self.app.uow() as uow:
            current = _read_named(uow, named)
        for kind, ids in named:  # one gone since is absent, not as it was
            for i in ids:
                self.state[kind].pop(i, None)
        for kind, found in current.items():
            self.state[kind].update(found)

    def of(self, row: Any) -> dict[str, Any]:
        kind, ids = _named(row)
        if self.dirty & {(kind, i) for i in ids}:
            self._read([(kind, ids)])
            self.dirty -= {(kind, i) for i in ids}
        return {i: self.state[kind][i] for i in ids if i in self.state[kind]}

    def wrote(self, row: Any) -> None:
        kind, ids = _named(row)
        self.dirty |= {(kind, i) for i in ids}


def _approve_one(app: App, scope: Scope, row: Any, by: str, known: _Current,
                 record_stale: bool) -> Decided:
    change = ProposedChange.from_row(row)
    current = known.of(row)
    line = stale_line(row, current) or apart_line(app, scope, row, change, current)
    if line is not None:
        return _mark_stale(app, row, by, line) if record_stale else Decided(
            row.id, ItemStatus.STALE.value, line)
    known.wrote(row)  # whatever the outcome: a later item naming these ids reads them again
    with stops_held():  # a stop as its run is created waits for the cancel below
        ctx = open_approval(app, scope, row, by)
        assert ctx.held is not None
        try:
            deliver_held_stops()
            with executing(ctx.run_id, partial(cancel_approval_run, app, ctx.run_id, ctx.epoch)):
                result, detail, applied = apply_approved(ctx, row, by, change, current)
                if result != LOST:
                    return _finish(app, ctx, row, by, result, detail, applied)
        except StaleLease:
            pass  # the write's fence found the run cancelled or interrupted: nothing was kept
        except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM under a `dream` command
            name = signal_of(stop)
            cancelled = stop_approval(app, ctx, row.id, name)
            raise ApprovalStopped(row.id, ctx.run_id, name, cancelled) from stop
        except SQLAlchemyError as exc:  # busy or lost: its run freed now, not at its lease
            if (cause := interruption(exc)) is not None:
                free_interrupted(app, ctx, cause)
            raise  # "the database was busy ...; try again": the item is open, its scope free
        finally:
            ctx.held.discard()  # a write the finish did not take (an exception) is never kept
    return Decided(row.id, "refused", f"item {row.id} not applied: its run {ctx.run_id} was "
                   f"{end_lost_run(app, ctx.run_id)} meanwhile (an erasure in the scope or "
                   "`dream runs cancel`); nothing was written", ctx.run_id)


def _mark_stale(app: App, row: Any, by: str, line: str) -> Decided:
    with app.uow() as uow:
        recorded = uow.review.decide(row.id, ItemStatus.STALE.value, now=utcnow(), by=by,
                                     outcome=line)
        uow.commit()
    if not recorded:
        return decided_meanwhile(app, row)
    log.info("review.stale", item=row.id)
    return Decided(row.id, ItemStatus.STALE.value, line)


def _finish(app: App, ctx: PhaseContext, row: Any, by: str, result: str,
            detail: str | None, applied: Applied) -> Decided:
    decided, ending = finish_approval(app, ctx, row, by, result, detail, applied)
    if ending is Ending.PREEMPTED_WRITTEN:
        return taken_back(app, ctx.run_id, row)
    if ending is Ending.PREEMPTED:
        return decided_meanwhile(app, row, ctx.run_id)
    log.info("review.approved", item=row.id, result=result, run_id=ctx.run_id)
    return decided
