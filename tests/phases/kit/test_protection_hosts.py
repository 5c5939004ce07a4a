"""A host that changes a note's protection (the column alone, its version kept) after a phase
loaded the scope, on SQLite and PostgreSQL, in-process and with each phase read afresh
(Celery): the fused note, whose protection is derived from its sources as read, never takes
the place of a source whose protection moved since; the cluster is skipped as stale."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, update

from tests.phases.consolidate.test_service import merge_reply
from tests.support.factories import DARK_MODE_NOTES, NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub, StubRequest
from worker.app import App
from worker.domain.types import PHASES, Scope, protection_rank
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.runs import service
from worker.store.models import NoteRow, RunStepRow

SCOPE = Scope("agent-1")
PATHS = ["in-process", "celery"]


def _run(app: App, path: str) -> None:
    """A consolidation run, in-process or as the Celery chain runs it (a task per phase,
    each reading the run afresh)."""
    run_id = service.create_run(app, SCOPE, force=True, phases=["consolidate"], clock=NOW)
    assert run_id
    if path == "in-process":
        service.execute_run(app, run_id)
        return
    for phase in PHASES:
        service.execute_phase(app, run_id, phase)
    service.finalize_run(app, run_id)


def _protect(app: App, note_id: str, protection: str) -> None:
    """The host changes the note's protection: the column alone, straight to the table."""
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == note_id)
                            .values(protection=protection))
        uow.commit()


def _notes(app: App) -> dict[str, NoteRow]:
    with app.uow() as uow:
        return {r.id: r for r in uow.session.scalars(select(NoteRow))}


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

    llm_stub.set_handler(fuse)
    app.llm = OpenAICompatibleLLM(base_url=llm_stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)
    _run(app, path)
    notes = _notes(app)
    _none_retired_into_a_weaker_note(notes)
    assert {n.status for n in notes.values()} == {"active"} and len(notes) == 5
    assert notes["d2"].protection == now
    assert _verdicts(app) == ["stale"]
