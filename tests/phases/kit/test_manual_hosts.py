"""R26 against a host that takes a note over as manual (``is_auto_generated`` false, its version
kept) after a phase loaded the scope, on SQLite and PostgreSQL, in-process and with each phase
read afresh (Celery): a fused note with a manual source stays manual, a manual note never loses
a conflict, however late the host's mark comes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.phases.consolidate.test_service import merge_reply
from tests.phases.contradictions.test_service import IMPERIAL, METRIC, answering, topics
from tests.support.factories import DARK_MODE_NOTES, add_notes, days_ago
from tests.support.host_writes import PATHS, host_sets, note_rows, run_path, use_stub
from tests.support.llm_stub import LLMStub, StubRequest
from worker.app import App
from worker.domain.types import PhaseReport, Scope
from worker.runs import service
from worker.runs.context import PhaseContext
from worker.store.models import NoteRow

SCOPE = Scope("agent-1")


def _mark_manual(app: App, note_id: str) -> None:
    """The host takes the note over: the column alone, straight to the table, no version."""
    host_sets(app, note_id, is_auto_generated=False)


def _run(app: App, phases: list[str], path: str, registry: Any = None) -> None:
    run_path(app, SCOPE, phases, path, registry)


def _no_manual_note_retired_into_an_auto_one(notes: dict[str, NoteRow]) -> None:
    for n in notes.values():
        if n.status != "active" and not n.is_auto_generated:
            into = notes.get(n.consolidated_into_id or "")
            assert into is not None and not into.is_auto_generated, (
                f"manual {n.id} retired ({n.status}) into {into and into.id}, auto-generated")


@pytest.mark.parametrize("path", PATHS)
def test_a_source_marked_manual_while_the_model_fuses_is_never_fused_into_an_auto_note(
        app: App, llm_stub: LLMStub, path: str) -> None:
    """The host marks d2 manual while the model writes the fusion of the five notes its plan
    read as auto-generated: the fused note may not be built as auto-generated over it. The
    cluster is stale (d2 changed since the plan) and every note stays as it was."""
    add_notes(app, *({"id": f"d{k}", "type": "Preference", "content": t,
                      "created_at": days_ago(30 - k)} for k, t in enumerate(DARK_MODE_NOTES)))

    def fuse(req: StubRequest) -> Any:
        _mark_manual(app, "d2")
        return merge_reply(source_ids=[f"n{k}" for k in range(1, 6)])

    use_stub(app, llm_stub, fuse)
    _run(app, ["consolidate"], path)
    notes = note_rows(app)
    _no_manual_note_retired_into_an_auto_one(notes)
    assert notes["d2"].status == "active" and not notes["d2"].is_auto_generated
    assert {n.status for n in notes.values()} == {"active"} and len(notes) == 5


def _conflict(app: App, stub: LLMStub, judge: Callable[[str, str], Any]) -> None:
    """``old`` (metric) and ``new`` (imperial) conflict; the newer wins, unless old is manual."""
    add_notes(app, {"id": "old", "content": METRIC, "created_at": days_ago(20)},
              {"id": "new", "content": IMPERIAL, "created_at": days_ago(1)})
    use_stub(app, stub, answering(judge))


@pytest.mark.parametrize("path", PATHS)
def test_a_note_marked_manual_while_the_model_judges_never_loses_its_conflict(
        app: App, llm_stub: LLMStub, path: str) -> None:
    """The host marks the would-be loser manual while the model judges the pair: the write must
    not retire it (a manual note may win a conflict, never lose one)."""

    def judge(a: str, b: str) -> Any:
        _mark_manual(app, "old")
        return topics(a, b)

    _conflict(app, llm_stub, judge)
    _run(app, ["contradictions"], path)
    notes = note_rows(app)
    _no_manual_note_retired_into_an_auto_one(notes)
    assert notes["old"].status == "active" and not notes["old"].is_auto_generated


@pytest.mark.parametrize("path", PATHS)
def test_a_note_marked_manual_between_phases_never_loses_its_conflict(
        app: App, llm_stub: LLMStub, path: str) -> None:
    """The host marks the would-be loser manual once consolidation finished: contradictions
    (planned on the carried scope in-process, afresh under Celery) must not retire it."""
    real = service.phase_registry()

    def consolidate(ctx: PhaseContext, parent_step_id: str) -> PhaseReport:
        report = real["consolidate"](ctx, parent_step_id)
        _mark_manual(ctx.app, "old")
        return report

    _conflict(app, llm_stub, topics)
    _run(app, ["consolidate", "contradictions"], path, {**real, "consolidate": consolidate})
    notes = note_rows(app)
    assert notes["old"].status == "active" and not notes["old"].is_auto_generated
