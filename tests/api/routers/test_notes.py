"""POST /api/notes (remember) through HTTP: the NOOP / UPDATE / ADD table, on both databases."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from tests.api.conftest import AGENT_1, auth
from worker.app import App
from worker.store.models import NoteLineageRow, NoteRow

BASE = "The user deploys the billing service on Fridays after the weekly review."

# (what is written after BASE, expected action, expected HTTP status)
TABLE = [
    ("the user deploys the billing service on fridays, after the weekly review!", "NOOP", 200),
    # Adds a word to the note it matches: an UPDATE that keeps it (a NOOP dropped it). After
    # a comma: "review meeting" would make "review" part of another thing (the rule judge's
    # phrase rule), which is no restatement but another note, an ADD.
    ("The user deploys the billing service on Fridays after the weekly review, mostly.",
     "UPDATE", 201),
    ("The user deploys the billing service on Fridays after the weekly review, and always "
     "announces the release in the team channel with the changelog first.", "UPDATE", 201),
    ("The user deploys billing on Fridays.", "ADD", 201),
    ("Coffee is served at nine in the kitchen.", "ADD", 201),
]


@pytest.mark.parametrize("measure", ["jaccard", "cosine"])
@pytest.mark.parametrize(("text", "action", "status"), TABLE)
def test_remember_table(api_app: App, client: TestClient, measure: str, text: str, action: str,
                        status: int) -> None:
    """Identical or near-identical → NOOP (+ an access), similar and 20% longer → UPDATE that
    supersedes the old note with a pointer and lineage, otherwise ADD."""
    api_app.settings.remember.measure = measure  # type: ignore[assignment]
    first = client.post("/api/notes", headers=auth(AGENT_1), json={"content": BASE})
    assert first.status_code == 201 and first.json()["action"] == "ADD"
    base_id = first.json()["id"]
    r = client.post("/api/notes", headers=auth(AGENT_1), json={"content": text})
    assert r.status_code == status, r.text
    body = r.json()
    assert body["action"] == action, body
    assert body["reason"]
    with api_app.uow() as uow:
        rows = {n.id: n for n in uow.session.scalars(select(NoteRow))}
        edges = uow.session.execute(select(NoteLineageRow.parent_id, NoteLineageRow.child_id)).all()
    if action == "NOOP":
        assert body["id"] == base_id and len(rows) == 1 and rows[base_id].access_count == 0
    elif action == "UPDATE":
        assert body["superseded_id"] == base_id and len(rows) == 2
        assert rows[base_id].status == "revoked"
        assert rows[base_id].consolidated_into_id == body["id"]
        assert rows[body["id"]].status == "active" and edges == [(base_id, body["id"])]
    else:
        assert len(rows) == 2 and all(n.status == "active" for n in rows.values())


def test_remember_compares_only_the_same_type_and_scope(api_app: App, client: TestClient) -> None:
    """A near-duplicate of another type or another scope is ADDed; identical text is NOOP in
    the scope whatever its type."""
    client.post("/api/notes", headers=auth(AGENT_1), json={"content": BASE, "type": "Context"})
    r = client.post("/api/notes", headers=auth(AGENT_1),
                    json={"content": BASE + " meeting", "type": "Preference"})
    assert r.json()["action"] == "ADD"
    r = client.post("/api/notes", headers=auth(AGENT_1), json={"content": BASE, "type": "Issue"})
    assert r.json()["action"] == "NOOP"
    from tests.api.conftest import ADMIN

    r = client.post("/api/notes", headers=auth(ADMIN),
                    json={"scope": {"agent_id": "agent-1", "user_id": "u1"}, "content": BASE})
    assert r.json()["action"] == "ADD"
    with api_app.uow() as uow:
        assert uow.session.scalar(select(func.count()).select_from(NoteRow)) == 3


def test_remember_ids_are_derived_from_scope_and_text(api_app: App, client: TestClient) -> None:
    """The same text in the same scope always maps to the same id (idempotent retries), and a
    retired note's text can be remembered again under a fresh derived id."""
    r1 = client.post("/api/notes", headers=auth(AGENT_1), json={"content": BASE}).json()
    with api_app.uow() as uow:
        note = uow.notes.get_many([r1["id"]])[0]
        assert uow.notes.change(note, run_id=None, reason="test", status="revoked")
        uow.commit()
    r2 = client.post("/api/notes", headers=auth(AGENT_1), json={"content": BASE}).json()
    assert r2["action"] == "ADD" and r2["id"] != r1["id"]
    r3 = client.post("/api/notes", headers=auth(AGENT_1), json={"content": BASE + " "}).json()
    assert r3 == {**r3, "action": "NOOP", "id": r2["id"]}


@pytest.mark.parametrize(("body", "status"), [
    ({"content": "   "}, 422), ({"content": "!!!"}, 422), ({"content": "ok", "type": "Mood"}, 422),
    ({"content": "\u3164\u2800\u3164"}, 422),  # fillers, a blank braille cell (before: 201)
    ({"content": "x" * 9000}, 422), ({"content": "ok", "importance": 2}, 422),
    ({"content": "ok", "conversation_id": ""}, 422),
    ({"content": "ok", "conversation_id": " c1"}, 422),  # prints like another id
])
def test_remember_rejects_bad_input(api_app: App, client: TestClient, body: dict[str, object],
                                    status: int) -> None:
    """Empty, punctuation-only, nothing visible, unknown type, too long or out-of-range input
    → 422, no row."""
    r = client.post("/api/notes", headers=auth(AGENT_1), json=body)
    assert r.status_code == status, r.text
    with api_app.uow() as uow:
        assert uow.session.scalar(select(func.count()).select_from(NoteRow)) == 0


def test_remember_records_the_conversation_it_was_said_in(api_app: App,
                                                          client: TestClient) -> None:
    r = client.post("/api/notes", headers=auth(AGENT_1),
                    json={"content": BASE, "conversation_id": "conv-7"})
    assert r.status_code == 201, r.text
    own = client.post("/api/notes", headers=auth(AGENT_1),
                      json={"content": "Coffee is served at nine.", "manual": False})
    assert own.status_code == 201, own.text
    with api_app.uow() as uow:
        row = uow.session.get(NoteRow, r.json()["id"])
        assert row is not None and row.source_conversation_id == "conv-7"
        assert not row.is_auto_generated  # a person's note unless the host says otherwise
        mine = uow.session.get(NoteRow, own.json()["id"])
        assert mine is not None and mine.is_auto_generated


def test_an_update_is_undone_by_its_undo_id(api_app: App, client: TestClient) -> None:
    """The UPDATE's answer carries an ``undo_id`` (ADD and NOOP none): undoing it gives the
    superseded note back and revokes the longer one, once; another scope cannot."""
    from tests.api.conftest import AGENT_2

    base = client.post("/api/notes", headers=auth(AGENT_1), json={"content": BASE}).json()
    assert base["undo_id"] is None
    longer = client.post("/api/notes", headers=auth(AGENT_1), json={"content": TABLE[2][0]}).json()
    assert longer["action"] == "UPDATE" and longer["undo_id"].startswith("remember-")
    undo = f"/api/runs/{longer['undo_id']}/undo"
    assert client.post(undo, headers=auth(AGENT_2)).status_code == 404
    r = client.post(undo, headers=auth(AGENT_1))
    assert r.status_code == 200, r.text
    assert r.json()["restored"] == [base["id"]] and r.json()["retired"] == [longer["id"]]
    with api_app.uow() as uow:
        status = dict(uow.session.execute(select(NoteRow.id, NoteRow.status)).all())
    assert status == {base["id"]: "active", longer["id"]: "revoked"}
    assert client.post(undo, headers=auth(AGENT_1)).status_code == 409
