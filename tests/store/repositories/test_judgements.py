"""Verdict memory's writes (``JudgementRepository``) on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

from sqlalchemy import select

from tests.support.factories import NOW, add_notes
from tests.support.safety import run_row
from tests.support.sql import before_first
from worker.app import App
from worker.domain.types import RunStatus, Scope
from worker.host.fusion import keep_apart
from worker.store.models import JudgementRow


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


def test_forget_deletes_only_other_runs_rows_of_run_kinds_while_the_lease_holds(app: App) -> None:
    """``forget`` is given every row's id: it deletes the other run's pair verdict and nothing
    a person decided (a keep-apart, a decline without a run) nor the run's own row; and a run
    that lost its lease deletes nothing."""
    scope = Scope("agent-1")
    earlier, mine = run_row(app, scope), run_row(app, scope, RunStatus.RUNNING.value)
    with app.uow() as uow:
        row = uow.runs.get(mine)
        assert row is not None
        epoch = row.lease_epoch
        for kind, by in (("pair", earlier), ("keep_apart", earlier), ("pair", None),
                         ("declined_apart", earlier), ("pair", mine)):
            uow.judgements.record(scope, kind, f"{kind}-{by}", ["a", "b"], "v", None, by, NOW)
        uow.commit()

    def remaining() -> list[tuple[str, str | None]]:
        with app.uow() as uow:
            rows = uow.session.execute(select(JudgementRow.kind, JudgementRow.run_id)
                                       .order_by(JudgementRow.id)).all()
        return [(r.kind, r.run_id) for r in rows]

    every = remaining()
    with app.uow() as uow:
        ids = list(uow.session.scalars(select(JudgementRow.id)))
        assert uow.judgements.forget(scope, ids, mine, epoch + 1) == 0  # a lost lease
        assert uow.judgements.forget(Scope("agent-2"), ids, mine, epoch) == 0  # another scope
        assert uow.judgements.forget(scope, ids, mine, epoch) == 1
        uow.commit()
    assert remaining() == [r for r in every if r != ("pair", earlier)]
