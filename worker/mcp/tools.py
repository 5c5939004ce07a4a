"""What each MCP tool does, for one scope, over the host and run services (no SDK here).

Every id a caller names is looked up inside the bound scope only: another scope's note or run
is "not found", exactly as over the HTTP API (R11, R24).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.app import App
from worker.domain.limits import INT_MAX, REASON_MAX, ident_problem, text_problem
from worker.domain.types import NoteType, Scope
from worker.host import Invalid, NotFound, fuse, fusion_candidates, keep_apart, remember
from worker.runs.service import RunError, explain_scopes
from worker.runs.start import RunRequest, start_run

MAX_ALLOW_RETIRE = 10_000_000  # the API's and the CLI's bound on --allow-retire


@dataclass(frozen=True)
class ScopedTools:
    """The tools of one caller; ``scope`` comes from its token or the server's configuration."""

    app: App
    scope: Scope

    def remember(self, content: str, type: str = NoteType.CONTEXT.value,
                 importance: float = 0.5, conversation_id: str | None = None,
                 manual: bool = True) -> dict[str, Any]:
        return remember(self.app, self.scope, content, type, importance, conversation_id,
                        manual).as_dict()

    def list_candidates(self, threshold: float = 0.88, limit: int = 50) -> dict[str, Any]:
        return {"candidates": fusion_candidates(self.app, self.scope, threshold,
                                                _limit(limit, 500))}

    def fuse(self, source_ids: list[str], fused_content: str,
             fused_importance: float | None = None, strict: bool = False,
             type: str | None = None,
             source_versions: dict[str, int] | None = None) -> dict[str, Any]:
        result = fuse(self.app, source_ids, fused_content, fused_importance, strict,
                      allowed_scope=self.scope, note_type=type, source_versions=source_versions)
        return result.as_dict()

    def keep_apart(self, source_ids: list[str],
                   source_versions: dict[str, int] | None = None) -> dict[str, Any]:
        return keep_apart(self.app, source_ids, allowed_scope=self.scope,
                          source_versions=source_versions)

    def start_dream(self, force: bool = False, dry_run: bool = False,
                    allow_retire: int | None = None) -> dict[str, Any]:
        if allow_retire is not None and (
            isinstance(allow_retire, bool) or not 0 <= allow_retire <= MAX_ALLOW_RETIRE
        ):
            raise Invalid(f"allow_retire must be a whole number from 0 to {MAX_ALLOW_RETIRE} "
                          "(the count a blocked run's reason names)")
        started = start_run(self.app, RunRequest(self.scope, trigger="mcp", force=force,
                                                 dry_run=dry_run, allow_retire=allow_retire))
        return {"run_id": started.run_id, "status": started.status, "mode": started.mode.value}

    def dream_status(self, run_id: str | None = None) -> dict[str, Any]:
        """One run's step tree, or the scope's latest runs and its gate decision."""
        from worker.reporting import list_runs

        if run_id is not None:  # "" is a malformed id, not "no id"
            return {"run": self._run(run_id)}
        gate = explain_scopes(self.app, scopes=[self.scope])[self.scope]
        return {"scope": self.scope.as_dict(), "gate": gate.as_dict(),
                "runs": list_runs(self.app, scope=self.scope, limit=10)}

    def undo_run(self, run_id: str, force_cascade: bool = False) -> dict[str, Any]:
        """A run of this scope, or a fuse of this scope by its ``undo_id``."""
        from worker.safety.undo import logged_scopes, undo_run

        _ident(run_id)  # before the operation-log read, which no driver could encode it for
        if logged_scopes(self.app, run_id) != {self.scope.key}:
            self._run(run_id)  # NotFound unless a run of this scope
        result = undo_run(self.app, run_id, force_cascade=force_cascade,
                          by=f"mcp:{self.scope.key}")
        return result.as_dict()

    # ---- review before apply (worker.review) ----------------------------------------------
    def review_list(self, status: str = "open", run_id: str | None = None,
                    limit: int = 100, offset: int = 0) -> dict[str, Any]:
        from worker.review.service import check_run_of, list_items

        wanted = None if status == "any" else status
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= INT_MAX:
            raise Invalid(f"offset must be a whole number from 0 to {INT_MAX}")
        items = list_items(self.app, self.scope, status=wanted, run_id=_ident(run_id),
                           limit=_limit(limit, 1000), offset=offset)
        if not items and run_id is not None:
            check_run_of(self.app, self.scope, run_id)  # another scope's run or none: not found
        return {"items": items}

    def review_show(self, item_id: int) -> dict[str, Any]:
        from worker.review.service import show_item

        return {"item": show_item(self.app, self.scope, _item_id(item_id))}

    def review_approve(self, item_id: int | None = None, run_id: str | None = None,
                       all: bool = False) -> dict[str, Any]:
        from worker.review.items import decided_body
        from worker.review.service import Selector, approve

        selector = Selector(None if item_id is None else _item_id(item_id), _ident(run_id), all)
        done = approve(self.app, self.scope, selector, f"mcp:{self.scope.key}")
        return decided_body(done)

    def review_decline(self, item_id: int | None = None, run_id: str | None = None,
                       all: bool = False, reason: str | None = None) -> dict[str, Any]:
        from worker.review.items import decided_body
        from worker.review.service import Selector, decline

        if reason is not None and (len(reason) > REASON_MAX or text_problem(reason)):
            raise Invalid(f"reason must be at most {REASON_MAX} characters of valid Unicode, "
                          "without NUL")
        selector = Selector(None if item_id is None else _item_id(item_id), _ident(run_id), all)
        done = decline(self.app, self.scope, selector, f"mcp:{self.scope.key}", reason)
        return decided_body(done)

    def _run(self, run_id: str) -> dict[str, Any]:
        from worker.reporting import run_tree

        _ident(run_id)
        try:
            tree = run_tree(self.app, run_id)
        except RunError:
            raise NotFound(f"no run with id {run_id}") from None
        if tree["scope"] != self.scope.key:
            raise NotFound(f"no run with id {run_id}")  # indistinguishable from a missing run
        return tree


def _item_id(value: int) -> int:
    """An item id as the API's path takes it: 0, a negative or a 40-digit number is
    ``invalid`` naming the range (the API's 422), not "no review item" (its 404)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT_MAX:
        raise Invalid(f"item_id must be a whole number from 1 to {INT_MAX}")
    return value


def _limit(value: int, most: int) -> int:
    """The API's bounds (1 to ``most``, a 422 there): refused, never clamped into range."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise Invalid(f"limit must be a whole number from 1 to {most}")
    return value


def _ident(value: str | None) -> str | None:
    """A run id as every shell takes it (≤ 64 characters, no NUL): invalid, not "not found"."""
    if value is not None and (problem := ident_problem(value)):
        raise Invalid(f"run_id {problem}")
    return value
