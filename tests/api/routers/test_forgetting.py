"""Fusion through HTTP: candidates, fuse with the host's text, refusals, keep-apart (both DBs)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.api.conftest import ADMIN, AGENT_1, AGENT_2, auth
from tests.support.factories import add_notes
from worker.app import App
from worker.store.models import NoteLineageRow, NoteRow, OperationLogRow

SEED = [  # the seed example: Python → 3.12 → type hints + pytest → unittest
    ("py", "The user writes Python."),
    ("py312", "The user writes Python 3.12."),
    ("pytest", "The user writes Python 3.12 with type hints and tests with pytest."),
    ("unittest", "The user writes Python 3.12 with type hints and tests with unittest."),
]
FUSED = "The user writes Python 3.12 with type hints and tests with pytest and unittest."
SCOPE = {"agent_id": "agent-1"}


def seed(app: App, **extra: Any) -> None:
    add_notes(app, *({"id": i, "content": c, "importance": 0.6, **extra} for i, c in SEED))


def state(app: App) -> dict[str, tuple[str, float, str | None, int]]:
    with app.uow() as uow:
        rows = uow.session.execute(select(NoteRow.id, NoteRow.status, NoteRow.importance,
                                          NoteRow.consolidated_into_id, NoteRow.version)).all()
    return {r.id: (r.status, r.importance, r.consolidated_into_id, r.version) for r in rows}


def test_candidates_list_the_seed_pairs_most_similar_first(api_app: App, client: TestClient) -> None:
    """Similar active pairs of the scope come back typed, with both records, best first; pairs
    chained by shared notes come as one topic listing them, best first."""
    seed(api_app)
    default = client.post("/api/forgetting/fusion-candidates", headers=auth(ADMIN),
                          json={"scope": SCOPE}).json()["candidates"]
    pairs = [c for c in default if c["type"] == "pair"]
    assert [sorted(c["note_ids"]) for c in pairs] == [["pytest", "unittest"], ["py", "py312"]]
    assert all(c["similarity"] >= 0.88 for c in pairs)
    assert pairs[0]["record_a"]["content"] and pairs[0]["record_b"]["scope"] == {
        "agent_id": "agent-1", "user_id": None, "company_id": None}
    # The pairs no item lists (the seed's small scope asked about whole) in one topic, last.
    assert [c["type"] for c in default] == ["pair", "pair", "topic"]
    assert default[-1]["sources"] == ["small_scope"]
    r = client.post("/api/forgetting/fusion-candidates", headers=auth(ADMIN),
                    json={"scope": SCOPE, "threshold": 0.6})
    assert r.status_code == 200, r.text
    (topic,) = r.json()["candidates"]  # 3.12 joins the two pairs above: one history
    assert topic["type"] == "topic" and topic["note_ids"] == ["py", "py312", "pytest", "unittest"]
    assert [r["id"] for r in topic["records"]] == topic["note_ids"]
    chained = [tuple(sorted(p["note_ids"])) for p in topic["pairs"]]
    assert chained[:2] == [("pytest", "unittest"), ("py", "py312")]
    sims = [p["similarity"] for p in topic["pairs"]]
    assert sims == sorted(sims, reverse=True) and sims[-1] >= 0.6
    assert topic["similarity"] == sims[0] and topic["sources"] == ["cosine"]


def test_candidates_skip_protected_notes(api_app: App, client: TestClient) -> None:
    """A pair involving a protected note is never offered for fusion."""
    seed(api_app)
    add_notes(api_app, {"id": "pinned", "content": SEED[3][1] + " Always.", "protection": "protected"})
    cands = client.post("/api/forgetting/fusion-candidates", headers=auth(AGENT_1),
                        json={"threshold": 0.5}).json()["candidates"]
    assert cands and all("pinned" not in c["note_ids"] for c in cands)


def test_fuse_leaves_one_active_note_and_four_superseded(api_app: App, client: TestClient) -> None:
    """The host's text becomes one note; every source is revoked with importance 0.0, the
    pointer, a lineage edge and an operation-log entry."""
    seed(api_app)
    ids = [i for i, _ in SEED]
    r = client.post("/api/forgetting/fuse", headers=auth(AGENT_1),
                    json={"source_ids": ids, "fused_content": FUSED, "fused_importance": 0.8})
    assert r.status_code == 201, r.text
    body = r.json()
    new_id = body["note"]["id"]
    assert body["note"]["content"] == FUSED and body["note"]["importance"] == 0.8
    assert body["warnings"] == [] and sorted(body["superseded"]) == sorted(ids)
    after = state(api_app)
    assert [k for k, v in after.items() if v[0] == "active"] == [new_id]
    for i in ids:
        assert after[i][:3] == ("revoked", 0.0, new_id)
    with api_app.uow() as uow:
        parents = uow.session.scalars(select(NoteLineageRow.parent_id).where(
            NoteLineageRow.child_id == new_id)).all()
        logged = uow.session.scalars(select(OperationLogRow.entity_id)).all()
    assert sorted(parents) == sorted(ids)
    assert set(ids) | {new_id} <= set(logged)


@pytest.mark.parametrize("case", ["cross_scope", "revoked", "unknown", "empty", "too_long",
                                  "one_id", "protected", "strict_invented"])
def test_fuse_refusals_change_nothing(api_app: App, client: TestClient, case: str) -> None:
    """Each refused fuse answers 4xx with a reason and leaves every note exactly as it was."""
    seed(api_app)
    add_notes(api_app, {"id": "other", "agent_id": "agent-2", "content": SEED[2][1]},
              {"id": "gone", "content": "The user writes Python 3.11.", "status": "revoked"},
              {"id": "pinned", "content": "The user writes Python 3.12 daily.",
               "protection": "immutable"})
    body: dict[str, Any] = {"source_ids": ["pytest", "unittest"], "fused_content": FUSED}
    expected = {"cross_scope": 422, "revoked": 409, "unknown": 404, "empty": 422,
                "too_long": 422, "one_id": 422, "protected": 409, "strict_invented": 422}[case]
    if case == "cross_scope":
        body["source_ids"] = ["pytest", "other"]
    elif case == "revoked":
        body["source_ids"] = ["pytest", "gone"]
    elif case == "unknown":
        body["source_ids"] = ["pytest", "no-such-note"]
    elif case == "empty":
        body["fused_content"] = "   "
    elif case == "too_long":
        body["fused_content"] = "x" * (api_app.settings.host.max_fused_chars + 1)
    elif case == "one_id":
        body["source_ids"] = ["pytest", "pytest"]
    elif case == "protected":
        body["source_ids"] = ["pytest", "pinned"]
    else:
        body["fused_content"] = FUSED + " Since 2019 at Acme, see https://acme.example."
        body["strict"] = True
    before = state(api_app)
    r = client.post("/api/forgetting/fuse", headers=auth(ADMIN), json=body)
    assert r.status_code == expected, r.text
    assert r.json()["detail"]
    assert state(api_app) == before


def test_fuse_warns_about_ungrounded_facts_unless_strict(api_app: App, client: TestClient) -> None:
    """Without strict, invented specifics are applied but named in the warnings."""
    seed(api_app)
    r = client.post("/api/forgetting/fuse", headers=auth(AGENT_1), json={
        "source_ids": ["pytest", "unittest"],
        "fused_content": "The user writes Python 3.12 with type hints; unittest since 2019."})
    assert r.status_code == 201, r.text
    assert "2019" in r.json()["warnings"][0]


def test_keep_apart_hides_the_pair_until_a_note_changes(api_app: App, client: TestClient) -> None:
    """A keep-apart verdict hides the pair; editing one note (new version) brings it back."""
    seed(api_app)
    ask = {"threshold": 0.9}

    def pairs() -> list[tuple[str, ...]]:
        r = client.post("/api/forgetting/fusion-candidates", headers=auth(AGENT_1), json=ask)
        return [tuple(sorted(c["note_ids"])) for c in r.json()["candidates"]]

    assert ("pytest", "unittest") in pairs()
    r = client.post("/api/forgetting/keep-apart", headers=auth(AGENT_1),
                    json={"source_ids": ["unittest", "pytest"]})
    assert r.status_code == 200, r.text
    assert ("pytest", "unittest") not in pairs()
    with api_app.uow() as uow:  # the host edits one of them
        note = uow.notes.get_many(["unittest"])[0]
        assert uow.notes.change(note, run_id=None, reason="host edit", importance=0.7)
        uow.commit()
    assert ("pytest", "unittest") in pairs()


def test_open_items_of_the_latest_run_are_listed_typed(api_app: App, client: TestClient) -> None:
    """Clusters and contradiction pairs the rule judge left open appear with their type."""
    from worker.clock import utcnow
    from worker.domain.types import Scope

    seed(api_app)
    scope = Scope("agent-1")
    with api_app.uow() as uow:
        run_id = uow.runs.create(scope, now=utcnow(), trigger="cli", phases=["consolidate"])
        assert run_id
        parent = uow.runs.add_step({"run_id": run_id, "scope_key": scope.key, "phase": "consolidate",
                                    "name": "consolidate", "status": "succeeded",
                                    "started_at": utcnow()})
        uow.runs.add_step({"run_id": run_id, "parent_id": parent, "scope_key": scope.key,
                           "phase": "consolidate", "name": "cluster 1", "status": "skipped",
                           "input": {"note_ids": ["py", "py312", "pytest"]},
                           "output": {"verdict": "open", "reason": "needs a judge"},
                           "started_at": utcnow()})
        uow.runs.add_step({"run_id": run_id, "parent_id": parent, "scope_key": scope.key,
                           "phase": "contradictions", "name": "pair 1", "status": "skipped",
                           "output": {"verdict": "open", "note_ids": ["pytest", "unittest"]},
                           "started_at": utcnow()})
        uow.runs.set_status(run_id, "succeeded", finished_at=utcnow())
        uow.commit()
    cands = client.post("/api/forgetting/fusion-candidates", headers=auth(AGENT_1),
                        json={"threshold": 0.99}).json()["candidates"]
    kinds = {c["type"]: c for c in cands}
    # py-unittest and py312-unittest are in no item: the small scope's topic holds all four.
    assert set(kinds) == {"cluster", "contradiction", "topic"}
    assert sorted(kinds["topic"]["note_ids"]) == ["py", "py312", "pytest", "unittest"]
    assert kinds["cluster"]["note_ids"] == ["py", "py312", "pytest"]
    assert kinds["cluster"]["run_id"] == run_id and len(kinds["cluster"]["records"]) == 3
    assert kinds["contradiction"]["record_a"]["id"] == "pytest"


def test_scoped_token_cannot_touch_another_scope(api_app: App, client: TestClient) -> None:
    """Another scope's ids and scope are 404 for a scoped token, and nothing changes."""
    seed(api_app)
    before = state(api_app)
    r = client.post("/api/forgetting/fuse", headers=auth(AGENT_2),
                    json={"source_ids": ["pytest", "unittest"], "fused_content": FUSED})
    assert r.status_code == 404
    r = client.post("/api/forgetting/keep-apart", headers=auth(AGENT_2),
                    json={"source_ids": ["pytest", "unittest"]})
    assert r.status_code == 404
    r = client.post("/api/forgetting/fusion-candidates", headers=auth(AGENT_2),
                    json={"scope": SCOPE})
    assert r.status_code == 404
    r = client.post("/api/notes", headers=auth(AGENT_2), json={"scope": SCOPE, "content": "x y"})
    assert r.status_code == 404
    assert state(api_app) == before


@pytest.mark.parametrize("body", [
    {"source_ids": ["pytest", "unittest"], "fused_content": FUSED, "type": "Mood"},
    {"source_ids": ["pytest", "unittest"], "fused_content": "Python\x00 3.12"},
    {"source_ids": ["pytest", "bad\x00id"], "fused_content": FUSED},
])
def test_fuse_rejects_values_the_store_cannot_hold(api_app: App, client: TestClient,
                                                   body: dict[str, Any]) -> None:
    """Unknown note types and NUL characters are 422 on both databases, never a 500."""
    seed(api_app)
    before = state(api_app)
    r = client.post("/api/forgetting/fuse", headers=auth(AGENT_1), json=body)
    assert r.status_code == 422, r.text
    assert state(api_app) == before


def test_open_items_left_by_a_real_rule_judged_run(api_app: App, client: TestClient) -> None:
    """After a real run with the rule-based judge, the clusters and contradiction pairs it could
    not settle are listed (typed) and fusing one removes it from the listing."""
    from tests.support.factories import add_entities
    from worker.domain.types import Scope
    from worker.runs.service import create_run, execute_run

    seed(api_app)
    add_notes(api_app, {"id": "dark", "content": "The user prefers dark mode in the editor."},
              {"id": "light", "content": "The user prefers light mode in the editor."})
    add_entities(api_app, {"kind": "agent", "id": "agent-1", "status": "active"})
    run_id = create_run(api_app, Scope("agent-1"), force=True)
    assert run_id
    execute_run(api_app, run_id)

    def listing() -> list[dict[str, Any]]:
        r = client.post("/api/forgetting/fusion-candidates", headers=auth(AGENT_1),
                        json={"threshold": 0.99, "limit": 500})
        return list(r.json()["candidates"])

    items = [c for c in listing() if c["type"] != "topic"]  # the small scope's: no run's
    assert {c["type"] for c in items} == {"cluster", "contradiction"}
    assert all(c["run_id"] == run_id and len(c["records"]) >= 2 for c in items)
    target = next(c for c in items if sorted(c["note_ids"]) == ["dark", "light"])
    r = client.post("/api/forgetting/fuse", headers=auth(AGENT_1), json={
        "source_ids": target["note_ids"],
        "fused_content": "The user prefers dark or light mode in the editor."})
    assert r.status_code == 201, r.text
    assert all({"dark", "light"} & set(c["note_ids"]) == set() for c in listing())


@pytest.mark.parametrize(("sources", "fused", "named"), [
    (["The user likes lemon in tea.", "The user likes lemon in green tea."],
     "The user likes Lemo in green tea.", "lemo"),
    (["The user jogs every morning.", "The user jogs every morning in the park."],
     "Orn jogs every morning in the park.", "orn"),
    (["The account was opened in 2021.", "The account was opened in 2021 in Lisbon."],
     "The account was opened in 2021 in Lisbon and owes 20 dollars.", "20"),
    (["The user drinks green tea.", "The user drinks green tea every day."],
     "The user never drinks green tea.", "negation changed"),
    (["The user has three cats.", "The user has three cats at home."],
     "The user has twenty cats at home.", "twenty"),
    (["The user moved to Porto.", "The user moved to Porto in May."],
     "The user moved to Porto yesterday.", "relative time"),
    (["Bob reports to Anna.", "Bob reports to Anna in Berlin."],
     "Anna reports to Bob in Berlin.", "relation reversed: anna reports to bob"),
])
def test_strict_fuse_refuses_each_adversarial_fusion(
    api_app: App, client: TestClient, sources: list[str], fused: str, named: str,
) -> None:
    """Host fuse with strict over HTTP uses the consolidate phase's grounding check: a substring
    of a source word ("Lemo" in "lemon", "Orn" in "morning"), of a number ("20" in "2021"), a
    flipped negation, a reversed relation, a spelled-out number or relative time is a 422
    naming it, and nothing
    changes; without strict the same text is applied with the problem as a warning."""
    add_notes(api_app, {"id": "s1", "content": sources[0]}, {"id": "s2", "content": sources[1]})
    before = state(api_app)
    body = {"source_ids": ["s1", "s2"], "fused_content": fused, "strict": True}
    r = client.post("/api/forgetting/fuse", headers=auth(ADMIN), json=body)
    assert r.status_code == 422, r.text
    assert named in r.json()["detail"]
    assert state(api_app) == before
    r = client.post("/api/forgetting/fuse", headers=auth(ADMIN), json={**body, "strict": False})
    assert r.status_code == 201, r.text
    assert any(named in w for w in r.json()["warnings"])


def test_a_fuse_is_undone_by_its_undo_id_by_its_own_scope_only(api_app: App,
                                                               client: TestClient) -> None:
    """The answer carries an ``undo_id``; ``POST /api/runs/{undo_id}/undo`` with a token of
    the fuse's scope (or an admin's) gives every source back and revokes the fused note, once;
    another scope's token gets 404, as for a run it cannot see, and nothing changes."""
    seed(api_app)
    before = state(api_app)
    ids = [i for i, _ in SEED]
    body = client.post("/api/forgetting/fuse", headers=auth(AGENT_1),
                       json={"source_ids": ids, "fused_content": FUSED}).json()
    undo_id, new_id = body["undo_id"], body["note"]["id"]
    assert undo_id.startswith("fuse-")
    fused = state(api_app)
    assert client.post(f"/api/runs/{undo_id}/undo", headers=auth(AGENT_2)).status_code == 404
    assert state(api_app) == fused
    r = client.post(f"/api/runs/{undo_id}/undo", headers=auth(AGENT_1))
    assert r.status_code == 200, r.text
    assert sorted(r.json()["restored"]) == sorted(ids) and r.json()["retired"] == [new_id]
    after = state(api_app)
    for i in ids:
        assert after[i][:3] == before[i][:3]  # active, its importance, no pointer
    assert after[new_id][0] == "revoked"
    again = client.post(f"/api/runs/{undo_id}/undo", headers=auth(ADMIN))
    assert again.status_code == 409 and "already undone" in again.text


def test_a_fuse_answers_the_open_review_item_it_made_stale(api_app: App,
                                                          client: TestClient) -> None:
    """A fuse of notes an open review item names records the item stale in its transaction
    and answers its id; the item then shows stale with why, and approving it is a 409 (before:
    it stayed open, listed as waiting for a decision it could never get)."""
    from tests.review.test_service import _merge, _propose

    seed(api_app)
    item = _propose(api_app, _merge(["py", "py312"], "The user writes Python 3.12."))
    r = client.post("/api/forgetting/fuse", headers=auth(AGENT_1),
                    json={"source_ids": ["py", "py312"],
                          "fused_content": "The user writes Python 3.12."})
    assert r.status_code == 201, r.text
    assert r.json()["review_items_stale"] == [item]
    shown = client.get(f"/api/review/items/{item}", headers=auth(AGENT_1)).json()
    assert shown["status"] == "stale" and r.json()["undo_id"] in shown["outcome"]
    refused = client.post("/api/review/approve", headers=auth(AGENT_1), json={"item_id": item})
    assert refused.status_code == 409 and "already stale" in refused.json()["detail"]


@pytest.mark.parametrize("path", ["fuse", "keep-apart"])
def test_a_verdict_on_a_source_changed_since_it_was_listed_is_a_409(
        api_app: App, client: TestClient, path: str) -> None:
    """The host's model judged the pair at the versions the candidates listing showed; the
    note changed since (version 2): 409 naming it, nothing written. A version that is no
    number is a 422 (strict types), as any other field."""
    from tests.support.host_writes import host_sets

    seed(api_app)
    host_sets(api_app, "unittest", content="The user tests with nose.", version=2)
    before = state(api_app)
    body: dict[str, Any] = {"source_ids": ["pytest", "unittest"],
                            "source_versions": {"pytest": 1, "unittest": 1}}
    if path == "fuse":
        body["fused_content"] = FUSED
    r = client.post(f"/api/forgetting/{path}", headers=auth(AGENT_1), json=body)
    assert r.status_code == 409, r.text
    assert "note unittest is at version 2, not version 1" in r.json()["detail"]
    body["source_versions"] = {"pytest": "1"}
    r = client.post(f"/api/forgetting/{path}", headers=auth(AGENT_1), json=body)
    assert r.status_code == 422 and "source_versions" in r.json()["detail"]
    assert state(api_app) == before
