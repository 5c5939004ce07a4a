"""The MCP tools' refusals through the SDK's own client, in process (worker.mcp.tools): every
argument no note, run or item can take is one ``invalid:`` line and changes nothing, on SQLite
and PostgreSQL. (tests/mcp/test_server.py drives the same tools through a real subprocess.)"""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

import anyio  # noqa: E402
from mcp import Client  # noqa: E402

from tests.mcp.test_server import _refused, _states  # noqa: E402
from tests.mcp.test_server_review import _seed as _seed_review  # noqa: E402
from tests.support.factories import add_notes  # noqa: E402
from worker.app import App  # noqa: E402
from worker.domain.types import Scope  # noqa: E402
from worker.mcp.server import stdio_server  # noqa: E402


def _refusals(app: App, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    async def scenario() -> list[str]:
        async with Client(stdio_server(app, Scope("agent-a"))) as client:
            return [await _refused(client, tool, **args) for tool, args in calls]

    return anyio.run(scenario)


BAD_IDS = [["a0", "b\x00"], ["a0", "\ud800"], ["a0", "b" * 65], ["a0", " "],
           [f"n{i}" for i in range(5000)]]


@pytest.mark.parametrize("ids", BAD_IDS, ids=["nul", "surrogate", "65", "blank", "5000"])
def test_fuse_and_keep_apart_refuse_ids_no_note_can_have(app: App, ids: list[str]) -> None:
    """A NUL, a lone surrogate, a 65-character or blank id, or 5,000 ids are ``invalid`` (as the
    API's 422), never ``internal`` or a lookup; nothing changes (before: a surrogate was an
    internal error on both backends and a NUL one on PostgreSQL)."""
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."},
              {"id": "a1", "agent_id": "agent-a", "content": "Prefers green tea at noon."})
    before = _states(app, "agent-a")
    answers = _refusals(app, [("fuse", {"source_ids": ids, "fused_content": "Prefers tea."}),
                              ("keep_apart", {"source_ids": ids})])
    assert all(a.split(": ", 1)[1].startswith("invalid: ") and "source id" in a
               for a in answers), answers
    assert _states(app, "agent-a") == before


def test_fuse_and_keep_apart_refuse_a_source_changed_since_it_was_judged(app: App) -> None:
    """The versions ``list_candidates`` showed: a source changed since is ``conflict:`` naming
    it and both versions, and nothing changes; a version of the wrong type is ``invalid``."""
    from tests.support.host_writes import host_sets

    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."},
              {"id": "a1", "agent_id": "agent-a", "content": "Prefers green tea at noon."})
    host_sets(app, "a1", content="Prefers coffee at noon.", version=2)
    before = _states(app, "agent-a")
    judged = {"a0": 1, "a1": 1}
    answers = _refusals(app, [
        ("fuse", {"source_ids": ["a0", "a1"], "fused_content": "Prefers green tea at noon.",
                  "source_versions": judged}),
        ("keep_apart", {"source_ids": ["a0", "a1"], "source_versions": judged}),
        ("keep_apart", {"source_ids": ["a0", "a1"], "source_versions": {"a1": "2"}}),
    ])
    assert [a.split(": ", 2)[1] for a in answers] == ["conflict", "conflict", "invalid"], answers
    assert all("note a1 is at version 2, not version 1" in a for a in answers[:2])
    assert _states(app, "agent-a") == before


@pytest.mark.parametrize(("reason", "says"), [
    # a lone surrogate: before, an internal error from the driver (the API's schema: 422)
    ("no \ud800", "invalid: reason"),
    # nothing visible: before, recorded as the reason a reviewer and later runs read
    ("\u200b\u3164", "invalid: reason has no visible text"),
])
def test_review_decline_refuses_a_reason_no_one_can_store_or_read(app: App, reason: str,
                                                                   says: str) -> None:
    """A reason no backend can store or with nothing visible is ``invalid`` naming the reason,
    and the item stays open."""
    items = _seed_review(app)
    item = items["agent-a"][0]
    (answer,) = _refusals(app, [("review_decline", {"item_id": item, "reason": reason})])
    assert says in answer, answer
    with app.uow() as uow:
        row = uow.review.get(Scope("agent-a"), item)
        assert row is not None and row.status == "open"


@pytest.mark.parametrize(("tool", "limit"), [("list_candidates", 0), ("list_candidates", -1),
                                             ("list_candidates", 501), ("review_list", 0),
                                             ("review_list", -5), ("review_list", 1001)])
def test_limits_out_of_range_are_invalid_as_over_the_api(app: App, tool: str, limit: int) -> None:
    """A zero, negative or too large limit is ``invalid`` naming the range, as the API answers
    422 (before: it was silently clamped to 1 or the maximum)."""
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."})
    (answer,) = _refusals(app, [(tool, {"limit": limit})])
    assert "invalid: limit must be" in answer, answer


@pytest.mark.parametrize(("tool", "args", "field"), [
    ("remember", {"content": ["CANARY-7f3 the user's secret"]}, "content"),
    ("fuse", {"source_ids": "CANARY-7f3", "fused_content": "x"}, "source_ids"),
    ("fuse", {"source_ids": ["a0", "a1"], "fused_content": {"CANARY-7f3": 1}}, "fused_content"),
    ("review_show", {"item_id": "CANARY-7f3"}, "item_id"),
])
def test_arguments_of_the_wrong_type_are_one_invalid_line_without_the_value(
        app: App, tool: str, args: dict[str, Any], field: str) -> None:
    """An argument the tool's schema refuses answers ``invalid: <field>: <rule>`` on one line,
    as the API's 422 names the field and the rule (before: the SDK's multi-line pydantic dump
    quoted the value, note text included, and carried no code)."""
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."})
    before = _states(app, "agent-a")
    (answer,) = _refusals(app, [(tool, args)])
    assert f"invalid: {field}: " in answer and "\n" not in answer, answer
    assert "CANARY" not in answer
    assert _states(app, "agent-a") == before


def test_a_refusal_quoting_note_words_reaches_the_caller_but_never_the_log(
        app: App, caplog: pytest.LogCaptureFixture) -> None:
    """A strict fuse is refused naming the invented word and the flipped clause (the caller's
    model needs them to fix its text); the server log at INFO and below has neither (R21;
    before: the SDK logged every refusal's text at INFO, as `dream mcp` runs by default)."""
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Drinks green tea each morning."},
              {"id": "a1", "agent_id": "agent-a", "content": "Drinks green tea in the morning."})
    caplog.set_level(logging.DEBUG)
    (answer,) = _refusals(app, [("fuse", {
        "source_ids": ["a0", "a1"], "strict": True,
        "fused_content": "Never drinks green tea with Quuxcanary each morning."})])
    assert "invalid: fused_content is not grounded" in answer and "quuxcanary" in answer
    logged = caplog.text.lower()
    assert "quuxcanary" not in logged and "green tea" not in logged, caplog.text


@pytest.mark.parametrize("run_id", ["fuse-\ud800", "fuse-a\x00", "remember-" + "r" * 60])
@pytest.mark.parametrize("tool", ["undo_run", "dream_status"])
def test_a_run_id_no_run_can_have_is_invalid_before_any_read(app: App, tool: str,
                                                             run_id: str) -> None:
    """A run or undo id with a lone surrogate, a NUL or over 64 characters is ``invalid``
    whatever its prefix (before: undo_run looked a ``fuse-`` id with a surrogate up in the
    operation log first, an internal error from the driver)."""
    (answer,) = _refusals(app, [(tool, {"run_id": run_id})])
    assert "invalid: run_id" in answer, answer


def test_a_database_that_is_down_is_unavailable_not_internal() -> None:
    """Every tool over a database that refuses connections answers ``unavailable`` saying to
    retry, without the deployment's host (before: ``internal: the tool failed
    (OperationalError)``, logged as a bug)."""
    from structlog.testing import capture_logs

    from worker.app import build_app
    from worker.config import Settings

    app = build_app(Settings(database_url="postgresql://nobody@127.0.0.1:1/x",
                             llm_provider="none"))
    try:
        with capture_logs() as logs:
            answers = _refusals(app, [("remember", {"content": "Prefers tea."}),
                                      ("dream_status", {}),
                                      ("review_list", {}),
                                      ("keep_apart", {"source_ids": ["a0", "a1"]})])
    finally:
        app.dispose()
    for answer in answers:
        assert answer.endswith("unavailable: the database is unavailable; retry later (the "
                               "server log says why)"), answer
        assert "127.0.0.1" not in answer
    events = [e["event"] for e in logs]
    assert "mcp.tool_failed" not in events and "mcp.database_failed" in events


def test_review_list_with_an_unknown_status_names_every_status_it_takes(app: App) -> None:
    """``any`` lists every item, and a status it does not know is refused naming all six:
    the line used to leave ``any`` out."""
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Likes tea."})
    (answer,) = _refusals(app, [("review_list", {"status": "bogus"})])
    assert answer.endswith("invalid: status must be one of open, approved, declined, stale, "
                           "undone, any"), answer


def test_review_list_by_a_run_of_another_scope_or_none_is_not_found(app: App) -> None:
    """review_list(run_id=...) naming agent-b's run or no run is ``not_found`` (the same line
    for both), never an empty list; dream_status(run_id="") is a malformed id, not the
    scope's status."""
    from worker.runs import service

    add_notes(app, {"id": "b0", "agent_id": "agent-b", "content": "Likes chess."},
              {"id": "a0", "agent_id": "agent-a", "content": "Likes tea."})
    theirs = service.create_run(app, Scope("agent-b"), force=True)
    assert theirs is not None
    answers = _refusals(app, [("review_list", {"run_id": theirs}),
                              ("review_list", {"run_id": "no-such-run"}),
                              ("dream_status", {"run_id": ""})])
    assert [a.split(": ", 1)[1].split(":")[0] for a in answers] == ["not_found", "not_found",
                                                                  "invalid"], answers
    assert answers[0].replace(theirs, "ID") == answers[1].replace("no-such-run", "ID")


def test_arguments_of_the_wrong_type_are_invalid_never_converted(app: App) -> None:
    """The SDK read "1" as item 1, "5" or true as a limit and "yes" as a flag; they are
    ``invalid: <field>: <rule>`` now, and nothing changes."""
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."},
              {"id": "a1", "agent_id": "agent-a", "content": "Prefers green tea at noon."})
    before = _states(app, "agent-a")
    answers = _refusals(app, [("review_show", {"item_id": "1"}),
                              ("review_approve", {"item_id": "1"}),
                              ("review_list", {"limit": "5"}),
                              ("list_candidates", {"limit": True}),
                              ("start_dream", {"force": "yes"}),
                              ("remember", {"content": "Likes tea.", "importance": "0.5"}),
                              ("fuse", {"source_ids": ["a0", "a1"], "fused_content": "Tea.",
                                        "strict": "no"})])
    fields = ["item_id", "item_id", "limit", "limit", "force", "importance", "strict"]
    assert all(a.split(": ", 1)[1].startswith("invalid: ") for a in answers), answers
    assert [a.split("invalid: ", 1)[1].split(":")[0] for a in answers] == fields, answers
    assert _states(app, "agent-a") == before


def test_an_argument_the_tool_does_not_take_is_invalid_not_ignored(app: App) -> None:
    """The SDK ignored unknown arguments: review_decline(reasn=...) declined with no reason,
    undo_run(force=true) undid without cascading. Each is ``invalid: unknown argument`` naming
    what the tool takes, and nothing changes (the API's 422 for an unknown field)."""
    items = _seed_review(app)
    before = _states(app, "agent-a")
    answers = _refusals(app, [("review_decline", {"item_id": items["agent-a"][0], "reasn": "x"}),
                              ("review_list", {"staus": "any"}),
                              ("remember", {"content": "Likes tea.", "importance": 0.5,
                                            "tpye": "Preference"})])
    assert [a.split(": ", 1)[1].split(";")[0] for a in answers] == [
        "invalid: unknown argument 'reasn'", "invalid: unknown argument 'staus'",
        "invalid: unknown argument 'tpye'"], answers
    assert "takes all, item_id, reason, run_id" in answers[0]
    assert _states(app, "agent-a") == before
    with app.uow() as uow:
        assert {r.status for r in uow.review.list(Scope("agent-a"), status=None)} == {"open"}


def test_a_broker_that_does_not_answer_is_said_without_its_host(tmp_path: Any) -> None:
    """start_dream with DREAM_BROKER_URL naming a dead broker answered the broker's address and
    "check DREAM_BROKER_URL" to the MCP client; now one generic line, the address in the
    server log (as a database failure), and no run."""
    from structlog.testing import capture_logs

    from tests.conftest import make_sqlite_app

    app = make_sqlite_app(tmp_path, broker_url="redis://:s3cret@127.0.0.1:1/0")
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."})
    with capture_logs() as logs:
        [answer] = _refusals(app, [("start_dream", {"force": True})])
    with app.uow() as uow:
        assert uow.runs.list(None, limit=5) == []
    app.dispose()
    assert answer.split(": ", 1)[1].startswith("unavailable: the run queue"), answer
    assert "127.0.0.1" not in answer and "DREAM_" not in answer
    assert "DREAM_BROKER_URL" in next(e for e in logs if e["event"] == "mcp.service_failed")["error"]


def test_an_unknown_tool_names_the_tools_there_are(app: App) -> None:
    """The SDK answered "Unknown tool: x" and no more; the line now says where to look and
    which tools there are."""
    [answer] = _refusals(app, [("remeber", {"content": "Likes tea."})])
    assert answer.split(": ", 1)[1].startswith("not_found: no tool 'remeber'; tools/list"), answer
    assert "remember" in answer.split(";", 1)[1] and "review_approve" in answer


def test_a_decline_reason_of_several_lines_is_invalid(app: App) -> None:
    """review_decline(reason="a\\nb") printed a made-up line in `dream review show`; invalid
    now, and the item stays open."""
    items = _seed_review(app)
    [answer] = _refusals(app, [("review_decline", {"item_id": items["agent-a"][0],
                                                   "reason": "dup\r\nFAKE: approved"})])
    assert answer.split(": ", 1)[1].startswith("invalid: reason has a line break"), answer
    with app.uow() as uow:
        assert {r.status for r in uow.review.list(Scope("agent-a"), status=None)} == {"open"}


def test_review_list_pages_with_an_offset_as_the_api_does(app: App) -> None:
    """review_list stopped at its limit (at most 1,000) with no way to the items after it; it
    takes the API's ``offset`` now (a negative or boolean one is ``invalid``)."""
    items = _seed_review(app)["agent-a"]
    assert len(items) >= 2

    async def scenario() -> list[Any]:
        async with Client(stdio_server(app, Scope("agent-a"))) as client:
            pages: list[Any] = []
            for offset in (0, 1):
                result = await client.call_tool("review_list", {"limit": 1, "offset": offset})
                assert not result.is_error, result
                pages.append([i["id"] for i in result.structured_content["items"]])
            pages.append(await _refused(client, "review_list", offset=-1))
            pages.append(await _refused(client, "review_list", offset=True))
            return pages

    first, second, negative, boolean = anyio.run(scenario)
    assert (first, second) == ([items[0]], [items[1]])
    assert "invalid: offset must be a whole number" in negative
    assert "invalid: offset" in boolean


def test_an_item_id_out_of_range_is_invalid_as_over_the_api(app: App) -> None:
    """0, a negative and a 40-digit item id are the API's 422 (``invalid`` naming the range),
    not ``not_found`` ("no review item -5"), for every review tool; nothing changes."""
    add_notes(app, {"id": "a0", "agent_id": "agent-a", "content": "Prefers green tea."})
    before = _states(app, "agent-a")
    calls = [(tool, {"item_id": value}) for tool in ("review_show", "review_approve",
                                                     "review_decline")
             for value in (0, -5, 10**40)]
    answers = _refusals(app, calls)
    assert all(a.split(": ", 1)[1].startswith("invalid: item_id must be a whole number from 1")
               for a in answers), answers
    assert _states(app, "agent-a") == before
