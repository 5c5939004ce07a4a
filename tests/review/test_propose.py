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


def _scripted(confidence: float) -> Any:
    """The scenarios' careful judge (fusions refused, opposites conflict) at one confidence."""
    from tests.integration.test_scenarios import _relation
    from tests.support.topic_judge import topic_reply
    from worker.llm.fake import FakeLLM, FakeRule

    return FakeLLM(
        rules=[FakeRule(prompt="contradictions",
                        reply=lambda _n, _s, user: topic_reply(user, _relation, confidence))],
        default={"should_consolidate": False, "content": "", "type": "Context",
                 "source_ids": [], "reason": "keep separate"}, model="scripted-review")


TOOLS = [("The billing API is built on Express", 300), ("The billing API is built on Fastify", 30),
         ("CI for the billing API runs on Jenkins", 200),
         ("CI for the billing API runs on GitHub Actions", 10)]


def _model_store(tmp_path: Path, name: str, confidence: float, **settings: Any) -> App:
    from tests.support.factories import days_ago

    (tmp_path / name).mkdir()
    app = make_sqlite_app(tmp_path / name, **settings)
    add_notes(app, *({"id": f"n{k}", "content": text, "created_at": days_ago(age),
                      "last_accessed_at": days_ago(1), "access_count": 1}
                     for k, (text, age) in enumerate(TOOLS)))
    app.llm = _scripted(confidence)
    return app


def test_safe_auto_applies_confident_model_verdicts_and_proposes_the_rest(tmp_path: Path) -> None:
    """safe_auto with the bar at 0.9: a judge answering at 0.95 is applied like auto; at 0.8
    (still above the policy's 0.7) every revocation is proposed, and approving them all gives the
    auto run's end state."""
    from tests.support.factories import NOW

    for confidence, proposed in ((0.95, False), (0.8, True)):
        tag = str(confidence).replace(".", "")
        auto = _model_store(tmp_path, f"auto{tag}", confidence)
        safe = _model_store(tmp_path, f"safe{tag}", confidence, apply_mode="safe_auto")
        try:
            for app in (auto, safe):
                run_id = create_run(app, SCOPE, force=True, clock=NOW)
                assert run_id is not None
                execute_run(app, run_id)
            items = list_items(safe, SCOPE, run_id=run_id)
            assert bool(items) is proposed
            if proposed:
                assert {i["kind"] for i in items} == {"revoke"}
                assert {i["confidence"] for i in items} == {0.8}
                assert all(n[0] == "active" for n in _state(safe).values())
                approve(safe, SCOPE, Selector(run_id=run_id), "test")
            assert _state(safe) == _state(auto)
            assert sum(v[0] == "revoked" for v in _state(auto).values()) == 2
        finally:
            auto.dispose()
            safe.dispose()


def test_a_proposed_rule_merge_leaves_no_open_candidate(tmp_path: Path) -> None:
    """The rules' merge of tea-1 into tea-2, proposed, is one note-to-be: the cluster is not
    also recorded as open for a model or the host (auto would leave nothing open either)."""
    from worker.reporting import run_tree

    app = _store(tmp_path, "s", apply_mode="propose")
    try:
        tree = run_tree(app, _dream(app, ["consolidate"]))
        (phase,) = [s for s in tree["steps"] if s["phase"] == "consolidate"]
        assert phase["output"]["clusters_proposed"] == 1
        assert phase["output"]["clusters_open"] == 0
        assert [c["output"]["verdict"] for c in phase["children"]] == ["proposed"]
    finally:
        app.dispose()


def test_notes_an_open_item_holds_are_counted_apart_from_the_runs_own(tmp_path: Path) -> None:
    """The consolidate phase counted the notes an open review item holds out of its plan as
    ``notes_skipped_same_run``, the count of notes the run itself wrote (a retried attempt's),
    so every run after a proposal read as a retry. They are ``notes_held_for_review`` now."""
    from worker.reporting import run_tree

    app = _store(tmp_path, "s", apply_mode="propose")
    try:
        _dream(app, ["consolidate"])
        tree = run_tree(app, _dream(app, ["consolidate"]))
        (phase,) = [s for s in tree["steps"] if s["phase"] == "consolidate"]
        assert phase["output"]["notes_held_for_review"] == 2  # tea-1 and tea-2
        assert "notes_skipped_same_run" not in phase["output"]
    finally:
        app.dispose()


def test_an_auto_run_after_a_propose_run_records_the_items_it_made_stale(tmp_path: Path) -> None:
    """An agent switched from propose to auto: its next run applies what the items proposed
    (open items hold nothing back in auto mode), and each item naming a note that run changed
    is recorded stale by it, in the write, not left open for an approval to find stale."""
    app = _store(tmp_path, "s")
    try:
        add_entities(app, {"kind": "agent", "id": "agent-1", "apply_mode": "propose"})
        first = _dream(app)
        proposed = list_items(app, SCOPE, run_id=first)
        assert {i["phase"] for i in proposed} == {"consolidate", "archive"}
        add_entities(app, {"kind": "agent", "id": "agent-1", "apply_mode": "auto"})
        second = _dream(app)
        assert _state(app)["tea-1"][0] != "active" and _state(app)["old-1"][0] == "archived"
        assert list_items(app, SCOPE, status="open") == []
        stale = list_items(app, SCOPE, run_id=first, status="stale")
        assert [i["id"] for i in stale] == [i["id"] for i in proposed]
        assert all(f"(run {second})" in i["outcome"] for i in stale)
    finally:
        app.dispose()
