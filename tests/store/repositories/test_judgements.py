"""Verdict memory's writes (``JudgementRepository``) on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

from tests.support.factories import add_notes
from tests.support.sql import before_first
from worker.app import App
from worker.domain.types import Scope
from worker.host.fusion import keep_apart


def test_two_hosts_keeping_the_same_notes_apart_at_once_both_succeed(app: App) -> None:
    """The verdict memory looked for the fingerprint, then inserted it: a second keep-apart of
    the same notes committed in between made the first fail on the unique fingerprint (a
    traceback, the API a 500). The insert itself now keeps the first writer's row.

    The second host starts just before the first inserts. On SQLite it commits before the
    first goes on; on PostgreSQL a keep-apart holds its scope's lock, so the second waits for
    the first's commit and finds its row (joined only after the first returned)."""
    add_notes(app, {"id": "n1", "content": "User drinks green tea"},
              {"id": "n2", "content": "User drinks black tea"})
    outcome: list[object] = []

    def second_host() -> None:
        try:
            outcome.append(keep_apart(app, ["n1", "n2"]))
        except Exception as exc:  # noqa: BLE001 (the assertion below names it)
            outcome.append(exc)

    second = threading.Thread(target=second_host)

    def land() -> None:
        second.start()
        if app.engine.dialect.name != "postgresql":
            second.join(timeout=60)

    with before_first(app, "INSERT INTO judgements", land):
        first = keep_apart(app, ["n2", "n1"])
    second.join(timeout=60)
    assert not second.is_alive()
    assert [type(o) for o in outcome] == [type(first)], outcome
    with app.uow() as uow:
        assert len(uow.judgements.of_kinds(Scope("agent-1"), ["keep_apart"])) == 1
