"""An approval never merges or revokes across a keep-apart made after the proposal (a host's
`dream keep-apart`, or a reviewer declining another item over the same notes): a keep-apart
keeps the versions, so before, the approval applied it (SQLite and PostgreSQL)."""

from __future__ import annotations

from tests.review.test_service import STALE, _cli, _merge, _propose, _seed, _statuses
from worker.app import App
from worker.errors import Conflict
from worker.host.fusion import keep_apart


def test_a_single_approval_across_a_later_keep_apart_is_refused_and_writes_nothing(
        app: App) -> None:
    """One `error:` line naming both notes, exit 4; the notes as they were, the item open."""
    _seed(app)
    item = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    keep_apart(app, ["t1", "t2"])
    before = _statuses(app)
    out = _cli(app, "review", "approve", str(item), "--agent", "agent-1")
    assert out.exit_code == Conflict.exit_code
    assert out.stderr.count("\n") == 1
    assert "notes t1 and t2 were kept apart since it was proposed" in out.stderr
    assert _statuses(app) == before
    shown = _cli(app, "review", "list", "--agent", "agent-1", "--status", "open")
    assert f"{item}  open" in shown.output


def test_a_batch_approval_records_such_an_item_stale_and_applies_the_rest(app: App) -> None:
    """`--all`: the kept-apart item is recorded stale (exit 14), the other merge is applied."""
    _seed(app)
    kept = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    _propose(app, _merge(["c1", "c2"], "Works from Lisbon."))
    keep_apart(app, ["t1", "t2"])
    out = _cli(app, "review", "approve", "--all", "--agent", "agent-1")
    assert out.exit_code == STALE, out.output
    after = _statuses(app)
    assert after["t1"][0] == after["t2"][0] == "active"
    assert after["c1"][0] == after["c2"][0] == "revoked"
    stale = _cli(app, "review", "list", "--agent", "agent-1", "--status", "stale")
    assert f"{kept}  stale" in stale.output


def test_declining_one_item_holds_back_another_over_the_same_notes(app: App) -> None:
    """Sibling: the reviewer's "no" to one merge of t1 and t2 is a keep-apart too; a second
    item merging them, proposed before that "no", is not applied by approving it."""
    _seed(app)
    first = _propose(app, _merge(["t1", "t2"], "Prefers green tea."))
    second = _propose(app, _merge(["t1", "t2"], "Prefers green tea in the morning."))
    declined = _cli(app, "review", "decline", str(first), "--agent", "agent-1")
    assert declined.exit_code == 0, declined.output
    out = _cli(app, "review", "approve", str(second), "--agent", "agent-1")
    assert out.exit_code == Conflict.exit_code and "kept apart" in out.stderr
    assert _statuses(app)["t1"][0] == "active"
