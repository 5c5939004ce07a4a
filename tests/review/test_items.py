"""The pure part of review before apply: which apply mode holds, and whether a decision is
applied at once or proposed."""

from __future__ import annotations

import pytest

from worker.review.items import ApplyMode, ChangeKind, ProposedChange, resolve_mode, should_propose


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
