"""Pooled PostgreSQL connections: pinged only after sitting idle, a dead one replaced; a unit of
work that only read ends with COMMIT (the driver keeps its prepared statements)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, event, insert, select, text

import worker.store.db as db
from worker.app import App
from worker.store.models import AgentRow

pytestmark = pytest.mark.postgres


def _backend_pid(app: App) -> int:
    with app.engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _counting_pings(app: App, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    pings: list[Any] = []
    real = app.engine.dialect.do_ping

    def counted(dbapi_conn: Any) -> bool:
        pings.append(dbapi_conn)
        return real(dbapi_conn)

    monkeypatch.setattr(app.engine.dialect, "do_ping", counted)
    return pings


def test_a_connection_back_a_moment_ago_is_handed_out_without_a_ping(
        pg_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    pings = _counting_pings(pg_app, monkeypatch)
    first = _backend_pid(pg_app)
    assert [_backend_pid(pg_app) for _ in range(3)] == [first] * 3  # the same pooled connection
    assert pings == []
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 0.0)  # now every return counts as idle
    assert _backend_pid(pg_app) == first
    assert len(pings) == 1


def test_a_pooled_connection_that_died_while_idle_is_replaced(
        pg_app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = _backend_pid(pg_app)
    admin = create_engine(pg_app.engine.url)
    with admin.begin() as conn:  # the server ends it, as a restart or an idle timeout would
        assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": dead}).scalar_one()
    admin.dispose()
    monkeypatch.setattr(db, "PING_AFTER_IDLE_SECONDS", 0.0)
    assert _backend_pid(pg_app) != dead  # no error reached the caller: a new connection


def _ends(app: App) -> list[str]:
    ended: list[str] = []
    event.listen(app.engine, "commit", lambda _conn: ended.append("commit"))
    event.listen(app.engine, "rollback", lambda _conn: ended.append("rollback"))
    return ended


def test_a_unit_that_only_read_ends_with_commit_and_keeps_prepared_statements(pg_app: App) -> None:
    """psycopg deallocates every prepared statement on ROLLBACK: a read-only unit commits."""
    ended = _ends(pg_app)
    for _ in range(8):  # past psycopg's prepare threshold (5 executions of one query)
        with pg_app.uow() as uow:
            uow.session.execute(select(AgentRow.id).where(AgentRow.id == "a1")).all()
    assert ended == ["commit"] * 8
    with pg_app.engine.connect() as conn:
        prepared = conn.execute(text("SELECT count(*) FROM pg_prepared_statements")).scalar_one()
    assert prepared >= 1


def test_a_unit_that_wrote_and_did_not_commit_still_rolls_back(pg_app: App) -> None:
    ended = _ends(pg_app)
    with pg_app.uow() as uow:
        uow.session.execute(insert(AgentRow).values(id="a1", name="a1"))
        uow.session.execute(select(AgentRow.id)).all()  # a read after the write: still a write
    assert ended == ["rollback"]
    with pg_app.uow() as uow:
        assert uow.entities.agent("a1") is None


def test_every_connection_plans_statements_for_their_own_values(pg_app: App) -> None:
    """A prepared look-up of a chunk of ids under one generic plan took 0.3-0.5 s where its own
    plan took ~10 ms: each connection is set to custom plans, outside any transaction, so a
    unit that rolls back does not take the setting back with it."""
    with pg_app.uow() as uow:
        uow.session.execute(insert(AgentRow).values(id="a1", name="a1"))
        uow.session.rollback()
        mode = uow.session.execute(text("SHOW plan_cache_mode")).scalar_one()
    assert mode == "force_custom_plan"
    with pg_app.engine.connect() as conn:
        for _ in range(7):  # past psycopg's prepare threshold: the server keeps the statement
            conn.execute(select(AgentRow.id).where(AgentRow.id.in_([f"a{i}" for i in range(20)])))
        plans = conn.execute(text(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%agents.id IN%'")).one()
    assert plans.generic_plans == 0 and plans.custom_plans >= 2


def test_a_database_error_never_carries_the_statements_values(app: App) -> None:
    """A failed insert's message names the statement, not its parameters (a note's text would
    reach a task's log, a trace or an error reply with it)."""
    from sqlalchemy.exc import IntegrityError

    secret = "the user's door code is 4471"
    row = {"id": "a-1", "name": secret}
    with pytest.raises(IntegrityError) as failed, app.uow() as uow:
        uow.session.execute(insert(AgentRow), [row])
        uow.session.execute(insert(AgentRow), [row])
    assert secret not in str(failed.value)
    assert "hidden" in str(failed.value)
