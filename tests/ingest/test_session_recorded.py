"""A session line's ``recorded_at`` (what `dream sessions export` writes: when its store recorded
it, the time the gate counts it from): kept by an import into a store that has not dreamed
since, replaced by the import's time where a dream of the store began after it (that dream
never saw the session), refused when after the present or before the session started, nothing
written. Before, the field was neither exported nor accepted. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from tests.cli.test_commands import dream, one_error_line, url_of
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.export import export_records
from worker.ingest import import_sessions
from worker.ingest.jsonl import InputError
from worker.runs import service
from worker.store.models import SessionRow

SCOPE = Scope("talking-bot", "alice")


def _line(started: datetime, recorded: datetime, session_id: str = "s1") -> str:
    return json.dumps({"id": session_id, "agent_id": SCOPE.agent_id, "user_id": SCOPE.user_id,
                       "started_at": started.isoformat(), "recorded_at": recorded.isoformat()})


def _recorded(app: App, session_id: str = "s1") -> datetime:
    with app.uow() as uow:
        at = uow.session.scalar(select(SessionRow.recorded_at).where(SessionRow.id == session_id))
    assert at is not None
    return at


def _pending(app: App) -> int:
    """The sessions the gate counts toward the scope's next dream."""
    with app.uow() as uow:
        return uow.sessions.activity_since_last_success([SCOPE.key], utcnow())[SCOPE.key][0]


def test_a_store_that_has_not_dreamed_since_keeps_the_exported_time(app: App) -> None:
    started = utcnow() - timedelta(days=3)
    recorded = started + timedelta(hours=5, microseconds=123)
    assert import_sessions(app, [_line(started, recorded)], present=utcnow()).inserted == 1
    assert _recorded(app) == recorded
    again = import_sessions(app, [_line(started, recorded)], present=utcnow())
    assert (again.inserted, again.duplicates) == (0, 1)
    assert _recorded(app) == recorded


def test_a_session_recorded_before_this_stores_last_dream_counts_toward_the_next(
        app: App) -> None:
    """The store's dream began after the exported ``recorded_at`` but never saw the session:
    kept, the session would count as spent by it, and the next dream would wait for it."""
    run_id = service.create_run(app, SCOPE, trigger="test", force=True)
    assert run_id is not None
    service.execute_run(app, run_id)
    started = utcnow() - timedelta(days=3)
    import_sessions(app, [_line(started, started + timedelta(hours=1))], present=utcnow())
    assert _recorded(app) > started + timedelta(days=2)
    assert _pending(app) == 1


@pytest.mark.parametrize(("after_start", "problem"), [
    (timedelta(days=3), "is later than the present time"),  # the present: 3 h after the start
    (timedelta(hours=-2), "is before started_at"),  # more than the clocks' skew before it
])
def test_a_recorded_at_the_session_cannot_have_is_refused(
        app: App, after_start: timedelta, problem: str) -> None:
    """Dated ahead it would count toward every dream until then; dated before the session
    started it was not recorded then. One line, nothing written."""
    now = utcnow()
    started = now - timedelta(hours=3)
    good = json.dumps({"agent_id": SCOPE.agent_id, "started_at": started.isoformat()})
    with pytest.raises(InputError, match=f"^line 2: recorded_at .* {problem}"):
        import_sessions(app, [good, _line(started, started + after_start)], present=now)
    with app.uow() as uow:
        assert uow.session.scalar(select(SessionRow.id)) is None


def test_two_lines_of_one_session_with_two_recorded_times_are_refused(app: App) -> None:
    started = utcnow() - timedelta(days=1)
    lines = [_line(started, started), _line(started, started + timedelta(seconds=1))]
    with pytest.raises(InputError, match="^line 2: session id 's1' is also the id of line 1, "
                                         "with another recorded_at"):
        import_sessions(app, lines, present=utcnow())


def test_the_cli_refuses_a_bad_recorded_at_in_one_line(app: App, tmp_path: Path) -> None:
    path = tmp_path / "sessions.jsonl"
    started = utcnow() - timedelta(days=1)
    path.write_text(json.dumps({"agent_id": "a", "started_at": started.isoformat(),
                                "recorded_at": "yesterday"}) + "\n")
    line = one_error_line(dream(url_of(app), "sessions", "import", str(path)))
    assert line.startswith("error: line 1: recorded_at: "), line
    assert dream(url_of(app), "sessions", "export").stdout == ""


def test_a_session_recorded_before_the_store_kept_the_time_exports_as_its_start(
        app: App, other: App) -> None:
    """A session from before revision 0019 (``recorded_at`` NULL), which the gate counts by its
    start alone, is written with its start as ``recorded_at``: counted the same way in the
    store it is imported to, and its export there is the same line."""
    started = utcnow() - timedelta(days=2)
    import_sessions(app, [_line(started, started)], present=utcnow())
    with app.engine.begin() as conn:
        conn.execute(update(SessionRow).values(recorded_at=None))
    lines = list(export_records(app, "sessions"))
    assert json.loads(lines[0])["recorded_at"] == started.isoformat()
    assert import_sessions(other, lines, present=utcnow()).inserted == 1
    assert list(export_records(other, "sessions")) == lines
