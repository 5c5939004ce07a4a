"""Archive on SQLite and PostgreSQL: expiry, per-agent retention, protection, examples."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from tests.support.factories import NOW, add_entities, add_notes, days_ago
from worker.app import App
from worker.domain.types import Scope
from worker.ingest import import_examples
from worker.reporting import run_tree, step_notes
from worker.runs import service
from worker.store.models import ExampleRow, NoteRow, OperationLogRow

SCOPE = Scope("agent-1")


def _run(app: App, scope: Scope = SCOPE) -> str:
    run_id = service.create_run(app, scope, force=True, clock=NOW, phases=["archive"])
    assert run_id
    service.execute_run(app, run_id)
    return run_id


def _status(app: App, model: Any = NoteRow) -> dict[str, str]:
    with app.uow() as uow:
        return {r.id: r.status for r in uow.session.scalars(select(model))}


def _output(app: App, run_id: str) -> dict[str, Any]:
    out: dict[str, Any] = next(
        s for s in run_tree(app, run_id)["steps"] if s["phase"] == "archive")["output"]
    return out


def _examples(app: App, *examples: dict[str, Any]) -> None:
    import_examples(app, [json.dumps({"agent_id": "agent-1", "input": "q", "output": "a", **e})
                          for e in examples])


def test_expired_note_is_archived(app: App) -> None:
    """An auto-generated active note past expires_at is archived with the expiry date as reason."""
    add_notes(app, {"id": "n1", "content": "sale ends Friday", "expires_at": days_ago(1),
                    "last_accessed_at": days_ago(0)})
    run_id = _run(app)
    assert _status(app) == {"n1": "archived"}
    with app.uow() as uow:
        row = uow.session.get(NoteRow, "n1")
        assert row is not None and row.comments == (
            "archived by archive on 2026-06-01: expired on 2026-05-31")
    assert _output(app, run_id) == {
        "notes_expired": 1, "notes_stale": 0, "examples_expired": 0, "examples_stale": 0,
        "protected_preserved": 0, "manual_preserved": 0,
        "examples_manual_preserved": 0}


@pytest.mark.parametrize(("days", "expected"), [(91, "archived"), (89, "active")])
def test_inactivity_past_default_retention(app: App, days: int, expected: str) -> None:
    """Default retention 90 days (agent not in the registry): 91 days unused → archived, 89 → kept."""
    add_notes(app, {"id": "n1", "content": "old fact", "created_at": days_ago(400),
                    "last_accessed_at": days_ago(days)})
    _run(app)
    assert _status(app) == {"n1": expected}


def test_never_accessed_counts_from_creation(app: App) -> None:
    """A note never accessed is idle since created_at (in a scope whose host records reads:
    ``new`` was read two days ago)."""
    add_notes(app, {"id": "old", "content": "a", "created_at": days_ago(91)},
              {"id": "new", "content": "b", "created_at": days_ago(10),
               "last_accessed_at": days_ago(2)})
    _run(app)
    assert _status(app) == {"old": "archived", "new": "active"}


def test_a_scope_with_no_read_recorded_archives_nothing_for_disuse(app: App) -> None:
    """No note of the scope has a read (a host that does not report reads): a 400-day-old
    note is not archived as unused, it is counted kept (``unread_preserved``) and named under
    the preserved step; an expired note still goes."""
    add_notes(app, {"id": "old", "content": "a", "created_at": days_ago(400)},
              {"id": "gone", "content": "b", "created_at": days_ago(400),
               "expires_at": days_ago(1)})
    run_id = _run(app)
    assert _status(app) == {"old": "active", "gone": "archived"}
    out = _output(app, run_id)
    assert (out["unread_preserved"], out["notes_stale"], out["notes_expired"]) == (1, 0, 1)
    step = next(s for s in run_tree(app, run_id)["steps"] if s["phase"] == "archive")
    (kept,) = [c for c in step["children"] if c["name"] == "preserved"]
    assert kept["output"]["unread"] == ["old"] and step_notes(kept) == ("kept", ["old"])


def test_a_note_read_on_no_recorded_date_is_not_archived_for_disuse(app: App) -> None:
    """A note the host counts reads of (``access_count``) but never dated: when it was last
    read is unknown, and unknown is not idle, so 200 days after its writing it stays (before,
    it counted as idle since its creation and a current fact was archived). A note last read
    200 days ago still goes, and so does an expired one with undated reads."""
    add_notes(app, {"id": "counted", "content": "a", "created_at": days_ago(200),
                    "access_count": 3},
              {"id": "dated", "content": "b", "created_at": days_ago(210),
               "access_count": 1, "last_accessed_at": days_ago(200)},
              {"id": "expired", "content": "c", "created_at": days_ago(200),
               "access_count": 3, "expires_at": days_ago(1)})
    run_id = _run(app)
    assert _status(app) == {"counted": "active", "dated": "archived", "expired": "archived"}
    out = _output(app, run_id)
    assert (out["notes_stale"], out["notes_expired"]) == (1, 1)


def test_manual_note_is_never_archived(app: App) -> None:
    """A manual note unused for 400 days and past expiry stays active and is counted as preserved."""
    add_notes(app, {"id": "m", "content": "a", "is_auto_generated": False,
                    "created_at": days_ago(500), "last_accessed_at": days_ago(400),
                    "expires_at": days_ago(5)})
    run_id = _run(app)
    assert _status(app) == {"m": "active"}
    assert _output(app, run_id)["manual_preserved"] == 1


def test_protected_only_after_a_year_and_immutable_never(app: App) -> None:
    """Protected notes archive only after 365 days unused; immutable ones never (R23)."""
    add_notes(app,
              {"id": "p200", "content": "a", "protection": "protected", "created_at": days_ago(200)},
              {"id": "p400", "content": "b", "protection": "protected", "created_at": days_ago(400)},
              {"id": "i", "content": "c", "protection": "immutable", "created_at": days_ago(900),
               "access_count": 1, "last_accessed_at": days_ago(800)})  # the host records reads
    run_id = _run(app)
    assert _status(app) == {"p200": "active", "p400": "archived", "i": "active"}
    out = _output(app, run_id)
    assert (out["protected_preserved"], out["notes_stale"]) == (2, 1)


def test_per_agent_retention(app: App) -> None:
    """Each agent's note_retention_days decides: 30 days for one agent, 200 for another."""
    add_entities(app, {"kind": "agent", "id": "short", "note_retention_days": 30},
                 {"kind": "agent", "id": "long", "note_retention_days": 200})
    add_notes(app, {"agent_id": "short", "id": "s", "content": "a", "created_at": days_ago(45),
                    "access_count": 1, "last_accessed_at": days_ago(40)},
              {"agent_id": "long", "id": "l", "content": "a", "created_at": days_ago(150),
               "access_count": 1, "last_accessed_at": days_ago(140)})
    _run(app, Scope("short"))
    _run(app, Scope("long"))
    assert _status(app) == {"s": "archived", "l": "active"}


def test_auto_archive_disabled_archives_nothing(app: App) -> None:
    """auto_archive_enabled=false: nothing of that agent is archived, and the step says why."""
    add_entities(app, {"kind": "agent", "id": "agent-1", "auto_archive_enabled": False})
    add_notes(app, {"id": "n1", "content": "a", "created_at": days_ago(400),
                    "expires_at": days_ago(1)})
    _examples(app, {"id": "e1", "success_score": 10, "created_at": days_ago(400)})
    run_id = _run(app)
    assert _status(app) == {"n1": "active"}
    assert _status(app, ExampleRow) == {"e1": "active"}
    step = next(s for s in run_tree(app, run_id)["steps"] if s["phase"] == "archive")
    assert step["status"] == "skipped" and "auto-archive is disabled" in step["output"]["reason"]


def test_examples_by_score_age_and_expiry(app: App) -> None:
    """Score 40 after 181 days → archived; 60 → kept; 40 after 100 days → kept; expired → archived;
    40 after 400 days but used (an access count, the date unknown) → kept."""
    _examples(app,
              {"id": "low-old", "success_score": 40, "created_at": days_ago(181)},
              {"id": "low-used", "success_score": 40, "created_at": days_ago(400),
               "access_count": 2},
              {"id": "good-old", "success_score": 60, "created_at": days_ago(181)},
              {"id": "low-recent", "success_score": 40, "created_at": days_ago(300),
               "last_accessed_at": days_ago(100)},
              {"id": "manual-low", "success_score": 10, "is_auto_generated": False,
               "created_at": days_ago(400)},
              {"id": "expired", "success_score": 90, "expires_at": days_ago(1)})
    run_id = _run(app)
    assert _status(app, ExampleRow) == {"low-old": "archived", "low-used": "active",
                                        "good-old": "active", "low-recent": "active", "manual-low": "active",
                                        "expired": "archived"}
    out = _output(app, run_id)
    assert (out["examples_stale"], out["examples_expired"]) == (1, 1)
    with app.uow() as uow:
        logs = uow.session.scalars(select(OperationLogRow).where(
            OperationLogRow.run_id == run_id)).all()
    assert sorted((entry.entity, entry.entity_id) for entry in logs) == [
        ("example", "expired"), ("example", "low-old")]


def test_archive_skips_a_note_the_host_changed(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """R10: a note whose version moved between the phase's load and its write is not archived
    and gets no log row; the other expired note of the same write still goes."""
    import worker.phases.archive.service as archive_service

    add_notes(app, {"id": "n1", "content": "a", "created_at": days_ago(400)},
              {"id": "n2", "content": "b", "created_at": days_ago(400), "access_count": 1,
               "last_accessed_at": days_ago(300)})
    original = archive_service._apply

    def host_writes_first(*args: Any, **kwargs: Any) -> Any:
        with app.uow() as uow:
            uow.session.execute(update(NoteRow).where(NoteRow.id == "n1")
                                .values(content="a, edited", version=NoteRow.version + 1))
            uow.commit()
        return original(*args, **kwargs)

    monkeypatch.setattr(archive_service, "_apply", host_writes_first)
    run_id = _run(app)
    assert _status(app) == {"n1": "active", "n2": "archived"}
    with app.uow() as uow:
        logged = {e.entity_id for e in uow.session.scalars(select(OperationLogRow).where(
            OperationLogRow.run_id == run_id))}
    assert logged == {"n2"}


@pytest.mark.parametrize("host", [{"success_score": 95}, {"last_accessed_at": "now"},
                                  {"expires_at": "renewed"}, {"is_auto_generated": False}])
def test_an_example_the_host_moved_after_the_load_is_not_archived(
        app: App, monkeypatch: pytest.MonkeyPatch, host: dict[str, Any]) -> None:
    """A host re-scores, uses, renews or takes over an example between the phase's load and
    its write, keeping the version: the example the plan decided on is gone, so it is skipped
    (no archive, no log row) and the others of the write still go."""
    import worker.phases.archive.service as archive_service

    _examples(app, {"id": "low-old", "success_score": 40, "created_at": days_ago(181)},
              {"id": "expired", "success_score": 90, "expires_at": days_ago(1)},
              {"id": "other", "success_score": 10, "created_at": days_ago(300)})
    (field, value), = host.items()
    target = "expired" if field == "expires_at" else "low-old"
    value = {"now": NOW, "renewed": NOW + timedelta(days=30)}.get(value, value)
    original = archive_service._apply

    def host_writes_first(*args: Any, **kwargs: Any) -> Any:
        with app.uow() as uow:
            uow.session.execute(update(ExampleRow).where(ExampleRow.id == target)
                                .values(**{field: value}))
            uow.commit()
        return original(*args, **kwargs)

    monkeypatch.setattr(archive_service, "_apply", host_writes_first)
    run_id = _run(app)
    expected = {"low-old": "archived", "expired": "archived", "other": "archived"}
    expected[target] = "active"
    assert _status(app, ExampleRow) == expected
    with app.uow() as uow:
        logged = {e.entity_id for e in uow.session.scalars(select(OperationLogRow).where(
            OperationLogRow.run_id == run_id))}
    assert logged == {k for k, v in expected.items() if v == "archived"}


def test_archive_review_lets_the_model_keep_important_notes(app: App) -> None:
    """archive.review=llm: only high-importance stale notes are asked; "keep" keeps them."""
    from tests.phases.prune.test_service import KeepEverything

    add_notes(app, {"id": "hi", "content": "allergic to nuts", "importance": 0.9,
                    "created_at": days_ago(120), "access_count": 1,
                    "last_accessed_at": days_ago(110)},
              {"id": "lo", "content": "liked the blue theme", "importance": 0.2,
               "created_at": days_ago(120), "access_count": 1,
               "last_accessed_at": days_ago(110)})
    app.settings.archive.review = "llm"
    app.llm = llm = KeepEverything()
    run_id = _run(app)
    assert _status(app) == {"hi": "active", "lo": "archived"}
    assert llm.asked == [["hi"]]
    step = next(s for s in run_tree(app, run_id)["steps"] if s["phase"] == "archive")
    assert step["tokens_in"] > 0
    assert any(c["prompt_name"] == "archive" for c in step["children"])


@pytest.mark.parametrize("phase", ["prune", "archive"])
def test_a_review_the_budget_left_unasked_counts_no_model_call(app: App, phase: str) -> None:
    """With the run's call budget spent before the keep-review, its step names no model and
    the run counts no call: a review step that named the configured model counted as a call,
    so a budget of 0 read "model budget exhausted (2 of 0 model calls)" with none made, and
    ``/metrics`` and the totals counted calls of phases that asked nothing (audit, 7 Dec)."""
    from tests.phases.prune.test_service import KeepEverything

    add_entities(app, {"kind": "conversation", "id": "c-gone", "deleted_at": days_ago(1)})
    add_notes(app, {"id": "old", "content": "allergic to nuts", "importance": 0.9,
                    "created_at": days_ago(120), "access_count": 1,
                    "last_accessed_at": days_ago(110)},
              {"id": "orphan", "content": "liked the blue theme",
               "source_conversation_id": "c-gone", "created_at": days_ago(3)},
              {"id": "read", "content": "uses a standing desk", "access_count": 1,
               "created_at": days_ago(3), "last_accessed_at": days_ago(1)})
    getattr(app.settings, phase).review = "llm"
    app.settings.budget.max_calls_per_run = 0
    app.llm = llm = KeepEverything()
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW, phases=[phase])
    assert run_id
    service.execute_run(app, run_id)
    assert llm.asked == []
    step = next(s for s in run_tree(app, run_id)["steps"] if s["phase"] == phase)
    reviews = [c for c in step["children"] if c["prompt_name"] == phase]
    assert reviews and all(c["model"] is None for c in reviews), reviews
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.totals is not None
        assert run.totals["model_calls"] == 0, run.totals
