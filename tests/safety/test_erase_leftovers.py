"""What an erasure left behind (found by the erasure pass): a user's id in the scope keys of
their runs, steps and audit rows; a review flag whose review was erased; unrelated records
scrubbed for sharing a word with a one-word note. SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient
from sqlalchemy import select

from tests.api.conftest import auth
from tests.safety.test_erase_records import _merge_item
from tests.support.factories import add_notes
from tests.support.safety import all_rows_text, note_states, run_row
from worker.api import create_api
from worker.app import App
from worker.cli import main
from worker.clock import utcnow
from worker.domain.types import (
    CONTRADICTION_REVIEW_FLAG,
    CONTRADICTION_REVIEW_KIND,
    ERASED_USER,
    RunStatus,
    Scope,
)
from worker.mcp.tools import ScopedTools
from worker.review.service import list_items
from worker.runs import service
from worker.safety.erase import erase
from worker.store.models import DreamRunRow, OperationLogRow, RunStepRow
from worker.store.repositories.erase_records import UNFLAGGED_COMMENT

USER = "person-7q4x"  # appears nowhere but where the user is named
OTHER = "person-2k9m"
SCOPE = Scope("agent-1", "u1")
USER_TOKEN = "user-token-0123456789abcdef"


def _cli(app: App, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    return CliRunner().invoke(main, list(args))


def _dream(app: App, user: str) -> str:
    """A finished in-process run of every phase in the user's scope: the rules merge the two
    notes (operation log, lineage, steps, verdict memory)."""
    add_notes(app, {"user_id": user, "id": f"{user}-d1",
                    "content": "User prefers dark mode in the code editor"},
              {"user_id": user, "id": f"{user}-d2",
               "content": "User prefers dark mode in the code editor at night"})
    run_id = service.create_run(app, Scope("agent-1", user), force=True)
    assert run_id is not None
    assert service.execute_run(app, run_id) == RunStatus.SUCCEEDED.value
    return run_id


def test_erasing_a_user_leaves_no_record_naming_them(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dream erase --user` left the user's id in the scope key (and ``user_id``) of every run,
    run step and operation-log row of their scopes, and a queued run of theirs waiting to run
    on nothing. Now no row names them: the audit trail of those scopes goes with their notes,
    the runs and steps stay under ``[erased]`` (status, timings, usage), the unfinished run is
    cancelled; a second user's erasure in the same agent does not collide with the first, and
    another user's run is still undone."""
    finished = _dream(app, USER)
    kept = _dream(app, OTHER)
    with app.uow() as uow:
        assert uow.session.scalars(select(OperationLogRow.id).where(
            OperationLogRow.scope_key == Scope("agent-1", USER).key)).first() is not None
    waiting = service.create_run(app, Scope("agent-1", USER), force=True)
    assert waiting is not None
    add_notes(app, {"user_id": "third", "content": "likes tea"})
    third = service.create_run(app, Scope("agent-1", "third"), force=True)

    out = _cli(app, monkeypatch, "erase", "--user", USER, "--yes")
    assert out.exit_code == 0, out.output
    assert f"cancelled run {waiting}" in out.output
    assert USER not in all_rows_text(app)
    erased_key = Scope("agent-1", ERASED_USER).key
    with app.uow() as uow:
        runs = {r.id: r for r in uow.session.scalars(
            select(DreamRunRow).where(DreamRunRow.scope_key == erased_key))}
        assert {i: r.status for i, r in runs.items()} == {
            finished: RunStatus.SUCCEEDED.value, waiting: RunStatus.CANCELLED.value}
        assert runs[finished].user_id == ERASED_USER and runs[finished].totals
        steps = uow.session.scalars(select(RunStepRow.scope_key).where(
            RunStepRow.run_id == finished)).all()
        assert steps and set(steps) == {erased_key}
    shown = _cli(app, monkeypatch, "runs", "show", finished)
    assert shown.exit_code == 0 and ERASED_USER in shown.output, shown.output

    again = _cli(app, monkeypatch, "erase", "--user", "third", "--yes")
    assert again.exit_code == 0 and f"cancelled run {third}" in again.output, again.output
    undone = _cli(app, monkeypatch, "undo", kept)
    assert undone.exit_code == 0, undone.output
    states = note_states(app)
    assert {states[f"{OTHER}-d{k}"]["status"] for k in (1, 2)} == {"active"}


def _flag(app: App, run_id: str, pairs: list[tuple[str, str]]) -> None:
    """What the contradictions phase writes for a conflict it keeps for review: the flag and a
    comment on both notes, one review row naming the pair."""
    with app.uow() as uow:
        for a, b in pairs:
            for note, other in ((a, b), (b, a)):
                [n] = uow.notes.get_many([note])
                assert uow.notes.change(
                    n, run_id=run_id, reason="contradictions.flagged", now=utcnow(),
                    flags=sorted({*n.flags, CONTRADICTION_REVIEW_FLAG}),
                    comments=f"[Contradiction flagged for review: conflicts with {other}.]")
            uow.judgements.add_review(SCOPE, CONTRADICTION_REVIEW_KIND, [a, b], "conflict",
                                      run_id, utcnow())
        uow.commit()


def test_a_review_flag_goes_with_the_review_an_erasure_took(app: App) -> None:
    """Erasing one note of a flagged conflict deleted the review row but left the
    ``contradiction_review`` flag on the other note, pointing at nothing. Now the flag goes
    with its last review (a comment says why, the version stays); a note still flagged against
    a note that remains keeps it."""
    add_notes(app, {"id": "a", "user_id": "u1", "content": "User lives in Paris"},
              {"id": "b", "user_id": "u1", "content": "User lives in Berlin"},
              {"id": "c", "user_id": "u1", "content": "User lives in Rome"})
    _flag(app, run_row(app, SCOPE), [("a", "b"), ("a", "c")])
    with app.uow() as uow:
        version = uow.notes.get_many(["a"])[0].version

    erase(app, note_id="b")
    states = note_states(app)
    assert states["a"]["flags"] == [CONTRADICTION_REVIEW_FLAG]  # still against c
    assert states["c"]["flags"] == [CONTRADICTION_REVIEW_FLAG]

    result = erase(app, note_id="c")
    states = note_states(app)
    assert states["a"]["flags"] == []
    assert states["a"]["comments"].endswith(UNFLAGGED_COMMENT)
    assert result.counts["flags_removed"] == 1
    with app.uow() as uow:
        assert uow.judgements.reviews(SCOPE) == []
        assert uow.notes.get_many(["a"])[0].version == version
    assert states["a"]["status"] == "active"


def test_a_one_word_note_takes_only_the_records_that_quote_it(app: App) -> None:
    """Erasing the note "tea" scrubbed every record holding the word (a review item about other
    notes fusing "Drinks coffee, likes tea", another note's comment, a verdict's reason). Now
    a text of one or two words is quoted only where it stands alone (a whole value, or in
    quotation marks or brackets): those records stay, and the ones quoting it still go."""
    add_notes(app, {"id": "x", "user_id": "u1", "content": "tea"},
              {"id": "w", "user_id": "u1", "content": "Drinks coffee"},
              {"id": "z", "user_id": "u1", "content": "Likes tea"})
    run_id = run_row(app, SCOPE)
    now = utcnow()
    with app.uow() as uow:
        [w] = uow.notes.get_many(["w"])
        assert uow.notes.change(w, run_id=run_id, reason="noted", now=now,
                                comments="asked about tea and coffee")
        uow.notes.log(run_id=run_id, scope=SCOPE, entity_id="w", op="update", before=None,
                      after={"quote": 'the note said "tea".'}, reason="quoted", now=now)
        uow.judgements.add_review(SCOPE, "other", ["w", "z"], "both mention tea", run_id, now)
        uow.judgements.add_review(SCOPE, "other", ["w", "z"], "z repeats 'tea'", run_id, now)
        uow.commit()
    kept = _merge_item(app, ["w", "z"], "Drinks coffee, likes tea")
    _merge_item(app, ["w", "z"], "tea")
    result = erase(app, note_id="x")
    assert [i["id"] for i in list_items(app, SCOPE, status=None)] == [kept]
    assert note_states(app)["w"]["comments"] == "asked about tea and coffee"
    with app.uow() as uow:
        assert [r.reason for r in uow.judgements.reviews(SCOPE)] == ["both mention tea"]
        rows = {r.reason: r.after for r in uow.safety.run_log(run_id)}
        assert rows["quoted"] == {"quote": "[erased]"}
    assert result.counts["reviews"] == 1 and result.counts["review_items"] == 1


def test_who_undid_or_cancelled_a_run_is_not_named_by_the_user_after_their_erasure(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run undone through MCP and one cancelled through the API record who did it by the
    caller's label, the scope key with the user in it (``mcp:["agent-1","person-7q4x",null]``),
    in the run's reason and its steps' errors; after `dream erase --user` those rows still named
    the user. Now they name the ``[erased]`` scope, as the runs' keys do."""
    undone = _dream(app, USER)
    ScopedTools(app, Scope("agent-1", USER)).undo_run(undone)
    started = service.create_run(app, Scope("agent-1", USER), force=True)
    assert started is not None
    app.settings.api_tokens = json.dumps({USER_TOKEN: {"agent_id": "agent-1", "user_id": USER}})
    with TestClient(create_api(app)) as client:
        cancelled = client.post(f"/api/runs/{started}/cancel", headers=auth(USER_TOKEN))
    assert cancelled.status_code == 200, cancelled.text
    assert USER in all_rows_text(app)

    out = _cli(app, monkeypatch, "erase", "--user", USER, "--yes")
    assert out.exit_code == 0, out.output
    assert USER not in all_rows_text(app)
    erased = Scope("agent-1", ERASED_USER).key
    with app.uow() as uow:
        runs = {r.id: r for r in uow.session.scalars(select(DreamRunRow))}
        errors = uow.session.scalars(select(RunStepRow.error).where(
            RunStepRow.run_id == started)).all()
    undone_reason = runs[undone].status_reason
    assert undone_reason is not None and undone_reason.startswith(f"undone by mcp:{erased} at ")
    assert runs[started].status_reason == f"cancelled through the API by {erased}"
    assert errors and all(e is not None and erased in e for e in errors)
