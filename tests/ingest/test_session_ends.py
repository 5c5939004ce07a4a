"""A session recorded as it starts, and again with its end once it ends: the end is recorded
(before, the line was "already present" and the end dropped, so the gate's idle wait took the
conversation for over and dreamed in the middle of it). Another end than the stored one is
refused, nothing changed; `dream sessions add` says when it added nothing. SQLite and
PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from tests.cli.test_commands import dream, one_error_line, url_of
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.ingest import import_sessions
from worker.ingest.jsonl import InputError
from worker.runs import service
from worker.runs.gate import GateRule
from worker.store.models import SessionRow

SCOPE = Scope("talking-bot", "alice")


def _line(started: datetime, ended: datetime | None = None, **extra: str) -> str:
    return json.dumps({"agent_id": SCOPE.agent_id, "user_id": SCOPE.user_id,
                       "started_at": started.isoformat(),
                       "ended_at": ended.isoformat() if ended else None, **extra})


def _stored_end(app: App, session_id: str) -> datetime | None:
    with app.uow() as uow:
        return uow.sessions.ends([session_id])[session_id]


def test_a_later_line_records_the_end_of_a_session_stored_without_one(app: App) -> None:
    started = utcnow() - timedelta(minutes=30)
    assert import_sessions(app, [_line(started, id="s1")]).inserted == 1
    ended = started + timedelta(minutes=20)
    result = import_sessions(app, [_line(started, ended, id="s1")])
    assert (result.inserted, result.ended, result.duplicates) == (0, 1, 0)
    assert _stored_end(app, "s1") == ended
    again = import_sessions(app, [_line(started, ended, id="s1")])  # idempotent
    assert (again.inserted, again.ended, again.duplicates) == (0, 0, 1)


def test_the_gate_waits_for_idle_from_the_recorded_end(app: App) -> None:
    """Idle wait of 30 min: four sessions long ago and one that started an hour ago and is
    still going on; its end, recorded five minutes ago, holds the scope as active."""
    from tests.support.factories import add_entities

    add_entities(app, {"kind": "agent", "id": SCOPE.agent_id, "gate_idle_minutes": 30})
    now = utcnow()
    import_sessions(app, [_line(now - timedelta(days=2, minutes=i)) for i in range(4)])
    started = now - timedelta(hours=1)
    import_sessions(app, [_line(started)])
    assert service.scope_gate(app, SCOPE, now=now).rule is GateRule.DUE
    import_sessions(app, [_line(started, now - timedelta(minutes=5))], present=now)
    assert service.scope_gate(app, SCOPE, now=now).rule is GateRule.WAITING_FOR_IDLE


def test_another_end_than_the_stored_one_is_refused_and_nothing_changes(app: App) -> None:
    started = utcnow() - timedelta(hours=2)
    ended = started + timedelta(minutes=10)
    import_sessions(app, [_line(started, ended, id="s1"), _line(started + timedelta(minutes=1),
                                                                 id="s2")])
    with pytest.raises(InputError, match=r"^line 2: session 's1' already ended at .*; give the "
                                         r"end it has, or leave ended_at out$"):
        import_sessions(app, [_line(started + timedelta(minutes=1), ended, id="s2"),
                              _line(started, ended + timedelta(minutes=1), id="s1")])
    assert _stored_end(app, "s1") == ended and _stored_end(app, "s2") is None


def test_an_end_ahead_of_the_present_is_refused_without_a_cli_clock(app: App) -> None:
    started = utcnow() - timedelta(hours=2)
    import_sessions(app, [_line(started, id="s1")])
    with pytest.raises(InputError, match="later than the present time"):
        import_sessions(app, [_line(started, utcnow() + timedelta(hours=3), id="s1")])
    assert _stored_end(app, "s1") is None


def test_sessions_add_records_an_end_and_says_when_it_added_nothing(app: App) -> None:
    at = "2026-03-01T10:00:00+00:00"
    args = ("sessions", "add", "--agent", "a1", "--user", "u1", "--at", at)
    first = dream(url_of(app), *args)
    assert first.stdout.strip() == f'session recorded for ["a1","u1",null] at {at}'
    same = dream(url_of(app), *args)
    assert same.exit_code == 0
    assert same.stdout.strip() == (f'session already present for ["a1","u1",null] at {at}; '
                                   "nothing added")
    ended = dream(url_of(app), *args, "--ended-at", "2026-03-01T10:40:00Z")
    assert ended.stdout.strip() == (f'session end recorded for ["a1","u1",null] at {at}: '
                                    "ended 2026-03-01T10:40:00+00:00")
    other = dream(url_of(app), *args, "--ended-at", "2026-03-01T10:50:00Z")
    assert "already ended at 2026-03-01T10:40:00+00:00" in one_error_line(other)


def test_sessions_add_refusals_name_the_options_typed_not_a_line_or_an_id(app: App) -> None:
    """A new user's report: `dream sessions add` said `line 1: ended_at … before started_at` and
    `session '<a derived uuid>' already ended`: a file's words for one command line. Its
    refusals name --at and --ended-at, no line number, no generated id; nothing changes."""
    at = "2026-03-01T10:00:00+00:00"
    args = ("sessions", "add", "--agent", "a1", "--at", at)
    before = one_error_line(dream(url_of(app), *args, "--ended-at", "2026-03-01T09:00:00Z"))
    assert before == ("error: --ended-at 2026-03-01T09:00:00+00:00 is before --at "
                      f"{at}; give the time the session ended, or leave --ended-at out")
    assert dream(url_of(app), *args, "--ended-at", "2026-03-01T10:40:00Z").exit_code == 0
    other = one_error_line(dream(url_of(app), *args, "--ended-at", "2026-03-01T10:50:00Z"))
    assert other == (f'error: the session of ["a1",null,null] that started at {at} (--at) '
                     "already ended at 2026-03-01T10:40:00+00:00, not 2026-03-01T10:50:00+00:00 "
                     "(--ended-at); give the end it has, or leave --ended-at out")
    with app.uow() as uow:
        rows = uow.session.execute(select(SessionRow.ended_at)).scalars().all()
    assert [r and r.replace(tzinfo=None) for r in rows] == [datetime(2026, 3, 1, 10, 40)]
