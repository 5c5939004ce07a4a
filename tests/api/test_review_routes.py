"""The review API and the review page's form guard: scoped listing, an admin naming the scope,
and approve/decline forms refused without the CSRF token or from another site."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import update

from tests.api.conftest import ADMIN, AGENT_1, AGENT_2, auth
from tests.support.factories import add_notes
from worker.api.review_page import csrf_token
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.ingest import import_examples
from worker.review.changes import archive_change
from worker.review.items import ChangeKind, ProposedChange
from worker.store.models import ExampleRow, NoteRow


def _seed(app: App) -> int:
    add_notes(app, {"id": "t1", "content": "Prefers green tea."},
              {"id": "t2", "content": "Prefers green tea in the morning."})
    change = ProposedChange("consolidate", ChangeKind.MERGE, {"t1": 1, "t2": 1},
                            reason="rule: contained", content="Prefers green tea in the morning.",
                            source_ids=("t1", "t2"), payload={"rule": "contained"})
    with app.uow() as uow:
        uow.review.add_many(Scope("agent-1"), None, [change.row()], utcnow())
        uow.commit()
        return int(uow.review.list(Scope("agent-1"))[0].id)


def _statuses(app: App) -> dict[str, str]:
    with app.uow() as uow:
        return {r.id: r.status for r in uow.session.query(NoteRow).all()}


def test_list_show_and_decline_are_scoped(client: TestClient, api_app: App) -> None:
    """A scoped token sees its items only; an admin must name the scope; decline writes no note."""
    item = _seed(api_app)
    mine = client.get("/api/review/items", headers=auth(AGENT_1)).json()
    assert [i["id"] for i in mine["items"]] == [item]
    assert client.get("/api/review/items", headers=auth(AGENT_2)).json()["items"] == []
    assert client.get(f"/api/review/items/{item}", headers=auth(AGENT_2)).status_code == 404
    assert client.get("/api/review/items?agent_id=agent-1",
                      headers=auth(AGENT_2)).status_code == 404
    assert client.get("/api/review/items", headers=auth(ADMIN)).status_code == 422
    shown = client.get(f"/api/review/items/{item}?agent_id=agent-1", headers=auth(ADMIN)).json()
    assert [n["content"] for n in shown["notes"]] == ["Prefers green tea.",
                                                      "Prefers green tea in the morning."]
    assert client.get("/api/review/items").status_code == 401
    before = _statuses(api_app)
    both = client.post("/api/review/decline", json={"item_id": item, "all": True},
                       headers=auth(AGENT_1))
    assert both.status_code == 422  # one of item_id, run_id, all
    declined = client.post("/api/review/decline",
                           json={"all": True, "scope": {"agent_id": "agent-1"}, "by": "ops"},
                           headers=auth(ADMIN))
    assert declined.status_code == 200, declined.text
    assert declined.json()["items"][0]["status"] == "declined"
    assert _statuses(api_app) == before
    again = client.post("/api/review/decline", json={"item_id": item}, headers=auth(AGENT_1))
    assert again.status_code == 409 and "already declined" in again.json()["detail"]


def test_a_decision_by_or_reason_with_nothing_visible_is_a_422(client: TestClient,
                                                               api_app: App) -> None:
    """``by`` (who decided) and ``reason`` are recorded for people to read: invisible-only
    ones were recorded (``by`` as "api:… (\u200b)"). Now each is a 422 naming the field, and
    the item stays open."""
    item = _seed(api_app)
    for field, verb in (("by", "approve"), ("by", "decline"), ("reason", "decline")):
        r = client.post(f"/api/review/{verb}", json={"item_id": item, field: "\u200b\u2060"},
                        headers=auth(AGENT_1))
        assert r.status_code == 422, (field, verb, r.text)
        assert f"{field}" in r.json()["detail"] and "no visible text" in r.json()["detail"]
    listed = client.get("/api/review/items", headers=auth(AGENT_1)).json()
    assert [(i["id"], i["status"]) for i in listed["items"]] == [(item, "open")]


def test_a_decision_by_or_reason_with_a_bidi_override_is_a_422(client: TestClient,
                                                               api_app: App) -> None:
    """A bidi override in ``by`` or ``reason`` printed the rest of every listing line that
    shows it reversed; it was recorded. Now a 422 naming the field; the item stays open."""
    item = _seed(api_app)
    for field, verb in (("by", "approve"), ("by", "decline"), ("reason", "decline")):
        r = client.post(f"/api/review/{verb}", json={"item_id": item, field: "ops\u202e devorppa"},
                        headers=auth(AGENT_1))
        assert r.status_code == 422, (field, verb, r.text)
        assert field in r.json()["detail"] and "bidi override" in r.json()["detail"]
    listed = client.get("/api/review/items", headers=auth(AGENT_1)).json()
    assert [(i["id"], i["status"]) for i in listed["items"]] == [(item, "open")]


def test_review_page_forms_need_the_csrf_token_and_the_same_site(client: TestClient,
                                                                 api_app: App) -> None:
    """The signed-in cookie alone cannot approve: no CSRF token, a wrong one, a cross-site or
    foreign-origin request are 403 and change nothing; the page's own form works."""
    item = _seed(api_app)
    page = client.get(f"/dashboard/review?token={AGENT_1}")
    assert page.status_code == 200 and f'id="approve-{item}"' in page.text
    assert csrf_token(AGENT_1) in page.text and AGENT_1 not in page.text
    before = _statuses(api_app)
    url = f"/dashboard/review/{item}/approve"
    for data, headers in (({}, {}), ({"csrf": "0" * 64}, {}),
                          ({"csrf": csrf_token(AGENT_1)}, {"sec-fetch-site": "cross-site"}),
                          ({"csrf": csrf_token(AGENT_1)}, {"origin": "https://evil.example"})):
        refused = client.post(url, data=data, headers=headers, follow_redirects=False)
        assert refused.status_code == 403, (data, headers)
    assert _statuses(api_app) == before
    query_token = TestClient(client.app).post(f"{url}?token={AGENT_1}",
                                              data={"csrf": csrf_token(AGENT_1)})
    assert query_token.status_code == 401  # a token in the URL never authorizes a POST
    done = client.post(url, data={"csrf": csrf_token(AGENT_1)}, follow_redirects=False)
    assert done.status_code == 303 and "approved+item" in done.headers["location"]
    assert _statuses(api_app)["t1"] == "revoked"


def test_a_click_through_a_proxy_that_ends_tls_is_the_same_site(client: TestClient,
                                                                  api_app: App) -> None:
    """Behind an ingress that ends TLS the browser's Origin says https:// while this server
    sees http://: the page's own form was refused as another site's, blaming the CSRF token.
    The Origin's host and port decide; another site's post is refused naming that, not the
    token."""
    item = _seed(api_app)
    client.get(f"/dashboard/review?token={AGENT_1}")
    url = f"/dashboard/review/{item}/decline"
    foreign = client.post(url, data={"csrf": csrf_token(AGENT_1)}, follow_redirects=False,
                          headers={"origin": "https://testserver.evil.example"})
    assert foreign.status_code == 403 and "another site" in foreign.text
    assert "CSRF" not in foreign.text
    assert _statuses(api_app)["t1"] == "active"
    proxied = client.post(url, data={"csrf": csrf_token(AGENT_1)}, follow_redirects=False,
                          headers={"origin": "https://testserver", "sec-fetch-site": "same-origin"})
    assert proxied.status_code == 303 and "declined+item" in proxied.headers["location"]


def test_the_page_shows_only_the_outcome_line_its_own_redirect_sealed(
        client: TestClient, api_app: App) -> None:
    """The outcome line rides in the address after a decision. A link someone else made
    (``?msg=approved item 9`` when nothing was approved, or a seal made for another token) used
    to show its text on the signed-in user's page; now only the page's own redirect shows one."""
    import urllib.parse

    item = _seed(api_app)
    client.get(f"/dashboard/review?token={AGENT_1}")
    done = client.post(f"/dashboard/review/{item}/approve",
                       data={"csrf": csrf_token(AGENT_1)}, follow_redirects=False)
    location = done.headers["location"]
    line = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)["msg"][0]
    assert line.startswith("approved item") and line in client.get(location).text
    forged = "approved item 9999 (forged)"
    other = TestClient(client.app)
    other.get(f"/dashboard/review?token={AGENT_2}")
    sealed_for_2 = urllib.parse.parse_qs(urllib.parse.urlsplit(other.post(
        "/dashboard/review/1/decline", data={"csrf": csrf_token(AGENT_2)},
        follow_redirects=False).headers["location"]).query)
    for query in ({"msg": forged}, {"msg": forged, "seal": "0" * 64},
                  {"msg": sealed_for_2["msg"][0], "seal": sealed_for_2["seal"][0]}):
        page = client.get("/dashboard/review", params=query)
        assert page.status_code == 200 and query["msg"] not in page.text, query


def test_the_page_shows_the_example_an_archive_item_names(client: TestClient,
                                                          api_app: App) -> None:
    """An archive item for an example lists the example (id, version, status, moved since),
    not an empty notes column."""
    import_examples(api_app, ['{"agent_id": "agent-1", "id": "ex-9", "input": "q", '
                              '"output": "a", "success_score": 10}'])
    change = archive_change("archive", "ex-9", 1, reason="archive: unsuccessful and unused",
                            comment="archived", entity="example",
                            seen={"ex-9": {"success_score": 10}})
    with api_app.uow() as uow:
        uow.review.add_many(Scope("agent-1"), None, [change.row()], utcnow())
        uow.session.execute(update(ExampleRow).where(ExampleRow.id == "ex-9")
                            .values(success_score=80))
        uow.commit()
    page = client.get(f"/dashboard/review?token={AGENT_1}")
    assert page.status_code == 200
    assert 'example <code>ex-9</code> v1 active <strong>changed since</strong>' in page.text


def test_a_malformed_item_id_or_scope_on_the_review_page_is_422_in_one_line(
        client: TestClient, api_app: App) -> None:
    """The page's sibling ids: an item id that is not a whole number from 1 answers 422 as a
    page (not the API's JSON); an admin's malformed scope key is said in one line (422), not an
    empty page; nothing is decided."""
    item = _seed(api_app)
    before = _statuses(api_app)
    assert client.get(f"/dashboard/review?token={ADMIN}").status_code == 200
    for bad in ("0", "abc", "99999999999"):
        r = client.post(f"/dashboard/review/{bad}/approve", data={"csrf": csrf_token(ADMIN)})
        assert r.status_code == 422 and r.headers["content-type"].startswith("text/html"), bad
        assert 'id="invalid"' in r.text and "path.item_id: " in r.text, r.text
    page = client.get("/dashboard/review", params={"scope": '["agent-1", 1'})
    assert page.status_code == 422
    assert "scope: give a scope key such as" in page.text.replace("&#34;", '"')
    good = client.get("/dashboard/review", params={"scope": '["agent-1",null,null]'})
    assert good.status_code == 200 and f'id="approve-{item}"' in good.text
    assert _statuses(api_app) == before


def test_listing_by_a_run_of_another_scope_or_none_is_404(client: TestClient, api_app: App) -> None:
    """`?run_id=` naming another scope's run or no run is 404 (word for word the same), never
    an empty list a reviewer would read as "that run proposed nothing"; a run of the caller's
    own scope with no items is an empty list."""
    from worker.runs import service

    _seed(api_app)
    add_notes(api_app, {"id": "b1", "agent_id": "agent-2", "content": "Likes chess."})
    runs = {agent: service.create_run(api_app, Scope(agent), force=True)
            for agent in ("agent-1", "agent-2")}
    assert all(runs.values())
    answers = {name: client.get(f"/api/review/items?run_id={run_id}", headers=auth(AGENT_1))
               for name, run_id in (("other", "x-run"), ("theirs", runs["agent-2"]))}
    assert {a.status_code for a in answers.values()} == {404}
    details = {a.json()["detail"].replace(runs["agent-2"], "ID").replace("x-run", "ID")
               for a in answers.values()}
    assert len(details) == 1 and "dream runs list" in details.pop()
    admin = client.get(f"/api/review/items?agent_id=agent-1&run_id={runs['agent-2']}",
                       headers=auth(ADMIN))
    assert admin.status_code == 404
    own = client.get(f"/api/review/items?run_id={runs['agent-1']}", headers=auth(AGENT_1))
    assert own.status_code == 200 and own.json()["items"] == []


def test_an_admin_naming_an_unknown_scope_is_404_not_nothing(client: TestClient,
                                                           api_app: App) -> None:
    """An admin's misspelt scope (no notes, sessions or runs) answered an empty list, and
    approve/decline of ``all`` answered ``outcome: done``: a typo read as "nothing to review".
    Each is the unknown-scope 404 now, as `dream review list` and fusion-candidates; a known
    scope with nothing open still answers an empty list."""
    _seed(api_app)
    typo = {"agent_id": "agent-l"}
    answers = [client.get("/api/review/items?agent_id=agent-l", headers=auth(ADMIN)),
               client.post("/api/review/approve", json={"all": True, "scope": typo},
                           headers=auth(ADMIN)),
               client.post("/api/review/decline", json={"all": True, "scope": typo},
                           headers=auth(ADMIN))]
    assert [a.status_code for a in answers] == [404, 404, 404], [a.text for a in answers]
    assert all(a.json()["detail"].startswith('unknown scope ["agent-l",null,null]')
               for a in answers)
    known = client.get("/api/review/items?agent_id=agent-1&status=declined", headers=auth(ADMIN))
    assert known.status_code == 200 and known.json()["items"] == []
    assert client.get("/api/review/items", headers=auth(AGENT_2)).json()["items"] == []


def test_a_decline_reason_of_several_lines_is_refused(client: TestClient, api_app: App) -> None:
    """A reason is one line of every listing (`dream review show`: "declined by ...: <reason>");
    a line break in it printed a line that is not there ("FAKE: item 9 approved"). 422 now,
    the item stays open; a one-line reason is taken."""
    item = _seed(api_app)
    refused = client.post("/api/review/decline",
                          json={"item_id": item, "reason": "dup\nFAKE: item 9 approved"},
                          headers=auth(AGENT_1))
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == ("reason has a line break or control character; give it "
                                        "on one line")
    shown = client.get(f"/api/review/items/{item}", headers=auth(AGENT_1)).json()
    assert shown["status"] == "open"
    taken = client.post("/api/review/decline", json={"item_id": item, "reason": "a duplicate"},
                        headers=auth(AGENT_1))
    assert taken.status_code == 200, taken.text


def test_a_decision_by_with_a_control_character_is_a_422(client: TestClient,
                                                         api_app: App) -> None:
    """``by`` with an escape sequence, a bell or a line break was recorded as who decided, and
    `dream review show` (and a refusal's error line) printed it raw to the reviewer's terminal
    (``\\x1b[2J`` clears the screen). Now a 422 naming the field, as ``reason`` and the CLI's
    ``--by`` refuse it; the item stays open."""
    item = _seed(api_app)
    for verb in ("approve", "decline"):
        for by in ("eve\x1b[2J", "eve\x07", "eve\nbob", "eve\u0085"):
            r = client.post(f"/api/review/{verb}", json={"item_id": item, "by": by},
                            headers=auth(AGENT_1))
            assert r.status_code == 422, (verb, by, r.text)
            assert r.json()["detail"].startswith("body.by: has a line break or control")
    listed = client.get("/api/review/items", headers=auth(AGENT_1)).json()
    assert [(i["id"], i["status"]) for i in listed["items"]] == [(item, "open")]


def test_a_run_id_no_run_can_have_is_a_422_naming_the_rule(client: TestClient,
                                                           api_app: App) -> None:
    """A control character, an invisible character or a decomposed accent in ``run_id`` (the
    approve/decline body, the list's query) is the 422 MCP's ``run_id`` and the CLI's ``--run``
    give, naming the rule and never the id; before, a 404 that echoed it back (an escape
    sequence in a log or on a screen). Nothing is decided."""
    item = _seed(api_app)
    bad = ("r\x1b[2J", "r\nx", "r\u200b", "Jose\u0301", " r")
    for run_id in bad:
        listed = client.get("/api/review/items", params={"run_id": run_id},
                            headers=auth(AGENT_1))
        assert listed.status_code == 422, (run_id, listed.text)
        assert listed.json()["detail"].startswith("run_id ")
        assert run_id.strip() == "r" or run_id not in listed.json()["detail"]
        for verb in ("approve", "decline"):
            r = client.post(f"/api/review/{verb}", json={"run_id": run_id},
                            headers=auth(AGENT_1))
            assert r.status_code == 422, (verb, run_id, r.text)
            assert r.json()["detail"].startswith("run_id ")
    listed = client.get("/api/review/items", headers=auth(AGENT_1)).json()
    assert [(i["id"], i["status"]) for i in listed["items"]] == [(item, "open")]


def test_a_decision_by_too_long_says_characters(client: TestClient, api_app: App) -> None:
    """``by`` past 100 characters is a 422 saying so in characters (it said "at most 100
    items after validation, not 101"); the item stays open."""
    item = _seed(api_app)
    r = client.post("/api/review/approve", json={"item_id": item, "by": "a" * 101},
                    headers=auth(AGENT_1))
    assert r.status_code == 422
    assert r.json()["detail"] == "body.by: String should have at most 100 characters"
    listed = client.get("/api/review/items", headers=auth(AGENT_1)).json()
    assert [(i["id"], i["status"]) for i in listed["items"]] == [(item, "open")]


def test_a_review_field_given_twice_is_422_in_one_line(client: TestClient, api_app: App) -> None:
    """The form's and the page's fields given twice: the last was taken silently (an admin's
    second scope acted, a second CSRF token was the one checked); now a 422 page naming the
    field, nothing decided. A field the page does not read may still repeat."""
    item = _seed(api_app)
    before = _statuses(api_app)
    assert client.get(f"/dashboard/review?token={ADMIN}").status_code == 200
    scope = '["agent-1",null,null]'
    for data in ({"csrf": csrf_token(ADMIN), "scope": ['["agent-9",null,null]', scope]},
                 {"csrf": ["0" * 64, csrf_token(ADMIN)], "scope": scope}):
        r = client.post(f"/dashboard/review/{item}/approve", data=data, follow_redirects=False)
        assert r.status_code == 422 and r.headers["content-type"].startswith("text/html"), r.text
        assert 'id="invalid"' in r.text and "given twice; give it once" in r.text, r.text
    assert _statuses(api_app) == before
    page = client.get("/dashboard/review", params=[("scope", scope), ("scope", scope)])
    assert page.status_code == 422 and "query.scope: given twice" in page.text
    leftovers = client.get("/dashboard/review", params=[("scope", scope), ("u", "1"), ("u", "2")])
    assert leftovers.status_code == 200 and f'id="approve-{item}"' in leftovers.text
