"""Why an open item cannot be approved as it stands, in one line (None when it can): a note or
example it names moved since the plan (``moved_since``), or two of its notes were kept apart
since (a host's keep-apart, a reviewer's decline). What ``review.service`` refuses or records
stale before it starts an approval's run."""

from __future__ import annotations

from typing import Any

from worker.app import App
from worker.domain.types import Scope
from worker.review.declined import kept_apart_since
from worker.review.items import ProposedChange, entity_of, moved_since


def stale_line(row: Any, current: dict[str, Any]) -> str | None:
    what = entity_of(row.payload)
    for item_id, version in sorted((row.versions or {}).items()):
        now = current.get(item_id)
        # A pin, a manual takeover, a renewal or a new score keeps the version: refused here
        # as stale, like an edit, rather than left to the write's guard (which blocks or
        # cancels the approval's run).
        moved = moved_since(row.payload, version, now)
        if moved is None:
            continue
        if now is None:
            return f"item {row.id} is stale: {what} {item_id} no longer exists; decline it"
        return (f"item {row.id} is stale: {what} {item_id} changed since it was proposed "
                f"({moved}); nothing was written; the next run proposes afresh")
    return None


def apart_line(app: App, scope: Scope, row: Any, change: ProposedChange,
                current: dict[str, Any]) -> str | None:
    if entity_of(row.payload) != "note":
        return None
    with app.uow() as uow:
        pair = kept_apart_since(uow, scope, change, current)
    if pair is None:
        return None
    return (f"item {row.id} is stale: notes {pair[0]} and {pair[1]} were kept apart since it "
            "was proposed (`dream keep-apart` or a declined review); nothing was written; no "
            "run proposes it again while they stay apart")
