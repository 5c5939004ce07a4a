"""`dream review` over items stored through the review repository: approve applies through the
phase's own write path in a run of its own (undoable), a changed note makes an item stale and
refused, decline is remembered, and another scope's item is not found."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tests.support.factories import add_entities, add_notes
from tests.support.host_writes import host_sets
from worker.app import App
from worker.cli import main
from worker.cli.common import Outcome
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.errors import Conflict, NotFound
from worker.review.items import DECLINED_KIND, ChangeKind, ProposedChange
from worker.review.service import list_items
from worker.runs.service import create_run, execute_run
from worker.store.models import NoteRow

SCOPE = Scope("agent-1")
BLOCKED, STALE = Outcome.BLOCKED, Outcome.STALE  # a batch's exit codes (tests/cli/test_review.py)


def _cli(app: App, *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={
        "DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LLM_PROVIDER": "none",
        "DREAM_LOG_LEVEL": "WARNING"})


def _statuses(app: App, agent: str = "agent-1") -> dict[str, tuple[str, str]]:
    with app.uow() as uow:
        rows = uow.session.query(NoteRow).filter(NoteRow.agent_id == agent).all()
        return {r.id: (r.status, r.content) for r in rows}


def _propose(app: App, change: ProposedChange, scope: Scope = SCOPE) -> int:
    with app.uow() as uow:
        uow.review.add_many(scope, None, [change.row()], utcnow())
        uow.commit()
        return int(uow.review.list(scope)[-1].id)


def _merge(ids: list[str], content: str) -> ProposedChange:
    return ProposedChange(phase="consolidate", kind=ChangeKind.MERGE,
                          versions=dict.fromkeys(ids, 1), reason="rule: identical",
                          content=content, source_ids=tuple(ids),
                          payload={"rule": "identical", "similarity": 1.0})


def _seed(app: App) -> None:
    add_notes(app, {"id": "t1", "content": "Prefers green tea."},
              {"id": "t2", "content": "Prefers green tea in the morning."},
              {"id": "c1", "content": "Works from Lisbon."},
              {"id": "c2", "content": "Works from Lisbon on Fridays."},
              {"id": "x1", "agent_id": "agent-2", "content": "Prefers green tea."})


def test_approve_applies_in_its_own_undoable_run(app: App) -> None:
    """Approving a merge item revokes its members into a new note with the fused text, records
    the approver and the approval's run; `dream undo` of that run gives the notes back."""
    _seed(app)
    before = _statuses(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    listed = _cli(app, "review", "list", "--agent", "agent-1", "--json")
    assert listed.exit_code == 0, listed.output
    (shown,) = json.loads(listed.output)["items"]
    assert shown["id"] == item and shown["note_ids"] == ["t1", "t2"]

    approved = _cli(app, "review", "approve", str(item), "--agent", "agent-1", "--by", "ana")
    assert approved.exit_code == 0, approved.output
    after = _statuses(app)
    assert after["t1"][0] == after["t2"][0] == "revoked"
    (new_id,) = set(after) - set(before)
    assert after[new_id] == ("active", "Prefers green tea.")
    detail = json.loads(_cli(app, "review", "show", str(item), "--agent", "agent-1",
                             "--json").output)
    assert detail["status"] == "approved" and detail["decided_by"] == "cli:ana"
    run_id = detail["applied_run_id"]
    assert run_id and run_id in approved.output
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.trigger == "review" and run.status == "succeeded"

    undone = _cli(app, "undo", run_id)
    assert undone.exit_code == 0, undone.output
    restored = _statuses(app)
    assert {k: v for k, v in restored.items() if k != new_id} == before
    assert restored[new_id][0] == "revoked"


def test_an_undone_approval_shows_its_item_undone_not_approved(app: App) -> None:
    """`dream undo` of the run that applied an item: the item no longer reads as approved (it
    is not what the notes show); it is ``undone``, as its run is, still naming its approver
    and that run. Not open again: the apply and the undo moved its notes' versions, so it could
    only be refused as stale; the next run proposes afresh."""
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    approved = _cli(app, "review", "approve", str(item), "--agent", "agent-1", "--by", "ana")
    assert approved.exit_code == 0, approved.output

    def show() -> dict[str, object]:
        shown = _cli(app, "review", "show", str(item), "--agent", "agent-1", "--json")
        assert shown.exit_code == 0, shown.output
        return dict(json.loads(shown.output))

    run_id = show()["applied_run_id"]
    assert isinstance(run_id, str)
    assert _cli(app, "undo", run_id).exit_code == 0
    detail = show()
    assert (detail["status"], detail["decided_by"], detail["applied_run_id"]) == (
        "undone", "cli:ana", run_id)
    assert f"run {run_id}" in str(detail["outcome"]) and "undone" in str(detail["outcome"])

    def listed(status: str) -> list[int]:
        out = _cli(app, "review", "list", "--agent", "agent-1", "--status", status, "--json")
        assert out.exit_code == 0, out.output
        return [i["id"] for i in json.loads(out.output)["items"]]

    assert (listed("approved"), listed("undone"), listed("open")) == ([], [item], [])


def test_a_changed_note_makes_the_item_stale_and_refused(app: App) -> None:
    """The host edits a member after the proposal: approve refuses in one line naming the note
    and writes nothing; approving the scope's items (--all) records it stale."""
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    with app.uow() as uow:
        uow.session.query(NoteRow).filter(NoteRow.id == "t2").update(
            {"content": "Prefers black tea.", "version": 2})
        uow.commit()
    before = _statuses(app)
    refused = _cli(app, "review", "approve", str(item), "--agent", "agent-1")
    assert refused.exit_code == Conflict.exit_code
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: ") and "stale" in line and "t2" in line
    assert _statuses(app) == before
    shown = json.loads(_cli(app, "review", "show", str(item), "--agent", "agent-1",
                            "--json").output)
    assert shown["status"] == "open"
    assert {n["id"]: n["changed"] for n in shown["notes"]} == {"t1": False, "t2": True}
    batch = _cli(app, "review", "approve", "--all", "--agent", "agent-1")
    assert batch.exit_code == STALE and f"item {item} is stale" in batch.output
    assert _statuses(app) == before
    again = _cli(app, "review", "approve", str(item), "--agent", "agent-1")
    assert again.exit_code == Conflict.exit_code and "already stale" in again.stderr


def test_decline_is_remembered_and_run_items_are_decided_together(app: App) -> None:
    """Declining by --all records the verdict memory at the items' versions; nothing changes."""
    _seed(app)
    first = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    second = _propose(app, _merge(["c1", "c2"], "Works from Lisbon."))
    before = _statuses(app)
    declined = _cli(app, "review", "decline", "--all", "--agent", "agent-1",
                    "--reason", "two different teas")
    assert declined.exit_code == 0, declined.output
    assert f"declined item {first}" in declined.output
    assert f"declined item {second}" in declined.output
    assert _statuses(app) == before
    fps = [_merge(["t1", "t2"], "").fingerprint, _merge(["c1", "c2"], "").fingerprint]
    with app.uow() as uow:
        assert set(uow.judgements.known(SCOPE, DECLINED_KIND, fps)) == set(fps)
    assert "no open review items" in _cli(app, "review", "list", "--agent", "agent-1").output


def test_a_decline_reason_with_nothing_visible_is_refused_and_the_item_stays_open(
        app: App) -> None:
    """The reason is recorded on the item and in the verdict memory a later run reads: one of
    invisible characters was recorded as the reason (CLI, API and MCP alike, through the
    service). Now it is one line naming the reason, exit 2, and the item stays open."""
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    refused = _cli(app, "review", "decline", str(item), "--agent", "agent-1",
                   "--reason", "\u200b\u3164")
    assert refused.exit_code == 2 and refused.stdout == ""
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("error: reason has no visible text") and "leave it out" in line
    assert [i["id"] for i in list_items(app, SCOPE)] == [item]


def test_another_scopes_item_is_not_found(app: App) -> None:
    """agent-2's item cannot be shown, approved or declined as agent-1."""
    _seed(app)
    other = _propose(app, _merge(["x1"], "Prefers green tea."), Scope("agent-2"))
    for verb in ("show", "approve", "decline"):
        result = _cli(app, "review", verb, str(other), "--agent", "agent-1")
        assert result.exit_code == NotFound.exit_code, result.output
        assert f"no review item {other} in this scope" in result.stderr
    assert _statuses(app, "agent-2")["x1"][0] == "active"


def test_usage_errors_are_one_line(app: App) -> None:
    """approve needs exactly one of ITEM_ID, --run, --all."""
    _seed(app)
    for args in ([], ["1", "--all"], ["--run", "r", "--all"]):
        result = _cli(app, "review", "approve", *args, "--agent", "agent-1")
        assert result.exit_code == 2
        (line,) = result.stderr.strip().splitlines()
        assert "name one ITEM_ID" in line


def _archive(note_id: str) -> ProposedChange:
    from worker.review.changes import archive_change

    return archive_change("prune", note_id, 1, reason="prune: orphaned",
                          comment="[Pruned: its conversation is gone]")


def test_an_approved_archive_is_the_phases_guarded_write_and_undoable(app: App) -> None:
    """An approved prune item archives its note through the phase kit's write: comment
    appended, one operation-log row with the phase's reason, the step under the approval's
    run; undo gives the note back."""
    _seed(app)
    item = _propose(app, _archive("c1"))
    approved = _cli(app, "review", "approve", str(item), "--agent", "agent-1", "--by", "ana")
    assert approved.exit_code == 0, approved.output
    with app.uow() as uow:
        note = uow.session.get(NoteRow, "c1")
        assert note is not None and note.status == "archived" and note.version == 2
        assert note.comments == "[Pruned: its conversation is gone]"
        row = uow.review.get(SCOPE, item)
        assert row is not None and row.status == "approved" and row.decided_by == "cli:ana"
        run_id = row.applied_run_id
        assert run_id is not None
        (logged,) = uow.safety.run_log(run_id)
        assert logged.entity_id == "c1" and logged.reason == (
            "prune: orphaned: [Pruned: its conversation is gone]")
        assert logged.before == {"status": "active", "comments": None, "version": 1}
        names = [s.name for s in uow.runs.steps(run_id)]
        run = uow.runs.get(run_id)
        assert run is not None and run.status == "succeeded" and run.trigger == "review"
    assert "approved archive" in names
    assert _cli(app, "undo", run_id).exit_code == 0
    assert _statuses(app)["c1"][0] == "active"


def test_an_archive_the_guard_refuses_writes_nothing_and_says_why(app: App) -> None:
    """A protected note (R23): the approval is refused with the guard's reason, nothing is
    archived, the approval's run is blocked with the guard's step and review, the item open."""
    add_notes(app, {"id": "p1", "content": "Allergic to peanuts.", "protection": "protected"})
    item = _propose(app, _archive("p1"))
    refused = _cli(app, "review", "approve", str(item), "--agent", "agent-1")
    assert refused.exit_code == Conflict.exit_code, refused.output
    assert "p1 is protected" in refused.stderr
    assert _statuses(app)["p1"][0] == "active"
    with app.uow() as uow:
        runs = [r for r in uow.runs.list(SCOPE) if r.trigger == "review"]
        assert [r.status for r in runs] == ["blocked"]
        steps = {s.name: s for s in uow.runs.steps(runs[0].id)}
        assert "approved archive" not in steps
        assert (steps["blast_radius_guard"].output or {}).get("guard") is True
        assert [(r.kind, r.note_ids) for r in uow.judgements.reviews(SCOPE)] == [
            ("blast_radius", ["p1"])]
        assert not uow.safety.run_log(runs[0].id)
        row = uow.review.get(SCOPE, item)
        assert row is not None and row.status == "open"


def test_an_approvals_run_asks_for_no_dream_phase(app: App) -> None:
    """The approval's run is created by worker.runs, running under its lease, with the guard's
    baseline and who approved in its totals; an executor that picks such a run up (as after a
    crash mid-approval) runs none of the four phases on the scope and only finishes it, as
    `cancelled`: it applied nothing."""
    from worker.runs.create import create_phaseless_run
    from worker.runs.service import execute_run

    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    assert _cli(app, "review", "approve", str(item), "--agent", "agent-1",
                "--by", "ana").exit_code == 0
    with app.uow() as uow:
        row = uow.review.get(SCOPE, item)
        assert row is not None and row.applied_run_id is not None
        run = uow.runs.get(row.applied_run_id)
        assert run is not None and run.phases == ["review"]
        totals = run.totals or {}
        assert totals["notes_before"]["active"] == 4 and totals["approved_by"] == "cli:ana"
        assert totals["review_item"] == item

    before = _statuses(app)
    snap = create_phaseless_run(app, SCOPE, trigger="review", totals={"review_item": 0})
    assert snap is not None and snap.epoch == 1 and snap.requested == ("review",)
    assert execute_run(app, snap.run_id) == "cancelled"
    assert _statuses(app) == before
    with app.uow() as uow:
        phases = {s.phase: (s.output or {}).get("reason") for s in uow.runs.steps(snap.run_id)
                  if s.parent_id is None}
    assert phases == dict.fromkeys(("consolidate", "contradictions", "prune", "archive"),
                                   "phase not requested")


# A propose run's phases and the note each of its items would retire, by item kind: a
# contradictions revoke (loser tea-1) and a prune archive (o1, its conversation gone); a
# consolidate merge (tea-1 contained in tea-2) and an archive-phase archive (e1, expired).
PROPOSERS = {"contradictions+prune": (["contradictions", "prune"],
                                      {"revoke": "tea-1", "archive": "o1"}),
             "consolidate+archive": (["consolidate", "archive"],
                                     {"merge": "tea-1", "archive": "e1"})}


def _proposed_then_pinned(app: App, host: dict[str, Any],
                          proposer: str = "contradictions+prune") -> dict[str, dict[str, Any]]:
    """A propose run's items of ``proposer``, by kind; then the host sets ``host`` on each note
    they would retire (no new version)."""
    phases, retired = PROPOSERS[proposer]
    add_entities(app, {"kind": "agent", "id": "agent-1", "apply_mode": "propose"},
                 {"kind": "conversation", "id": "c-gone", "status": "deleted"})
    add_notes(app, {"id": "tea-1", "content": "Prefers green tea."},
              {"id": "tea-2", "content": "Prefers green tea in the morning."},
              {"id": "o1", "content": "Works from Lisbon.", "source_conversation_id": "c-gone"},
              {"id": "e1", "content": "Is on call this week.",
               "expires_at": (utcnow() - timedelta(days=1)).isoformat()})
    run_id = create_run(app, SCOPE, force=True, phases=phases)
    assert run_id is not None and execute_run(app, run_id) == "succeeded"
    items = {i["kind"]: i for i in list_items(app, SCOPE, run_id=run_id)}
    assert {k: i["payload"].get("loser") or i["note_ids"][0] for k, i in items.items()} == retired
    for note_id in retired.values():
        host_sets(app, note_id, **host)
    return items


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_the_next_run_records_an_item_whose_note_was_pinned_stale(app: App,
                                                                  proposer: str) -> None:
    """As for a new version: the next propose run records the items stale (they can never
    apply) and holds nothing back for them."""
    items = _proposed_then_pinned(app, {"protection": "protected"}, proposer)
    run_id = create_run(app, SCOPE, force=True, phases=["prune"])
    assert run_id is not None and execute_run(app, run_id) == "succeeded"
    assert {i["id"]: i["status"] for i in list_items(app, SCOPE, status=None)
            if i["run_id"] != run_id} == {i["id"]: "stale" for i in items.values()}


@pytest.mark.parametrize("proposer", PROPOSERS)
@pytest.mark.parametrize("host", [{"protection": "protected"}, {"protection": "immutable"},
                                  {"is_auto_generated": False}])
def test_a_note_pinned_since_the_proposal_makes_the_item_stale_not_blocked(
        app: App, host: dict[str, Any], proposer: str) -> None:
    """Every kind of item a run proposes (a revoke and a prune archive; a merge and an archive
    phase's archive); then the host pins each note they would retire (or takes it over as
    manual), which keeps its version: approving one refuses it as stale naming the note and
    what changed, with no run; approving all records each stale; no approval run exists (none
    blocked by the guard, none cancelled at the write), nothing written."""
    items = _proposed_then_pinned(app, host, proposer)
    before = _statuses(app)
    (field,) = host
    for kind, note_id in PROPOSERS[proposer][1].items():
        refused = _cli(app, "review", "approve", str(items[kind]["id"]), "--agent", "agent-1")
        assert refused.exit_code == Conflict.exit_code, refused.output
        (line,) = refused.stderr.strip().splitlines()
        assert "is stale" in line and note_id in line and field in line, line
    batch = _cli(app, "review", "approve", "--all", "--agent", "agent-1")
    assert batch.exit_code == STALE, batch.output
    assert {i["id"]: i["status"] for i in list_items(app, SCOPE, status=None)} == {
        i["id"]: "stale" for i in items.values()}
    assert _statuses(app) == before
    with app.uow() as uow:
        assert [r.status for r in uow.runs.list(SCOPE) if r.trigger == "review"] == []
        assert uow.judgements.reviews(SCOPE) == []


@pytest.mark.parametrize("host", [{"expires_at": "renewed"}, {"last_accessed_at": "touched"}])
def test_an_archive_item_whose_note_was_renewed_or_used_since_is_stale(
        app: App, host: dict[str, Any]) -> None:
    """The archive phase decides on a note's expiry and last access as well, which a renewal
    or a retrieval's touch changes without a new version: approving its item then refuses it
    as stale naming the field, writes nothing and creates no run (before: the renewed or just
    used note was archived), and the next run records the item stale."""
    add_entities(app, {"kind": "agent", "id": "agent-1", "apply_mode": "propose"})
    add_notes(app, {"id": "e1", "content": "Is on call this week.", "access_count": 1,
                    "expires_at": (utcnow() - timedelta(days=1)).isoformat()},
              {"id": "i1", "content": "Uses the old build server.",
               "created_at": (utcnow() - timedelta(days=200)).isoformat()})
    run_id = create_run(app, SCOPE, force=True, phases=["archive"])
    assert run_id is not None and execute_run(app, run_id) == "succeeded"
    items = {i["note_ids"][0]: i for i in list_items(app, SCOPE, run_id=run_id)}
    assert sorted(items) == ["e1", "i1"]
    (field,) = host
    later = utcnow() + timedelta(days=30)
    for note_id in items:
        host_sets(app, note_id, **{field: later if field == "expires_at" else utcnow()})
    before = _statuses(app)
    for note_id, item in items.items():
        refused = _cli(app, "review", "approve", str(item["id"]), "--agent", "agent-1")
        assert refused.exit_code == Conflict.exit_code, refused.output
        (line,) = refused.stderr.strip().splitlines()
        assert "is stale" in line and note_id in line and field in line, line
    assert _statuses(app) == before
    with app.uow() as uow:
        assert [r for r in uow.runs.list(SCOPE) if r.trigger == "review"] == []
    again = create_run(app, SCOPE, force=True, phases=["prune"])
    assert again is not None and execute_run(app, again) == "succeeded"
    assert {i["id"]: i["status"] for i in list_items(app, SCOPE, status=None)} == {
        i["id"]: "stale" for i in items.values()}


def test_a_batch_reads_again_what_an_earlier_item_of_it_wrote(app: App) -> None:
    """Approving all reads the items' notes once up front; an item naming a note an earlier
    item of the same batch revoked is refused as stale from a fresh read (no run of its own),
    not approved from the read taken before."""
    _seed(app)
    first = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    second = _propose(app, _merge(["t1", "c1"], "Prefers green tea; works from Lisbon."))
    batch = _cli(app, "review", "approve", "--all", "--agent", "agent-1")
    assert batch.exit_code == STALE, batch.output
    assert f"item {second} is stale: note t1 changed" in batch.output, batch.output
    assert {i["id"]: i["status"] for i in list_items(app, SCOPE, status=None)} == {
        first: "approved", second: "stale"}
    with app.uow() as uow:
        assert [r.status for r in uow.runs.list(SCOPE) if r.trigger == "review"] == [
            "succeeded"]


def test_the_review_page_reads_all_items_in_a_fixed_number_of_statements(app: App) -> None:
    """The page shows each open item as ``show_item`` does, from one read of the items, one of
    their notes and one of their examples however many there are; its history lists the
    latest decided items, newest first."""
    from tests.support.sql import recorded_statements
    from worker.review.service import Selector, decline, recent_decisions, show_item, show_items

    add_notes(app, *({"id": f"p{k}", "content": f"Prefers tea number {k}."} for k in range(12)))
    ids = [_propose(app, _merge([f"p{2 * k}", f"p{2 * k + 1}"], f"Prefers tea {k}."))
           for k in range(6)]
    host_sets(app, "p0", content="Prefers coffee now.", version=2)  # item 0 moved since its plan
    counts = []
    for limit in (2, 6):
        with recorded_statements(app) as seen:
            shown = show_items(app, SCOPE, limit=limit)
        counts.append(len(seen))
        assert [s["id"] for s in shown] == ids[:limit]
    assert counts[0] == counts[1] <= 3
    assert shown == [show_item(app, SCOPE, i) for i in ids]
    assert [n["changed"] for n in shown[0]["notes"]] == [True, False]
    assert shown[1]["notes"][0]["content"] == "Prefers tea number 2."

    for i in ids[:3]:
        decline(app, SCOPE, Selector(item_id=i), by="test")
    assert [d["id"] for d in recent_decisions(app, SCOPE, limit=2)] == [ids[2], ids[1]]
    assert {d["status"] for d in recent_decisions(app, SCOPE)} == {"declined"}
    assert [s["id"] for s in show_items(app, SCOPE)] == ids[3:]


def test_a_decision_without_by_records_the_login_name(app: App) -> None:
    """Not ``cli:cli``: who ran the command, as the operating system names them."""
    import getpass

    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    declined = _cli(app, "review", "decline", str(item), "--agent", "agent-1")
    assert declined.exit_code == 0, declined.output
    [row] = list_items(app, SCOPE, status="declined")
    assert row["decided_by"] == f"cli:{getpass.getuser()}"


def test_a_batch_approval_counts_its_retirements_together_against_the_guard(app: App) -> None:
    """R20: each approved item runs alone, so ten archive items would each pass the guard while
    together retiring 10 of 14 notes. ``approve --all`` counts them together against the scope
    at the batch's start: 7 of 14 (the 50 % limit) go, the other three stay open with the
    reason; one approved by its id is a decision of its own and goes."""
    add_notes(app, *({"id": f"n{k:02}", "content": f"Fact number {k} about the project."}
                     for k in range(14)))
    items = [_propose(app, _archive(f"n{k:02}")) for k in range(10)]
    batch = _cli(app, "review", "approve", "--all", "--agent", "agent-1", "--json")
    assert batch.exit_code == BLOCKED, batch.output
    decided = {d["id"]: d for d in json.loads(batch.output)["items"]}
    assert [decided[i]["status"] for i in items] == ["approved"] * 7 + ["blocked"] * 3
    assert "would retire 8 of the scope's 14 active notes (limit 50%)" in decided[items[7]][
        "detail"]
    assert sorted(s for s, _ in _statuses(app).values()) == ["active"] * 7 + ["archived"] * 7
    assert [i["id"] for i in list_items(app, SCOPE)] == items[7:]
    one = _cli(app, "review", "approve", str(items[7]), "--agent", "agent-1")
    assert one.exit_code == 0, one.output
    assert _statuses(app)["n07"][0] == "archived"


@pytest.mark.parametrize("batch", [False, True])
def test_an_item_declined_while_its_approval_applies_stays_declined_and_unapplied(
    app: App, monkeypatch: pytest.MonkeyPatch, batch: bool
) -> None:
    """Bo declines the item after Ana's approval wrote its change but before it recorded the
    decision: the item keeps Bo's decline, and what Ana's approval wrote is reverted (its run
    undone), so the notes never disagree with the item. One item: a conflict; a batch: 14."""
    import worker.review.apply
    import worker.review.approval as approval  # where the approval applies its change
    from worker.review.service import Selector, decline

    _seed(app)
    before = _statuses(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    apply_change = worker.review.apply.apply_change  # the original, where it is defined

    def declined_meanwhile(*args: Any, **kwargs: Any) -> Any:
        applied = apply_change(*args, **kwargs)
        assert _statuses(app)["t1"][0] == "revoked"  # Ana's change is written
        (bo,) = decline(app, SCOPE, Selector(item_id=item), "cli:bo", "two teas")
        assert bo.status == "declined"
        return applied

    monkeypatch.setattr(approval, "apply_change", declined_meanwhile)
    args = ["--all"] if batch else [str(item)]
    approved = _cli(app, "review", "approve", *args, "--agent", "agent-1", "--by", "ana")
    assert approved.exit_code == (STALE if batch else Conflict.exit_code), approved.output
    assert "decided meanwhile (declined)" in approved.output + approved.stderr
    after = _statuses(app)
    assert {k: v for k, v in after.items() if k in before} == before
    assert all(status == "revoked" for k, (status, _) in after.items() if k not in before)
    detail = json.loads(_cli(app, "review", "show", str(item), "--agent", "agent-1",
                             "--json").output)
    assert (detail["status"], detail["decided_by"]) == ("declined", "cli:bo")


def test_an_approval_that_lost_the_race_and_cannot_revert_says_so_and_changes_nothing_more(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, but the host also edits the fused note before the approval can revert its
    run: the undo is refused (R17), so the approval answers one line saying the item was
    declined meanwhile and why its change could not be reverted, with the way out, instead of
    a bare undo error about a run the user never started. Nothing else moves: the item stays
    declined, the change and the host's edit stay."""
    import worker.review.apply
    import worker.review.approval as approval  # where the approval applies its change
    from worker.review.service import Selector, decline

    _seed(app)
    before = _statuses(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    apply_change = worker.review.apply.apply_change  # the original, where it is defined
    fused: list[str] = []

    def declined_and_edited_meanwhile(*args: Any, **kwargs: Any) -> Any:
        applied = apply_change(*args, **kwargs)
        decline(app, SCOPE, Selector(item_id=item), "cli:bo", "two teas")
        (new,) = [k for k in _statuses(app) if k not in before]
        fused.append(new)
        host_sets(app, new, importance=0.9, version=2)
        return applied

    monkeypatch.setattr(approval, "apply_change", declined_and_edited_meanwhile)
    approved = _cli(app, "review", "approve", str(item), "--agent", "agent-1", "--by", "ana")
    out = approved.output + approved.stderr
    assert approved.exit_code == Conflict.exit_code, out
    assert "decided meanwhile (declined)" in out and "could not be reverted" in out, out
    errors = [line for line in approved.output.splitlines() if line.startswith("error:")]
    assert "Traceback" not in out and len(errors) == 1, out
    assert "cannot undo run" in errors[0] and "--force-cascade" in errors[0], out
    after = _statuses(app)
    assert after["t1"][0] == after["t2"][0] == "revoked"  # the change stays applied …
    assert after[fused[0]][0] == "active"  # … with the host's edit on it
    detail = json.loads(_cli(app, "review", "show", str(item), "--agent", "agent-1",
                             "--json").output)
    assert (detail["status"], detail["decided_by"]) == ("declined", "cli:bo")


def test_a_batch_decides_every_open_item_past_a_thousand(app: App) -> None:
    """`--all` is every open item: a batch capped at 1,000 declined those, answered ``done``
    (exit 0) and left the rest open without a word."""
    from worker.review.changes import archive_change
    from worker.review.service import Selector, decline

    count = 1003
    add_notes(app, *({"id": f"n{k}", "content": f"Fact number {k} about the project."}
                     for k in range(count)))
    with app.uow() as uow:
        uow.review.add_many(SCOPE, None, [
            archive_change("archive", f"n{k}", 1, reason="archive: unused",
                           comment="[Archived: unused]").row() for k in range(count)], utcnow())
        uow.commit()
    done = decline(app, SCOPE, Selector(all=True), "cli:ana")
    assert len(done) == count and {d.status for d in done} == {"declined"}
    assert list_items(app, SCOPE, limit=None) == []


def test_a_batch_that_finds_the_scope_busy_says_what_it_applied_and_what_is_left(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dream (or another reviewer's approval) takes the scope's run slot while a batch is
    under way: the batch answers each item, the ones applied before and the ones left open
    (``blocked``, exit 10), never one 409 line after it applied items it then does not name
    (before, `--all` ended with an error naming only the item it stopped at)."""
    from worker.review import service as review_service
    from worker.review.approval import open_approval

    _seed(app)
    first = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    second = _propose(app, _merge(["c1", "c2"], "Works from Lisbon."))
    opened = open_approval  # the original, where it is defined

    def then_a_dream(*args: Any) -> Any:
        ctx = opened(*args)
        monkeypatch.setattr(review_service, "open_approval", busy)
        return ctx

    def busy(*args: Any) -> Any:
        assert create_run(app, SCOPE, force=True)  # the beat hands the scope a dream
        monkeypatch.setattr(review_service, "open_approval", opened)
        return opened(*args)

    monkeypatch.setattr(review_service, "open_approval", then_a_dream)
    out = _cli(app, "review", "approve", "--all", "--agent", "agent-1")
    assert out.exit_code == BLOCKED, out.output
    lines = out.output.splitlines()
    assert lines[0].startswith(f"approved item {first}"), lines
    assert lines[1].startswith(f"item {second} left open: the batch stopped at item {second}")
    assert [i["status"] for i in list_items(app, SCOPE, status=None)] == ["approved", "open"]


def test_a_batch_decline_answers_an_item_erased_meanwhile(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """An erasure takes an open item (with its notes) while a batch declines: that item is
    answered "gone" (exit 14, decided meanwhile) beside the ones declined; before, the batch
    ended in a "not found" error (exit 3) after declining the items before it."""
    from sqlalchemy import delete

    from worker.review import service as review_service
    from worker.store.models import ReviewItemRow

    _seed(app)
    first = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    second = _propose(app, _merge(["c1", "c2"], "Works from Lisbon."))
    calls: list[int] = []

    def clock() -> Any:  # read once per item, before its transaction: erase before the second
        calls.append(1)
        if len(calls) == 2:
            with app.uow() as other:  # what `dream erase` does to an item naming erased notes
                other.session.execute(delete(ReviewItemRow).where(ReviewItemRow.id == second))
                other.commit()
        return utcnow()

    monkeypatch.setattr(review_service, "utcnow", clock)
    out = _cli(app, "review", "decline", "--all", "--agent", "agent-1")
    assert out.exit_code == STALE, out.output
    assert out.output.splitlines() == [
        f"declined item {first}",
        f"review item {second} is gone: erased meanwhile with the notes it named; nothing was "
        "written for it"]
