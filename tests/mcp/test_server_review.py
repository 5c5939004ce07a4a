"""The MCP review_* tools through the SDK's own client over stdio (a real `dream mcp`
subprocess): a propose dream's items listed, shown, approved and declined for the bound scope
only; another scope's item is not found and a stale item is refused."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

import anyio  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from tests.mcp.test_server import DREAM, ROOT, _call, _env, _refused, _states  # noqa: E402
from tests.support.factories import add_entities, add_notes  # noqa: E402
from worker.app import App  # noqa: E402
from worker.domain.types import Scope  # noqa: E402
from worker.runs import service  # noqa: E402
from worker.store.models import NoteRow  # noqa: E402

NOTES = [("tea-1", "Prefers green tea."), ("tea-2", "Prefers green tea in the morning."),
         ("old-1", "Is on call this week.")]


def _seed(app: App) -> dict[str, list[int]]:
    """The same store in agent-a and agent-b, both in propose mode, dreamed once each."""
    items: dict[str, list[int]] = {}
    for agent in ("agent-a", "agent-b"):
        add_entities(app, {"kind": "agent", "id": agent, "apply_mode": "propose"})
        add_notes(app, *({"id": f"{agent}-{i}", "agent_id": agent, "content": c,
                          **({"expires_at": "2001-01-01T00:00:00+00:00"} if i == "old-1"
                             else {})} for i, c in NOTES))
        run_id = service.create_run(app, Scope(agent), force=True)
        assert run_id is not None
        service.execute_run(app, run_id)
        with app.uow() as uow:
            items[agent] = [r.id for r in uow.review.list(Scope(agent))]
    return items


def test_review_tools_decide_the_bound_scopes_items_only(app: App) -> None:
    """As agent-a: list and show its two items, approve the merge, decline the archive; agent-b's
    items are not found and stay open; an approval after a host edit is refused as stale."""
    items = _seed(app)
    merge, expired = items["agent-a"]
    b_before = _states(app, "agent-b")
    params = StdioServerParameters(command=DREAM, args=["mcp", "--agent", "agent-a"],
                                   env=_env(app), cwd=str(ROOT))

    async def scenario() -> None:
        async with Client(params) as client:
            listed = (await _call(client, "review_list"))["items"]
            assert [(i["id"], i["kind"]) for i in listed] == [(merge, "merge"),
                                                              (expired, "archive")]
            shown = (await _call(client, "review_show", item_id=merge))["item"]
            assert {n["id"] for n in shown["notes"]} == {"agent-a-tea-1", "agent-a-tea-2"}
            for other in items["agent-b"]:
                assert "not_found" in await _refused(client, "review_show", item_id=other)
                assert "not_found" in await _refused(client, "review_approve", item_id=other)
                assert "not_found" in await _refused(client, "review_decline", item_id=other)
            answer = await _call(client, "review_approve", item_id=merge)
            approved = answer["items"]
            assert approved[0]["status"] == "approved" and approved[0]["run_id"]
            assert answer["outcome"] == "done"
            declined = (await _call(client, "review_decline", all=True, reason="still on call"))
            assert [i["id"] for i in declined["items"]] == [expired]
            assert (await _call(client, "review_list"))["items"] == []
            refused = await _refused(client, "review_approve")
            assert "invalid: name one of item_id" in refused

    anyio.run(scenario)
    states = _states(app, "agent-a")
    assert states["agent-a-tea-1"][0] == states["agent-a-tea-2"][0] == "revoked"
    assert states["agent-a-old-1"][0] == "active"
    assert _states(app, "agent-b") == b_before

    with app.uow() as uow:  # the host edits agent-b's merge member: its item goes stale
        uow.session.query(NoteRow).filter(NoteRow.id == "agent-b-tea-2").update({"version": 5})
        uow.commit()
    params = StdioServerParameters(command=DREAM, args=["mcp", "--agent", "agent-b"],
                                   env=_env(app), cwd=str(ROOT))

    async def stale() -> None:
        async with Client(params) as client:
            refused = await _refused(client, "review_approve", item_id=items["agent-b"][0])
            assert "conflict" in refused and "stale" in refused and "agent-b-tea-2" in refused

    anyio.run(stale)
