"""Verdict memory's writes (``JudgementRepository``) on SQLite and PostgreSQL."""

from __future__ import annotations

from tests.support.factories import add_notes
from tests.support.sql import before_first
from worker.app import App
from worker.domain.types import Scope
from worker.host.fusion import keep_apart


def test_two_hosts_keeping_the_same_notes_apart_at_once_both_succeed(app: App) -> None:
    """The verdict memory looked for the fingerprint, then inserted it: a second keep-apart of
    the same notes committed in between made the first fail on the unique fingerprint (a
    traceback, the API a 500). The insert itself now keeps the first writer's row."""
    add_notes(app, {"id": "n1", "content": "User drinks green tea"},
              {"id": "n2", "content": "User drinks black tea"})
    with before_first(app, "INSERT INTO judgements", lambda: keep_apart(app, ["n1", "n2"])):
        keep_apart(app, ["n2", "n1"])
    with app.uow() as uow:
        assert len(uow.judgements.of_kinds(Scope("agent-1"), ["keep_apart"])) == 1
