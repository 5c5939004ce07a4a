"""An approval never merges or revokes across a keep-apart made after the proposal (a host's
`dream keep-apart`, or a reviewer declining another item over the same notes): a keep-apart
keeps the versions, so before, the approval applied it (SQLite and PostgreSQL)."""

from __future__ import annotations

from tests.review.test_service import _cli, _merge, _propose, _seed, _statuses
from worker.app import App
from worker.errors import Conflict
from worker.host.fusion import keep_apart


def test_a_single_approval_across_a_later_keep_apart_is_refused_and_writes_nothing(
        app: App) -> None:
    """The keep-apart records the item stale at once (it can never apply; before, it stayed
    open, holding its notes out of every run, until a run or a batch found it); approving it
    is one `error:` line naming the keep-apart, exit 4; the notes as they were."""
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    assert keep_apart(app, ["t1", "t2"])["review_items_stale"] == [item]
    before = _statuses(app)
    out = _cli(app, "review", "approve", str(item), "--agent", "agent-1")
    assert out.exit_code == Conflict.exit_code
    assert out.stderr.count("\n") == 1
    assert f"review item {item} is already stale" in out.stderr
    assert "the host kept notes t1, t2 apart" in out.stderr
    assert _statuses(app) == before
    shown = _cli(app, "review", "list", "--agent", "agent-1", "--status", "stale")
    assert f"{item}  stale" in shown.output


def test_a_batch_approval_after_a_keep_apart_applies_the_rest(app: App) -> None:
    """`--all`: the kept-apart item is stale already (recorded by the keep-apart), so the
    batch applies the other merge alone."""
    _seed(app)
    kept = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    _propose(app, _merge(["c1", "c2"], "Works from Lisbon."))
    keep_apart(app, ["t1", "t2"])
    out = _cli(app, "review", "approve", "--all", "--agent", "agent-1")
    assert out.exit_code == 0, out.output
    after = _statuses(app)
    assert after["t1"][0] == after["t2"][0] == "active"
    assert after["c1"][0] == after["c2"][0] == "revoked"
    stale = _cli(app, "review", "list", "--agent", "agent-1", "--status", "stale")
    assert f"{kept}  stale" in stale.output


def test_declining_one_item_holds_back_another_over_the_same_notes(app: App) -> None:
    """Sibling: the reviewer's "no" to one merge of t1 and t2 is a keep-apart too; a second
    item merging them, proposed before that "no", is recorded stale with the decline and not
    applied by approving it."""
    _seed(app)
    first = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    second = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    declined = _cli(app, "review", "decline", str(first), "--agent", "agent-1")
    assert declined.exit_code == 0, declined.output
    out = _cli(app, "review", "approve", str(second), "--agent", "agent-1")
    assert out.exit_code == Conflict.exit_code and "kept apart" in out.stderr
    assert f"review item {first} was declined" in out.stderr
    assert _statuses(app)["t1"][0] == "active"


def test_declining_both_items_over_the_same_notes_declines_both(app: App) -> None:
    """A batch decline does not turn its own later items stale on the way: each is declined."""
    _seed(app)
    first = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    second = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    out = _cli(app, "review", "decline", "--all", "--agent", "agent-1")
    assert out.exit_code == 0, out.output
    shown = _cli(app, "review", "list", "--agent", "agent-1", "--status", "declined")
    assert f"{first}  declined" in shown.output and f"{second}  declined" in shown.output


def test_a_batch_decline_records_stale_another_runs_item_over_the_same_notes(app: App) -> None:
    """`--run R` declines R's merge of t1 and t2; an open item of another run merging them too
    can never apply now: recorded stale with the batch, naming the decline."""
    from worker.clock import utcnow
    from worker.domain.types import Scope
    from worker.review.service import list_items
    from worker.runs.service import cancel_run, create_run

    _seed(app)
    run_id = create_run(app, Scope("agent-1"), force=True)
    assert run_id
    cancel_run(app, run_id, "test: only its items matter")
    with app.uow() as uow:
        uow.review.add_many(Scope("agent-1"), run_id, [
            _merge(["t1", "t2"], "Prefers green tea.").row(),
            _merge(["c1", "c2"], "Works from Lisbon.").row()], utcnow())
        uow.commit()
    other = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    out = _cli(app, "review", "decline", "--run", run_id, "--agent", "agent-1")
    assert out.exit_code == 0, out.output
    (item,) = [i for i in list_items(app, Scope("agent-1"), status=None) if i["id"] == other]
    assert item["status"] == "stale" and "were declined" in item["outcome"], item


def test_an_item_kept_apart_without_a_host_write_holds_nothing(app: App) -> None:
    """A keep-apart recorded otherwise (before host writes recorded items stale, or beside a
    run's write) makes a merge of those notes one that can never apply: it holds its notes
    out of no run and no candidate list (``held_notes``), and the next run records it stale;
    before, it held them until one of them changed."""
    from worker.clock import utcnow
    from worker.domain.types import Note, Scope, fingerprint_notes
    from worker.phases.kit.snapshot import KEEP_APART
    from worker.review.propose import held_notes

    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    scope = Scope("agent-1")
    with app.uow() as uow:
        assert held_notes(uow, scope) == {"t1": item, "t2": item}
        pair = [Note(id=i, scope=scope, content="", version=1) for i in ("t1", "t2")]
        uow.judgements.record(scope, KEEP_APART, fingerprint_notes(pair), ["t1", "t2"],
                              KEEP_APART, "host said keep apart", None, utcnow())
        uow.commit()
    with app.uow() as uow:
        assert held_notes(uow, scope) == {}
