"""A host write that moves a note an open review item names records the item stale in the same
transaction, so every surface (CLI, API, MCP) lists, shows and refuses it as what it is: it can
never apply. Before, the item stayed ``open`` after a host's fuse, a keep-apart or an undo (the
listing offered it, an approval answered "stale" and left it open), and kept its notes out of
every run and of the host's candidates until a run or a batch approval found it. A host's
``remember`` leaves such a note alone instead (an ADD, as for a protected note): dedup is no
decision about the reviewer's item. SQLite and PostgreSQL."""

from __future__ import annotations

from tests.review.test_service import _cli, _merge, _propose, _seed, _statuses
from tests.support.host_writes import host_sets
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.errors import Conflict
from worker.host import fuse, remember
from worker.review.items import ChangeKind, ProposedChange
from worker.review.service import list_items
from worker.safety.undo import undo_run

SCOPE = Scope("agent-1")


def _status(app: App, item: int) -> str:
    (row,) = [i for i in list_items(app, SCOPE, status=None) if i["id"] == item]
    return str(row["status"])


def test_a_fuse_of_a_held_note_records_its_item_stale_and_says_so(app: App) -> None:
    """The fuse applies (the host's decision), answers the item it made stale, and the item
    is listed stale with why; approving it is refused in one line naming the fuse."""
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    other = _propose(app, _merge(["c1", "c2"], "Works from Lisbon on Fridays."))
    result = fuse(app, ["t1", "t2"], "Prefers green tea in the morning.")
    assert result.as_dict()["review_items_stale"] == [item]
    assert (_status(app, item), _status(app, other)) == ("stale", "open")
    listed = _cli(app, "review", "list", "--agent", "agent-1")
    assert f"{item}  " not in listed.output and f"{other}  open" in listed.output
    before = _statuses(app)
    out = _cli(app, "review", "approve", str(item), "--agent", "agent-1")
    assert out.exit_code == Conflict.exit_code and out.stderr.count("\n") == 1, out.output
    assert f"the host's fuse {result.undo_id}" in out.stderr
    assert _statuses(app) == before


def test_the_cli_fuse_names_the_item_it_made_stale(app: App) -> None:
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    out = _cli(app, "fuse", "t1", "t2", "--content", "Prefers green tea in the morning.")
    assert out.exit_code == 0, out.output
    assert f"review item {item}, proposed over a source, now stale" in out.output


def test_remember_leaves_a_note_an_open_item_names_alone(app: App) -> None:
    """A longer near-duplicate of a held note is an ADD (both stay), never an UPDATE that
    retires the note under the reviewer's open item."""
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    result = remember(app, SCOPE, "Prefers green tea in the morning, hot, with a little honey.")
    assert result.action == "ADD", result
    assert f"waits for open review item {item}" in result.reason
    assert _statuses(app)["t2"][0] == "active"
    assert _status(app, item) == "open"


def test_a_remember_update_over_an_item_stale_but_open_records_it_stale(app: App) -> None:
    """An item over a note the host changed since (a new version, no settle) holds nothing, so
    a longer near-duplicate supersedes the note (an UPDATE): the item is recorded stale in the
    same transaction, naming the remember, as after a fuse. Before, it stayed ``open`` over a
    retired note, listed as waiting for a decision it could never take."""
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    other = _propose(app, _merge(["c1", "c2"], "Works from Lisbon on Fridays."))
    host_sets(app, "t2", version=2)  # the host's own write to its note: nothing settled
    assert _status(app, item) == "open"
    result = remember(app, SCOPE, "Prefers green tea in the morning, hot, with a little honey.")
    assert (result.action, result.superseded_id) == ("UPDATE", "t2"), result
    assert (_status(app, item), _status(app, other)) == ("stale", "open")
    (row,) = [i for i in list_items(app, SCOPE, status="stale") if i["id"] == item]
    assert f"the host's remember {result.undo_id}" in row["outcome"]


def test_an_undo_that_moves_a_held_note_records_its_item_stale(app: App) -> None:
    """Undoing a host fuse revokes the fused note an open item (of a later run) would merge:
    the item is stale with the undo, counted in its answer."""
    _seed(app)
    fused = fuse(app, ["t1", "t2"], "Prefers green tea in the morning.")
    new_id = fused.note["id"]
    item = _propose(app, ProposedChange(
        phase="consolidate", kind=ChangeKind.MERGE, versions={new_id: 1, "c1": 1},
        reason="rule: contained", content="Prefers green tea; works from Lisbon.",
        source_ids=(new_id, "c1"), payload={"rule": "contained", "similarity": 0.9}))
    result = undo_run(app, fused.undo_id, by="test")
    assert result.as_dict()["review_items_stale"] == 1
    assert "made 1 open review item stale" in result.summary()
    assert _status(app, item) == "stale"


def test_a_remember_that_uses_a_note_an_archive_item_names_records_it_stale(app: App) -> None:
    """A NOOP counts a use of the note: an open archive item that decided on its last use can
    never apply now (its approval would refuse it) and is recorded stale with the use."""
    from worker.review.changes import archive_change

    _seed(app)
    item = _propose(app, archive_change("archive", "t1", 1, reason="archive: unused",
                                        comment="[Archived: unused]",
                                        seen={"t1": {"last_accessed_at": None}}))
    other = _propose(app, _merge(["c1", "c2"], "Works from Lisbon on Fridays."))
    result = remember(app, SCOPE, "Prefers green tea.")
    assert (result.action, result.id) == ("NOOP", "t1")
    assert (_status(app, item), _status(app, other)) == ("stale", "open")


def test_an_approval_records_stale_another_item_over_a_note_it_wrote(app: App) -> None:
    """Approving a merge of t1 and t2 retires both: an open item archiving t1 can never apply
    now and is recorded stale with the approval (before, it stayed open, listed as waiting)."""
    from worker.review.changes import archive_change

    _seed(app)
    merge = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    archive = _propose(app, archive_change("archive", "t1", 1, reason="archive: unused",
                                           comment="[Archived: unused]"))
    out = _cli(app, "review", "approve", str(merge), "--agent", "agent-1")
    assert out.exit_code == 0, out.output
    (item,) = [i for i in list_items(app, SCOPE, status=None) if i["id"] == archive]
    assert item["status"] == "stale" and f"approval of review item {merge}" in item["outcome"]


def test_undoing_a_proposing_run_names_the_items_that_stay_applied(app: App) -> None:
    """Undo of a propose run whose items are half approved: it withdraws the open one and
    says which approved one stays applied, by which approval run (and how to revert it);
    before, it said only "withdrew 1 open review item", as if the dream were all undone."""
    from worker.runs.service import cancel_run, create_run

    _seed(app)
    run_id = create_run(app, SCOPE, force=True)
    assert run_id
    cancel_run(app, run_id, "test: only its items matter")
    with app.uow() as uow:
        uow.review.add_many(SCOPE, run_id, [
            _merge(["t1", "t2"], "Prefers green tea in the morning.").row(),
            _merge(["c1", "c2"], "Works from Lisbon on Fridays.").row()], utcnow())
        uow.commit()
    first, second = (i["id"] for i in list_items(app, SCOPE))
    approved = _cli(app, "review", "approve", str(first), "--agent", "agent-1")
    assert approved.exit_code == 0, approved.output
    (approval,) = [i["applied_run_id"] for i in list_items(app, SCOPE, status=None)
                   if i["id"] == first]
    out = _cli(app, "undo", run_id)
    assert out.exit_code == 0, out.output
    assert "withdrew 1 open review item" in out.output
    assert (f"1 review item it proposed stays applied by its own approval run (not undone "
            f"with it): `dream undo {approval}`") in out.output
    result = undo_run(app, approval, by="test")
    assert result.review_items_undone == 1 and _status(app, second) == "declined"
