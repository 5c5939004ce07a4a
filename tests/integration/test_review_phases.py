"""Apply modes inside the phases: contradictions' revocations proposed and approved equal an
auto run; safe_auto applies what the rules settle; undoing a propose run withdraws its items."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import make_sqlite_app
from tests.support.factories import add_entities, add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.review.service import Selector, approve, list_items
from worker.runs.service import create_run, execute_run
from worker.safety.undo import undo_run
from worker.store.models import NoteRow

SCOPE = Scope("agent-1")
NOTES = [
    {"id": "tea-1", "content": "Prefers green tea."},
    {"id": "tea-2", "content": "Prefers green tea in the morning."},
    {"id": "old-1", "content": "Is on call this week.", "expires_at": "2001-01-01T00:00:00+00:00"},
    {"id": "keep-1", "content": "Works on the billing service."},
]


def _store(tmp_path: Path, name: str, **settings: Any) -> App:
    (tmp_path / name).mkdir()
    app = make_sqlite_app(tmp_path / name, **settings)
    add_notes(app, *NOTES)
    return app


def _dream(app: App, phases: list[str] | None = None) -> str:
    run_id = create_run(app, SCOPE, force=True, phases=phases)
    assert run_id is not None
    execute_run(app, run_id)
    return run_id


def _state(app: App) -> dict[str, tuple[Any, ...]]:
    with app.uow() as uow:
        rows = uow.session.query(NoteRow).all()
        return {r.id: (r.status, r.content, r.consolidated_into_id) for r in rows}


def test_contradictions_revocation_proposed_then_approved_equals_auto(tmp_path: Path) -> None:
    """Contradictions alone: the rule judge finds tea-1 contained in tea-2; in propose mode that
    revocation is an item (relation, winner, confidence) and approving it gives auto's state."""
    auto = _store(tmp_path, "auto")
    review = _store(tmp_path, "review", apply_mode="propose")
    try:
        _dream(auto, ["contradictions"])
        before = _state(review)
        run_id = _dream(review, ["contradictions"])
        assert _state(review) == before
        (item,) = list_items(review, SCOPE, run_id=run_id)
        assert item["kind"] == "revoke" and item["note_ids"] == ["tea-1", "tea-2"]
        assert item["payload"]["winner"] == "tea-2" and item["confidence"] == 1.0
        assert item["relation"]
        (done,) = approve(review, SCOPE, Selector(item_id=item["id"]), "test")
        assert done.status == "approved"
        assert _state(review) == _state(auto) != before
    finally:
        auto.dispose()
        review.dispose()


def test_safe_auto_applies_what_rules_settle(tmp_path: Path) -> None:
    """With the rule judge every decision is settled by rules: safe_auto equals auto, no items."""
    auto = _store(tmp_path, "auto")
    safe = _store(tmp_path, "safe", apply_mode="safe_auto")
    try:
        _dream(auto)
        run_id = _dream(safe)
        assert list_items(safe, SCOPE, run_id=run_id, status=None) == []
        strip = {k: v[:2] for k, v in _state(safe).items() if k in {n["id"] for n in NOTES}}
        assert strip == {k: v[:2] for k, v in _state(auto).items()
                         if k in {n["id"] for n in NOTES}}
        assert _state(safe)["tea-1"][0] == "revoked"
    finally:
        auto.dispose()
        safe.dispose()


def test_undoing_a_propose_run_withdraws_its_items_and_frees_its_notes(tmp_path: Path) -> None:
    """Undo of the proposing run declines its open items (withdrawn); the next propose run,
    with nothing held back any more, proposes the same changes again."""
    app = _store(tmp_path, "s")
    try:
        add_entities(app, {"kind": "agent", "id": "agent-1", "apply_mode": "propose"})
        first = _dream(app)
        proposed = [(i["phase"], i["note_ids"]) for i in list_items(app, SCOPE, run_id=first)]
        assert proposed
        assert _dream(app) and not list_items(app, SCOPE, status="open")[len(proposed):]
        undo_run(app, first)
        withdrawn = list_items(app, SCOPE, run_id=first, status="declined")
        assert [i["outcome"] for i in withdrawn] == [f"withdrawn: run {first} was undone"] * len(
            proposed)
        third = _dream(app)
        assert [(i["phase"], i["note_ids"]) for i in list_items(app, SCOPE, run_id=third)] == \
            proposed
    finally:
        app.dispose()
