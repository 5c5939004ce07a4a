"""A broker lost while a run is being sent: the error says the run failed unsent only when it
was failed (a queued run); an interrupted run first in the hand-out is left as it is, and the
error says so (before: "failed unsent" while it stayed interrupted)."""

from __future__ import annotations

from typing import Any

import pytest
from kombu.exceptions import OperationalError

import worker.tasks as tasks
from worker.app import App
from worker.celery_app import app as celery_app
from worker.domain.types import RunStatus, Scope
from worker.errors import BrokerUnavailable
from worker.runs import service


class _Lost:
    def __enter__(self) -> Any:
        raise OperationalError("Error 111 connecting")

    def __exit__(self, *exc: object) -> None:
        return None


def _send(app: App, run_ids: list[str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(celery_app, "producer_or_acquire", lambda *a, **k: _Lost())
    with pytest.raises(BrokerUnavailable) as raised:
        list(tasks.send_runs(run_ids, app))
    return str(raised.value)


def _status(app: App, run_id: str) -> str:
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None
        return run.status


def test_an_interrupted_run_left_unsent_is_not_said_to_have_failed(
        sqlite_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    made = service.create_runs(sqlite_app, [Scope("unsent-a"), Scope("unsent-b")],
                               trigger="beat")
    first, second = made[Scope("unsent-a")], made[Scope("unsent-b")]
    assert first is not None and second is not None
    with sqlite_app.uow() as uow:
        uow.runs.set_status(first, RunStatus.INTERRUPTED.value)
        uow.commit()
    error = _send(sqlite_app, [first, second], monkeypatch)
    assert f"run {first} was not sent and stays as it is for the gate check" in error
    assert "failed unsent" not in error
    assert _status(sqlite_app, first) == RunStatus.INTERRUPTED.value
    assert service.abandon_run(sqlite_app, first, "could not enqueue") is False


def test_a_queued_run_left_unsent_failed(sqlite_app: App,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = service.create_run(sqlite_app, Scope("unsent-c"), trigger="beat")
    assert run_id is not None
    assert f"run {run_id} failed unsent" in _send(sqlite_app, [run_id], monkeypatch)
    assert _status(sqlite_app, run_id) == RunStatus.FAILED.value
