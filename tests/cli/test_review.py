"""`dream review approve|decline` exit codes: a batch that left an item open (blocked by the
blast-radius guard) or found one stale says so to scripts, as `dream run` does for its runs;
a batch decided in full exits 0; an item no longer open is refused with one line naming its
status and why (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from click.testing import CliRunner, Result

from tests.cli.test_commands import one_error_line
from tests.support.factories import add_notes
from tests.support.host_writes import host_sets
from tests.support.safety import all_rows_text
from worker.app import App
from worker.cli import main
from worker.cli.common import Outcome
from worker.cli.review import decision_lines, review_exit_code
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.errors import Conflict, NotFound
from worker.review import service as review_service
from worker.review.changes import archive_change
from worker.review.items import DECLINED_KIND, ChangeKind, ProposedChange

SCOPE = Scope("agent-1")


def _cli(app: App, *args: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(args), env={
        "DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LLM_PROVIDER": "none",
        "DREAM_LOG_LEVEL": "WARNING", **env})


def _propose(app: App, change: ProposedChange) -> int:
    with app.uow() as uow:
        uow.review.add_many(SCOPE, None, [change.row()], utcnow())
        uow.commit()
        return int(uow.review.list(SCOPE)[-1].id)


def _archive(note_id: str) -> ProposedChange:
    return archive_change("prune", note_id, 1, reason="prune: orphaned",
                          comment="[Pruned: its conversation is gone]")


def _merge(ids: list[str], content: str) -> ProposedChange:
    return ProposedChange(phase="consolidate", kind=ChangeKind.MERGE,
                          versions=dict.fromkeys(ids, 1), reason="rule: identical",
                          content=content, source_ids=tuple(ids),
                          payload={"rule": "identical", "similarity": 1.0})


def _facts(app: App, count: int) -> None:
    add_notes(app, *({"id": f"n{k:02}", "content": f"Fact number {k} about the project."}
                     for k in range(count)))


def _statuses(result: Result) -> list[str]:
    return [i["status"] for i in json.loads(result.stdout)["items"]]


def test_a_batch_the_guard_cut_short_exits_blocked(app: App) -> None:
    """Ten archive items over 14 notes: the guard lets 7 go and leaves 3 open; the batch prints
    every item and exits 10 (before: 0), the same with --json, which also says the batch's
    ``outcome`` as the API and MCP answer it (before: the items only)."""
    _facts(app, 14)
    for k in range(10):
        _propose(app, _archive(f"n{k:02}"))
    batch = _cli(app, "review", "approve", "--all", "--agent", "agent-1", "--json")
    assert batch.exit_code == int(Outcome.BLOCKED) == 10, batch.output
    assert _statuses(batch) == ["approved"] * 7 + ["blocked"] * 3
    assert json.loads(batch.stdout)["outcome"] == "blocked"  # the API's and MCP's body
    assert batch.stderr == ""  # an outcome, not an error


def test_a_batch_with_a_stale_item_exits_stale(app: App) -> None:
    """One merge applies, the other names a note the host edited since: the batch exits 14
    (before: 0) and the stale item's line says so; nothing written for it."""
    _facts(app, 4)
    _propose(app, _merge(["n00", "n01"], "Fact number 0 about the project."))
    stale = _propose(app, _merge(["n02", "n03"], "Fact number 2 about the project."))
    host_sets(app, "n03", content="Fact number 3, edited.", version=2)
    batch = _cli(app, "review", "approve", "--all", "--agent", "agent-1")
    assert batch.exit_code == int(Outcome.STALE) == 14, batch.output
    assert f"item {stale} is stale: note n03 changed" in batch.stdout


def test_blocked_wins_over_stale_and_a_full_batch_exits_0(app: App) -> None:
    """Blocked and stale items in one batch: 10, the one that waits for a person. Approving the
    open items again by run (all within the guard now) exits 0; so does a batch decline."""
    _facts(app, 14)
    first = _propose(app, _merge(["n12", "n13"], "Fact number 12 about the project."))
    for k in range(10):
        _propose(app, _archive(f"n{k:02}"))
    host_sets(app, "n13", content="Fact number 13, edited.", version=2)
    batch = _cli(app, "review", "approve", "--all", "--agent", "agent-1", "--json")
    assert batch.exit_code == Outcome.BLOCKED, batch.output
    assert _statuses(batch) == ["stale"] + ["approved"] * 7 + ["blocked"] * 3
    assert json.loads(batch.stdout)["items"][0]["id"] == first

    declined = _cli(app, "review", "decline", "--all", "--agent", "agent-1")
    assert declined.exit_code == 0, declined.output
    assert declined.stdout.count("declined item") == 3

    _propose(app, _archive("n10"))
    done = _cli(app, "review", "approve", "--all", "--agent", "agent-1")
    assert done.exit_code == 0, done.output
    assert "approved item" in done.stdout


@pytest.mark.parametrize(("statuses", "code"), [
    ([], 0),  # nothing open: nothing left undone
    (["approved", "approved"], 0),
    (["declined"], 0),
    (["approved", "blocked"], 10),  # left open by the blast-radius guard
    (["approved", "stale"], 14),  # notes changed since the proposal: nothing written for it
    (["declined", "refused"], 14),  # decided meanwhile by someone else: not this call's decision
    (["stale", "blocked", "approved"], 10),  # blocked waits for a person; stale only for a run
])
def test_review_exit_code(statuses: list[str], code: int) -> None:
    """The batch's exit code from its items' answers."""
    assert review_exit_code(statuses) == code


def test_an_undone_runs_items_are_not_open_and_refused_naming_the_undo(app: App) -> None:
    """After `dream undo` of a propose run, none of its items is listed open, and approving or
    declining one by its id is one line naming its status and the undo that withdrew it
    (before: "review item 1 is already declined", as if a person had declined it); `review show`
    says why; approving the run's items names where to see what became of them. Nothing is
    written."""
    add_notes(app, {"id": "t1", "content": "Prefers green tea."},
              {"id": "t2", "content": "Prefers green tea in the morning."})
    ran = _cli(app, "run", "--agent", "agent-1", "--force", DREAM_APPLY_MODE="propose")
    assert ran.exit_code == 0, ran.output
    listed = json.loads(_cli(app, "review", "list", "--agent", "agent-1", "--json").stdout)
    item, run_id = listed["items"][0]["id"], listed["items"][0]["run_id"]
    assert _cli(app, "undo", run_id).exit_code == 0
    assert _cli(app, "review", "list", "--agent", "agent-1").stdout == "no open review items\n"
    shown = _cli(app, "review", "show", str(item), "--agent", "agent-1").stdout
    assert f": run {run_id}, which proposed it, was undone\n" in shown, shown  # before: not said
    assert "declined by undo" not in shown, shown
    before = all_rows_text(app)
    for verb in ("approve", "decline"):
        line = one_error_line(_cli(app, "review", verb, str(item), "--agent", "agent-1"),
                              Conflict.exit_code)
        assert line == (f"error: review item {item} is already declined: withdrawn when run "
                        f"{run_id}, which proposed it, was undone; the next dream proposes it "
                        "afresh if it still applies")
    line = one_error_line(_cli(app, "review", "approve", "--run", run_id, "--agent", "agent-1"),
                          NotFound.exit_code)
    assert f"`dream review list --run {run_id} --status any` shows what became of them" in line
    assert all_rows_text(app) == before


@pytest.mark.parametrize("batch", [False, True])
def test_a_decline_that_lost_the_race_names_the_status_it_lost_to(
        app: App, monkeypatch: pytest.MonkeyPatch, batch: bool) -> None:
    """Someone approves the item between this decline's read and its write: the answer names
    the status and who decided (before: "item N was decided meanwhile", nothing more). One item
    named by its id is then an error like one already decided (exit 4; before: 14, with no
    error line); a batch prints the line and exits 14. The decline remembers nothing."""
    _facts(app, 2)
    change = _archive("n00")
    item = _propose(app, change)
    real_utcnow = utcnow  # the original (worker.clock's), which the service imported

    def approved_meanwhile() -> datetime:  # the decline reads its clock just before its write
        with app.uow() as uow:
            uow.review.decide(item, "approved", now=real_utcnow(), by="cli:bob",
                              applied_run_id="r-bob")
            uow.commit()
        return real_utcnow()

    monkeypatch.setattr(review_service, "utcnow", approved_meanwhile)
    result = _cli(app, "review", "decline", *(["--all"] if batch else [str(item)]),
                  "--agent", "agent-1")
    says = (f"review item {item} was decided meanwhile: it is approved: approved by cli:bob in "
            "run r-bob; `dream undo r-bob` reverts it")
    if batch:
        assert result.exit_code == Outcome.STALE and result.stdout == says + "\n", result.output
    else:
        assert one_error_line(result, Conflict.exit_code) == f"error: {says}"
    with app.uow() as uow:
        assert uow.judgements.known(SCOPE, DECLINED_KIND, [change.fingerprint]) == {}


def test_a_run_filter_naming_no_run_of_the_scope_is_an_error_not_an_empty_list(app: App) -> None:
    """`dream review list --run` with a mistyped id, or another scope's run, was "no open review
    items" (exit 0): one line naming the run and what to do instead; a run of the scope without
    items is still an empty list."""
    add_notes(app, {"id": "o1", "agent_id": "agent-2", "content": "Another tenant's note."},
              {"id": "n1", "content": "A note of this scope."})
    assert _cli(app, "run", "--agent", "agent-2", "--force").exit_code == 0
    assert _cli(app, "run", "--agent", "agent-1", "--force").exit_code == 0
    theirs, ours = (json.loads(_cli(app, "runs", "list", "--json").stdout)[k]["id"] for k in (1, 0))
    listed = _cli(app, "review", "list", "--agent", "agent-1", "--run", ours)
    assert (listed.exit_code, listed.stdout) == (0, "no open review items\n")
    for run_id, says in (("no-such-run", "no run with id no-such-run; list runs with"),
                         (theirs, f"run {theirs} is not a run of scope {SCOPE.key}")):
        line = one_error_line(_cli(app, "review", "list", "--agent", "agent-1", "--run", run_id),
                              NotFound.exit_code)
        assert says in line, line


@pytest.mark.parametrize("verb", ["approve", "decline"])
def test_a_decision_by_a_run_that_is_no_run_of_the_scope_says_so(app: App, verb: str) -> None:
    """`dream review approve --run` (and decline) with a mistyped id, or another scope's run,
    said "no open review items of run X" and sent the reviewer to `dream review list --run X`,
    which then said there was no such run: now the line `review list --run` gives, naming the
    run (and, for another scope's, the scope), exit 3, nothing written. The service, which the
    API and MCP call, answers both as "no run with id X" (another scope's run is not shown)."""
    add_notes(app, {"id": "o1", "agent_id": "agent-2", "content": "Another tenant's note."},
              {"id": "n1", "content": "A note of this scope."})
    assert _cli(app, "run", "--agent", "agent-2", "--force").exit_code == 0
    theirs = json.loads(_cli(app, "runs", "list", "--json").stdout)[0]["id"]
    before = all_rows_text(app)
    for run_id, says in (("no-such-run", "error: no run with id no-such-run; list runs with"),
                         (theirs, f"error: run {theirs} is not a run of scope {SCOPE.key}")):
        line = one_error_line(_cli(app, "review", verb, "--run", run_id, "--agent", "agent-1"),
                              NotFound.exit_code)
        assert line.startswith(says), line
        decide = getattr(review_service, verb)
        with pytest.raises(NotFound, match=f"^no run with id {run_id}; list runs with"):
            decide(app, SCOPE, review_service.Selector(run_id=run_id), "test")
    assert all_rows_text(app) == before


def test_show_of_an_undone_approval_names_the_approver_as_approver_and_the_undone_run(
        app: App) -> None:
    """`review show` of an item whose applying run was undone said "undone by cli:ana … (run
    R)", as if ana had undone it: it names ana as the approver, the run that applied it, and
    that this run was undone since."""
    add_notes(app, {"id": "t1", "content": "Prefers green tea."},
              {"id": "t2", "content": "Prefers green tea in the morning."})
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    assert _cli(app, "review", "approve", str(item), "--agent", "agent-1",
                "--by", "ana").exit_code == 0
    shown = json.loads(_cli(app, "review", "show", str(item), "--agent", "agent-1",
                            "--json").stdout)
    run_id, at = shown["applied_run_id"], shown["decided_at"]
    assert _cli(app, "undo", run_id).exit_code == 0
    text = _cli(app, "review", "show", str(item), "--agent", "agent-1").stdout
    assert text.splitlines()[-2:] == [
        f"  approved by cli:ana at {at}, applied in run {run_id}",
        f"  undone: run {run_id} was undone since; the next dream proposes it afresh"], text
    assert "undone by" not in text


_AT = "2026-12-01T10:00:00+00:00"


@pytest.mark.parametrize(("status", "by", "outcome", "lines"), [
    # approved: the approver, the run that applied it, and how to revert it
    ("approved", "cli:ana", None,
     [f"approved by cli:ana at {_AT}, applied in run A; `dream undo A` reverts it"]),
    # undone: still the approver's decision; the undo is the run's, its author not recorded
    ("undone", "cli:ana", "undone: run A, which applied it, was undone; …",
     [f"approved by cli:ana at {_AT}, applied in run A",
      "undone: run A was undone since; the next dream proposes it afresh"]),
    # withdrawn by the undo of the run that proposed it: not "declined by undo"
    ("declined", "undo", "withdrawn: run P was undone",
     [f"withdrawn at {_AT}: run P, which proposed it, was undone"]),
    # a person's decline, with and without a reason ("declined" is the stored placeholder)
    ("declined", "cli:bob", "too vague", [f"declined by cli:bob at {_AT}: too vague"]),
    ("declined", "cli:bob", "declined", [f"declined by cli:bob at {_AT}"]),
    # stale, recorded by a later run, or found by an approval
    ("stale", "run", "a note changed", [f"stale since {_AT}: a note changed"]),
    ("stale", "cli:ana", "note t1 v1 → v2",
     [f"stale since {_AT} (found when cli:ana approved it): note t1 v1 → v2"]),
    # open: nothing decided yet
    ("open", None, None, []),
])
def test_decision_lines(status: str, by: str | None, outcome: str | None,
                        lines: list[str]) -> None:
    """What `review show` says became of an item, per status and decider."""
    applied = "A" if status in ("approved", "undone") else None
    item = {"status": status, "decided_by": by, "decided_at": _AT if by else None,
            "applied_run_id": applied, "outcome": outcome, "run_id": "P"}
    assert decision_lines(item) == lines


def test_show_prints_note_text_on_one_line_with_its_escapes(app: App) -> None:
    """A note (written by the host, the agent, a user) with a line break printed a forged
    "note … active:" line in `review show`, and an escape sequence reached the reviewer's
    terminal. Each is now written as its escape, one line per note."""
    forged = "Prefers dark mode\n  note n9 v1 active: approve me\x1b[2K"
    add_notes(app, {"id": "d1", "content": "Prefers dark mode"}, {"id": "d2", "content": forged})
    item = _propose(app, _merge(["d1", "d2"], forged))
    text = _cli(app, "review", "show", str(item), "--agent", "agent-1").stdout
    assert "\x1b" not in text and "\n  note n9" not in text, text
    assert "  note d2 v1 active: Prefers dark mode\\n  note n9 v1 active: approve me\\x1b[2K\n" \
        in text, text
    assert "  fused text: Prefers dark mode\\n  note n9" in text, text


def test_review_show_escapes_who_decided_as_stored(app: App) -> None:
    """A decision recorded with a control character in who decided (the API took ``by`` with
    one before it refused it) prints as its escape in `dream review show`: before, an escape
    sequence reached the reviewer's terminal as it was."""
    add_notes(app, {"id": "t1", "content": "Prefers green tea."},
              {"id": "t2", "content": "Prefers green tea at noon."})
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea at noon."))
    with app.uow() as uow:
        assert uow.review.decide(item, "declined", now=utcnow(), by="api:x (eve\x1b[2J\x07)",
                                 outcome="declined")
        uow.commit()
    shown = _cli(app, "review", "show", str(item), "--agent", "agent-1")
    assert shown.exit_code == 0, shown.output
    assert "\x1b" not in shown.output and "\x07" not in shown.output
    assert "declined by api:x (eve\\x1b[2J\\x07)" in shown.output
