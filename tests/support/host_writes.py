"""A host writing to a note between a phase's load and its write: the write itself (columns
alone, straight to the table, the version kept, as a host's own code would), the run in-process
or as the Celery chain runs it, and what the tests read back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select, update

from tests.support.factories import NOW
from tests.support.llm_stub import LLMStub, StubRequest
from worker.app import App
from worker.domain.types import PHASES, Scope
from worker.llm.openai_compat import OpenAICompatibleLLM
from worker.runs import service
from worker.store.models import DreamRunRow, NoteRow

PATHS = ["in-process", "celery"]


def host_sets(app: App, note_id: str, **columns: Any) -> None:
    """The host changes ``columns`` of the note: no version, no lease, its own transaction."""
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == note_id).values(**columns))
        uow.commit()


def run_path(app: App, scope: Scope, phases: list[str], path: str,
             registry: Any = None) -> str:
    """A forced run of ``phases``, in-process or as the Celery chain runs it (a task per phase,
    each reading the run afresh); its id."""
    run_id = service.create_run(app, scope, force=True, phases=phases, clock=NOW)
    assert run_id
    if path == "in-process":
        service.execute_run(app, run_id, registry)
    else:
        for phase in PHASES:
            service.execute_phase(app, run_id, phase, registry)
        service.finalize_run(app, run_id)
    return run_id


def use_stub(app: App, stub: LLMStub, handler: Callable[[StubRequest], Any]) -> None:
    """``app``'s model is the real client against ``stub`` answering with ``handler``."""
    stub.set_handler(handler)
    app.llm = OpenAICompatibleLLM(base_url=stub.url, model="stub-model", api_key="k",
                                  timeout=10, max_retries=0)


def note_rows(app: App) -> dict[str, NoteRow]:
    with app.uow() as uow:
        return {r.id: r for r in uow.session.scalars(select(NoteRow))}


def run_status(app: App, run_id: str) -> str:
    with app.uow() as uow:
        return uow.session.get_one(DreamRunRow, run_id).status
