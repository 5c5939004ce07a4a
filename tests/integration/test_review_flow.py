"""Review before apply end to end (issue 15 §1, done when): a `propose` run changes no note; its
items approved one by one through the CLI, the API and the dashboard (a real Chromium click)
give exactly the end state an `auto` run gives the same store; a stale item is refused."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from tests.api.conftest import AGENT_1, AGENT_2, TOKENS, auth
from tests.conftest import make_sqlite_app
from tests.support.factories import add_entities, add_notes
from tests.support.serve import serve
from tests.support.webdriver import Browser, chromium
from worker.api import create_api
from worker.app import App
from worker.cli import main
from worker.domain.types import Scope
from worker.runs.service import create_run, execute_run
from worker.store.models import NoteRow

SCOPE = Scope("agent-1")
NOTES = [
    {"id": "tea-1", "content": "Prefers green tea."},
    {"id": "tea-2", "content": "Prefers green tea in the morning."},
    {"id": "old-1", "content": "Is on call this week.", "expires_at": "2001-01-01T00:00:00+00:00"},
    {"id": "chat-1", "content": "Asked about the Lisbon office.",
     "source_conversation_id": "gone"},
    {"id": "keep-1", "content": "Works on the billing service."},
]
ENTITIES = [{"kind": "conversation", "id": "gone", "status": "deleted"}]


def _store(tmp_path: Path, name: str, mode: str | None) -> App:
    (tmp_path / name).mkdir()
    app = make_sqlite_app(tmp_path / name, api_tokens=TOKENS)
    add_entities(app, *ENTITIES, {"kind": "agent", "id": "agent-1", "apply_mode": mode})
    add_notes(app, *NOTES)
    return app


def _notes(app: App) -> dict[str, tuple[Any, ...]]:
    with app.uow() as uow:
        rows = uow.session.query(NoteRow).filter(NoteRow.agent_id == "agent-1").all()
        return {r.id: (r.status, r.content, r.version, r.flags, r.comments) for r in rows}


def _end_state(app: App) -> tuple[dict[str, tuple[str, str]], Counter[tuple[str, str]]]:
    """Original notes by id (status, content); notes a run created by (status, content)."""
    originals = {n["id"] for n in NOTES}
    state = _notes(app)
    return ({i: v[:2] for i, v in state.items() if i in originals},
            Counter(v[:2] for i, v in state.items() if i not in originals))


def _dream(app: App) -> str:
    run_id = create_run(app, SCOPE, force=True)
    assert run_id is not None
    execute_run(app, run_id)
    return run_id


def _items(app: App, run_id: str) -> list[dict[str, Any]]:
    from worker.review.service import list_items

    return list_items(app, SCOPE, run_id=run_id)


def _wait_for(browser: Browser, text: str, timeout: float = 30) -> str:
    """The live DOM once it contains ``text`` (or at the deadline, for the assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        page = str(browser.run("return document.documentElement.outerHTML;"))
        if text in page or time.monotonic() > deadline:
            return page
        time.sleep(0.1)


@pytest.mark.browser
def test_propose_then_approve_by_cli_api_and_browser_equals_auto(tmp_path: Path) -> None:
    """The same store dreamed in auto and in propose (the agent's apply_mode); approving each
    proposed item through a different shell reaches the auto run's end state exactly."""
    auto, review = _store(tmp_path, "auto", None), _store(tmp_path, "review", "propose")
    try:
        _dream(auto)
        expected = _end_state(auto)
        assert expected != _end_state(review)  # the auto run changed something

        before = _notes(review)
        run_id = _dream(review)
        assert _notes(review) == before  # a propose run changes no note
        items = _items(review, run_id)
        assert [(i["phase"], i["kind"]) for i in items] == [
            ("consolidate", "merge"), ("prune", "archive"), ("archive", "archive")]
        merge, orphan, expired = (i["id"] for i in items)

        env = {"DREAM_DATABASE_URL": review.settings.database_url, "DREAM_LOG_LEVEL": "WARNING"}
        cli = CliRunner().invoke(main, ["review", "approve", str(merge), "--agent", "agent-1",
                                        "--by", "ana"], env=env)
        assert cli.exit_code == 0, cli.output

        with TestClient(create_api(review)) as client:
            other = client.post("/api/review/approve", json={"item_id": orphan},
                                headers=auth(AGENT_2))
            assert other.status_code == 404  # another scope's item is not found
            reply = client.post("/api/review/approve", json={"item_id": orphan, "by": "bo"},
                                headers=auth(AGENT_1))
            assert reply.status_code == 200, reply.text
            assert reply.json()["items"][0]["status"] == "approved"

        for url in serve(review):
            with chromium(tmp_path / "chromium") as browser:
                browser.get(f"{url}/dashboard/review?token={AGENT_1}")
                page = _wait_for(browser, f'id="approve-{expired}"')
                assert "Is on call this week." in page
                browser.click(f"#approve-{expired}")
                page = _wait_for(browser, f"approved item {expired}")
                assert f"approved item {expired}" in page, page[-2000:]
                assert "No open review items." in page
        assert _end_state(review) == expected
        listed = CliRunner().invoke(main, ["review", "list", "--agent", "agent-1", "--status",
                                           "approved", "--json"], env=env)
        decided = {i["id"]: i["decided_by"] for i in json.loads(listed.output)["items"]}
        assert decided == {merge: "cli:ana", orphan: f"api:{SCOPE.key} (bo)",
                           expired: f"dashboard:{SCOPE.key}"}
    finally:
        auto.dispose()
        review.dispose()


def _proposing_store(tmp_path: Path) -> App:
    """DREAM_APPLY_MODE=propose for the deployment, the registry and the notes."""
    (tmp_path / "s").mkdir()
    app = make_sqlite_app(tmp_path / "s", api_tokens=TOKENS, apply_mode="propose")
    add_entities(app, *ENTITIES)
    add_notes(app, *NOTES)
    return app


def _items_with_a_stale_merge(app: App) -> tuple[int, int, int]:
    """A dream's items (merge, orphan, expired); then the host edits a member of the merge."""
    merge, orphan, expired = (i["id"] for i in _items(app, _dream(app)))
    with app.uow() as uow:
        uow.session.query(NoteRow).filter(NoteRow.id == "tea-2").update(
            {"content": "Prefers black tea in the morning.", "version": 2})
        uow.commit()
    return merge, orphan, expired


def test_stale_item_from_a_run_is_refused_and_declined_is_not_proposed_again(
    tmp_path: Path,
) -> None:
    """DREAM_APPLY_MODE=propose for the deployment: the host edits a member after the proposal,
    so approving the merge is refused (409, nothing written); a declined item is not proposed
    by the next run until one of its notes changes."""
    app = _proposing_store(tmp_path)
    try:
        merge, orphan, _ = _items_with_a_stale_merge(app)
        before = _notes(app)
        with TestClient(create_api(app)) as client:
            refused = client.post("/api/review/approve", json={"item_id": merge},
                                  headers=auth(AGENT_1))
            assert refused.status_code == 409
            assert "stale" in refused.json()["detail"] and "tea-2" in refused.json()["detail"]
            declined = client.post("/api/review/decline", json={"item_id": orphan},
                                   headers=auth(AGENT_1))
            assert declined.status_code == 200, declined.text
        assert _notes(app) == before
        again = _dream(app)
        kinds = [(i["phase"], i["note_ids"]) for i in _items(app, again)]
        assert ("prune", ["chat-1"]) not in kinds  # declined at these versions
    finally:
        app.dispose()


def test_a_batch_with_a_stale_item_answers_200_with_the_outcome_the_cli_exits_with(
    tmp_path: Path,
) -> None:
    """`--all` over the API: the stale merge is not applied, the other items are, and the body
    says `outcome: stale`, the answer `dream review approve --all` gives as exit code 14; a
    batch that decides everything says `done`."""
    app = _proposing_store(tmp_path)
    try:
        merge, orphan, expired = _items_with_a_stale_merge(app)
        with TestClient(create_api(app)) as client:
            batch = client.post("/api/review/approve", json={"all": True},
                                headers=auth(AGENT_1))
            assert batch.status_code == 200, batch.text
            body = batch.json()
            assert {i["id"]: i["status"] for i in body["items"]} == {
                merge: "stale", orphan: "approved", expired: "approved"}
            assert body["outcome"] == "stale"
            none_left = client.post("/api/review/decline", json={"all": True},
                                    headers=auth(AGENT_1))
            assert none_left.status_code == 200, none_left.text
            assert none_left.json() == {"items": [], "outcome": "done"}
        notes = _notes(app)
        assert notes["tea-1"][0] == "active" and notes["chat-1"][0] == "archived"
    finally:
        app.dispose()
