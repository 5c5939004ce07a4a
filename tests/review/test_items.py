"""The pure part of review before apply: which apply mode holds, and whether a decision is
applied at once or proposed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from worker.review.items import (
    WITHDRAWN_BY,
    ApplyMode,
    ChangeKind,
    ProposedChange,
    closed_line,
    resolve_mode,
    should_propose,
)


@pytest.mark.parametrize(
    ("mode", "rule", "confidence", "proposed"),
    [
        (ApplyMode.AUTO, False, None, False),  # auto applies everything, as before review
        (ApplyMode.AUTO, False, 0.1, False),
        (ApplyMode.PROPOSE, True, 1.0, True),  # propose applies nothing, not even rule verdicts
        (ApplyMode.PROPOSE, False, 0.99, True),
        (ApplyMode.SAFE_AUTO, True, None, False),  # rules settle only what is safe: applied
        (ApplyMode.SAFE_AUTO, False, 0.9, False),  # exactly at the bar: applied
        (ApplyMode.SAFE_AUTO, False, 0.89, True),  # below the bar: proposed
        (ApplyMode.SAFE_AUTO, False, None, True),  # a model verdict with no confidence (a fusion)
    ],
)
def test_should_propose(mode: ApplyMode, rule: bool, confidence: float | None,
                        proposed: bool) -> None:
    """The table of apply modes against who settled a decision and how sure it was."""
    assert should_propose(mode, settled_by_rule=rule, confidence=confidence,
                          min_confidence=0.9) is proposed


@pytest.mark.parametrize(
    ("deployment", "agent", "expected"),
    [
        ("auto", None, ApplyMode.AUTO),  # no agent setting: the deployment's
        ("auto", "propose", ApplyMode.PROPOSE),  # the agent's own wins
        ("propose", "auto", ApplyMode.AUTO),
        ("safe_auto", "bogus", ApplyMode.SAFE_AUTO),  # an unknown stored value is ignored
    ],
)
def test_resolve_mode(deployment: str, agent: str | None, expected: ApplyMode) -> None:
    """An agent's apply_mode overrides DREAM_APPLY_MODE; NULL means the deployment's."""
    assert resolve_mode(deployment, agent) == expected


def test_fingerprint_moves_with_any_version_and_round_trips() -> None:
    """A change is identified by phase, kind and its notes' versions; a row reads back equal."""
    change = ProposedChange("consolidate", ChangeKind.MERGE, {"a": 1, "b": 2}, content="x",
                            source_ids=("a", "b"), payload={"rule": "identical"})
    moved = ProposedChange("consolidate", ChangeKind.MERGE, {"a": 1, "b": 3})
    assert change.fingerprint != moved.fingerprint
    assert change.fingerprint == ProposedChange("consolidate", ChangeKind.MERGE,
                                                {"b": 2, "a": 1}).fingerprint

    class Row:
        pass

    row = Row()
    for key, value in change.row().items():
        setattr(row, key, value)
    assert ProposedChange.from_row(row) == change


@pytest.mark.parametrize(("statuses", "outcome"), [
    ([], "done"),                                   # nothing to decide: nothing left undone
    (["approved", "declined"], "done"),             # every item as asked
    (["approved", "stale"], "stale"),               # a member changed since the proposal
    (["refused", "approved"], "stale"),             # decided meanwhile by someone else
    (["stale", "blocked", "approved"], "blocked"),  # the guard's hold waits for a person
])
def test_a_batch_outcome_is_blocked_before_stale_before_done(statuses: list[str],
                                                             outcome: str) -> None:
    from worker.review.items import batch_outcome

    assert batch_outcome(statuses).value == outcome


def _row(status: str, by: str | None, applied: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(id=7, status=status, decided_by=by, run_id="r-proposed",
                           applied_run_id=applied)


@pytest.mark.parametrize(("row", "meanwhile", "line"), [
    # withdrawn by an undo: still "declined" in the table, but nobody declined it
    (_row("declined", WITHDRAWN_BY), False,
     "review item 7 is already declined: withdrawn when run r-proposed, which proposed it, was "
     "undone; the next dream proposes it afresh if it still applies"),
    (_row("declined", "cli:ann"), False,
     "review item 7 is already declined: declined by cli:ann; it is not proposed again until "
     "one of its notes changes"),
    # what a decline that lost the race to an approval answers
    (_row("approved", "cli:bob", "r-applied"), True,
     "review item 7 was decided meanwhile: it is approved: approved by cli:bob in run "
     "r-applied; `dream undo r-applied` reverts it"),
    (_row("undone", "cli:bob", "r-applied"), False,
     "review item 7 is already undone: approved by cli:bob, then run r-applied, which applied "
     "it, was undone; the next dream proposes it afresh"),
    # stale: recorded by a run (decided_by "run") or a batch approval; who does not matter
    (_row("stale", "run"), False,
     "review item 7 is already stale: a note or example it names changed since it was "
     "proposed, so it can never apply; the next dream proposes afresh"),
])
def test_an_item_no_longer_open_says_its_status_who_decided_and_what_is_left(
        row: SimpleNamespace, meanwhile: bool, line: str) -> None:
    """The one line approve and decline answer for an item that is not open: its status now
    (a withdrawn item said only "already declined", a lost decline race not even that)."""
    assert closed_line(row, meanwhile=meanwhile) == line
