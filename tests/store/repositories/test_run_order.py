"""One order for lists of runs (``runs.NEWEST_FIRST``): newest first, then scope key, then id,
so runs created together by one gate check (one created_at) list the same way on every read
and on every page, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.errors import InvalidInput
from worker.reporting import list_runs, list_runs_page
from worker.runs import service
from worker.store.repositories.dashboard import DashboardQueries, ScopeFilter

# Inserted in an order that is neither the scope keys' nor their reverse.
BATCHES = (["agent-m", "agent-z"], ["agent-a", "agent-q"], ["agent-f"])


def _created_together(app: App) -> list[str]:
    """Five runs with one created_at, made by three bulk inserts; their ids in scope-key order."""
    now = utcnow()
    made: dict[str, str] = {}
    for batch in BATCHES:
        with app.uow() as uow:
            made |= uow.runs.create_many([Scope(a) for a in batch], now=now, trigger="beat",
                                         phases=[])
            uow.commit()
    return [made[Scope(a).key] for a in sorted(a for batch in BATCHES for a in batch)]


def test_runs_created_together_list_by_scope_key_on_every_read(app: App) -> None:
    """Runs sharing a created_at came back in whatever order the database scanned them (on
    PostgreSQL not even the same from one read to the next). Now a later run comes first, then
    the runs created together by scope key, the same on every read; runs waiting for an
    executor go oldest first, in the same scope-key order (what `dream run --due` executes)."""
    together = _created_together(app)
    later = service.create_runs(app, [Scope("agent-b")], trigger="beat")[Scope("agent-b")]
    first = [r["id"] for r in list_runs(app, limit=50)]
    assert first == [later, *together]
    assert all([r["id"] for r in list_runs(app, limit=50)] == first for _ in range(5))
    assert [r["id"] for r in list_runs(app, limit=3)] == first[:3]
    assert service.unclaimed_runs(app) == [*together, later]


def test_pages_of_runs_created_together_neither_skip_nor_repeat(app: App) -> None:
    """The dashboard pages runs by offset: with ties broken by nothing but the scan, a run
    could show on two pages and another on none. Now the pages, read in turn, give every run
    once, in the list's own order."""
    together = _created_together(app)
    with app.uow() as uow:
        older = uow.runs.create_many([Scope("agent-old")], now=utcnow() - timedelta(hours=1),
                                     trigger="beat", phases=[])
        uow.commit()
    expected = [*together, older[Scope("agent-old").key]]
    paged: list[str] = []
    for offset in range(0, 6, 2):
        with app.uow() as uow:
            page, total = DashboardQueries(uow.session).runs_page(ScopeFilter(), offset, 2)
        assert total == 6
        paged += [run.id for run, _ in page]
    assert paged == expected == [r["id"] for r in list_runs(app, limit=50)]


def test_pages_by_cursor_give_every_run_once_while_runs_are_created(app: App) -> None:
    """``list_runs_page`` with ``after``: the ties of one created_at are split across pages and a run
    created between two reads shifts no page (an offset would show a run twice)."""
    together = _created_together(app)
    with app.uow() as uow:
        older = uow.runs.create_many([Scope("agent-old")], now=utcnow() - timedelta(hours=1),
                                     trigger="beat", phases=[])
        uow.commit()
    paged: list[str] = []
    page = list_runs_page(app, limit=2)
    while True:
        paged += [r["id"] for r in page["runs"]]
        if page["next"] is None:
            break
        assert page["next"] == paged[-1]
        service.create_runs(app, [Scope(f"agent-new-{len(paged)}")], trigger="beat")
        page = list_runs_page(app, limit=2, after=page["next"])
    assert paged == [*together, older[Scope("agent-old").key]]


def test_a_cursor_from_outside_the_listing_is_refused(app: App) -> None:
    """A cursor that is no run of the filtered listing (another agent's run, an unknown id) is
    one line naming ``after``, the same for both: it tells no one another scope's run exists."""
    ids = service.create_runs(app, [Scope("agent-a"), Scope("agent-b")], trigger="beat")
    mine = {"agent_id": "agent-a"}
    answers = []
    for after in (ids[Scope("agent-b")], "no-such-run"):
        assert after is not None
        with pytest.raises(InvalidInput) as caught:
            list_runs_page(app, within=mine, after=after)
        answers.append(str(caught.value).replace(after, "ID"))
    assert answers[0] == answers[1] and answers[0].startswith("after: ")
    assert list_runs_page(app, within=mine, after=ids[Scope("agent-a")]) == {"runs": [], "next": None}
