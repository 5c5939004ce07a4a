"""A host that changes a note's protection (the column alone, its version kept) after a phase
loaded the scope, on SQLite and PostgreSQL, in-process and with each phase read afresh
(Celery): the fused note, whose protection is derived from its sources as read, never takes
the place of a source whose protection moved since, and prune and contradictions never retire
a note the host has since kept more strongly; each such item is skipped as stale, alone."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from tests.phases.consolidate.test_service import merge_reply
from tests.phases.contradictions.test_service import IMPERIAL, METRIC, answering, topics
from tests.support.factories import DARK_MODE_NOTES, add_entities, add_notes, days_ago
from tests.support.host_writes import (
    PATHS,
    host_sets,
    note_rows,
    run_path,
    run_status,
    use_stub,
)
from tests.support.llm_stub import LLMStub, StubRequest
from worker.app import App
from worker.domain.types import Scope, protection_rank
from worker.references import RegistryReferenceChecker
from worker.store.models import NoteRow, RunStepRow

SCOPE = Scope("agent-1")
EURO = "Vendor uses euro pricing for all invoices"
DOLLAR = "Vendor uses dollar pricing for all invoices"


def _protect(app: App, note_id: str, protection: str) -> None:
    """The host changes the note's protection: the column alone, straight to the table."""
    host_sets(app, note_id, protection=protection)


def _verdicts(app: App) -> list[str]:
    with app.uow() as uow:
        steps = uow.session.scalars(select(RunStepRow).where(
            RunStepRow.phase == "consolidate", RunStepRow.parent_id.is_not(None)))
        return [str((s.output or {}).get("verdict")) for s in steps]


def _none_retired_into_a_weaker_note(notes: dict[str, NoteRow]) -> None:
    for n in notes.values():
        into = notes.get(n.consolidated_into_id or "")
        if n.status != "active" and into is not None:
            assert protection_rank(into.protection) >= protection_rank(n.protection), (
                f"{n.protection} {n.id} retired into {into.protection} {into.id}")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("loaded", "now"), [
    ("ephemeral", "standard"),  # raised: the throwaway fusion would swallow ordinary memory
    ("ephemeral", "protected"),  # pinned: stale, not a blast-radius trip
    ("standard", "ephemeral"),  # lowered: the plan read otherwise (stale; nothing weakened)
])
def test_a_source_whose_protection_moved_while_the_model_fuses_is_stale(
        app: App, llm_stub: LLMStub, path: str, loaded: str, now: str) -> None:
    """The host changes d2's protection while the model writes the fusion of five notes the
    plan read as ``loaded``: the cluster is recorded stale, every note stays as it was, and no
    note is retired into a weaker one (before: an ephemeral fused note took d2's place)."""
    add_notes(app, *({"id": f"d{k}", "type": "Preference", "content": t,
                      "protection": loaded, "created_at": days_ago(30 - k)}
                     for k, t in enumerate(DARK_MODE_NOTES)))

    def fuse(req: StubRequest) -> Any:
        _protect(app, "d2", now)
        return merge_reply(source_ids=[f"n{k}" for k in range(1, 6)])

    use_stub(app, llm_stub, fuse)
    run_path(app, SCOPE, ["consolidate"], path)
    notes = note_rows(app)
    _none_retired_into_a_weaker_note(notes)
    assert {n.status for n in notes.values()} == {"active"} and len(notes) == 5
    assert notes["d2"].protection == now
    assert _verdicts(app) == ["stale"]


# What a host may do to a note a run plans to retire, its version kept: each raises how strongly
# the note is kept, so the retirement the plan decided no longer holds (stale, skipped alone).
RAISED = [
    pytest.param({"protection": "protected"}, id="pinned"),
    pytest.param({"protection": "immutable"}, id="immutable"),
    pytest.param({"is_auto_generated": False}, id="manual"),
]


class _PinningChecker(RegistryReferenceChecker):
    """The registry, with the host's write landing as prune looks the references up (after
    the phase read its candidates, before its write)."""

    def __init__(self, app: App, note_id: str, columns: dict[str, Any]) -> None:
        super().__init__(app)
        self.note_id, self.columns = note_id, columns

    def _fetch_many(self, repo: Any, missing: dict[str, list[str]]) -> Any:
        host_sets(self.app, self.note_id, **self.columns)
        return super()._fetch_many(repo, missing)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("columns", RAISED)
def test_a_note_kept_more_strongly_while_prune_looks_up_is_stale_not_a_guard_trip(
        app: App, path: str, columns: dict[str, Any]) -> None:
    """Three notes whose conversation is deleted; the host raises p2's protection (or takes it
    over) once prune has read them: p2 is skipped as stale and stays active, p1 and p3 are
    archived, and the run is not blocked (before: the guard refused p2 and the run ended
    ``blocked`` with nothing archived)."""
    add_entities(app, {"kind": "agent", "id": "agent-1"},
                 {"kind": "conversation", "id": "c1", "status": "deleted"})
    add_notes(app, *({"id": f"p{k}", "content": f"fact {k} from that chat",
                      "source_conversation_id": "c1"} for k in (1, 2, 3)))
    app.reference_checker = lambda a: _PinningChecker(a, "p2", columns)
    run_id = run_path(app, SCOPE, ["prune"], path)
    notes = note_rows(app)
    assert run_status(app, run_id) == "succeeded"
    assert {k: n.status for k, n in notes.items()} == {
        "p1": "archived", "p2": "active", "p3": "archived"}
    (orphans,) = [s for s in _children(app, "prune") if s.name == "orphans"]
    assert orphans.output is not None
    assert orphans.output["stale"] == ["p2"]
    assert sorted(orphans.output["archived"]) == ["p1", "p3"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("columns", RAISED)
def test_a_loser_kept_more_strongly_while_the_model_judges_is_stale_not_a_guard_trip(
        app: App, llm_stub: LLMStub, path: str, columns: dict[str, Any]) -> None:
    """Two conflicts, each older note the loser; the host raises ``old``'s protection (or
    takes it over) while the model judges: that pair is skipped as stale and ``old`` stays
    active, the other conflict is resolved, and the run is not blocked (before: the guard
    refused ``old`` and the run ended ``blocked``)."""
    add_notes(app, {"id": "old", "content": METRIC, "created_at": days_ago(20)},
              {"id": "new", "content": IMPERIAL, "created_at": days_ago(1)},
              {"id": "old2", "content": EURO, "created_at": days_ago(20)},
              {"id": "new2", "content": DOLLAR, "created_at": days_ago(1)})

    def judge(a: str, b: str) -> Any:
        host_sets(app, "old", **columns)
        return topics(a, b)

    use_stub(app, llm_stub, answering(judge))
    run_id = run_path(app, SCOPE, ["contradictions"], path)
    notes = note_rows(app)
    assert run_status(app, run_id) == "succeeded"
    assert {k: n.status for k, n in notes.items()} == {
        "old": "active", "new": "active", "old2": "revoked", "new2": "active"}
    (parent,) = [s for s in _steps(app, "contradictions") if s.parent_id is None]
    assert parent.output is not None
    assert parent.output["pairs_skipped_stale"] == 1
    assert parent.output["conflicts_resolved"] == 1 and not parent.output.get("pairs_guarded")
    children = _children(app, "contradictions")
    assert all(s.output is not None for s in children)
    actions = [a for s in children for a in (s.output or {}).get("actions", [])]
    assert sorted(a["action"] for a in actions) == ["revoke", "stale"]


def _steps(app: App, phase: str) -> list[RunStepRow]:
    with app.uow() as uow:
        return list(uow.session.scalars(select(RunStepRow).where(RunStepRow.phase == phase)))


def _children(app: App, phase: str) -> list[RunStepRow]:
    return [s for s in _steps(app, phase) if s.parent_id is not None]
