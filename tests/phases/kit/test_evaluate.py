"""The kit's pure part: which changes of a write apply, given the members' current state and
the guard, and the change items' JSON form (what a stored proposal is)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from worker.domain.types import Note, Scope
from worker.phases.kit import supersede
from worker.phases.kit.changes import Change, ChangeKind, ItemStatus, Member, NewNote
from worker.phases.kit.evaluate import Gate, GuardLimits, evaluate

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _state(*ids: str, protection: str = "standard", manual: tuple[str, ...] = ()) -> dict[str, Any]:
    return {i: {"version": 1, "status": "active", "protection": protection,
                "is_auto_generated": i not in manual, "created_at": NOW, "comments": None,
                "flags": []} for i in ids}


def _archive(*ids: str, owner_gone: bool = False) -> Change:
    return Change(kind=ChangeKind.ARCHIVE, name="+".join(ids),
                  members=tuple(Member(i, 1) for i in ids), comment="gone", reason="prune",
                  owner_gone=owner_gone)


def _limits(already: int = 0, baseline: int = 10, each: bool = True,
            allow: int | None = None) -> GuardLimits:
    return GuardLimits(frozenset(f"r{k}" for k in range(already)), baseline, 0.5, 10, allow, each)


@pytest.mark.parametrize(("limits", "expected"), [
    # no guard (a host call): everything fresh applies
    (None, ["applied", "applied", "applied"]),
    # 5 of 10 is the share exactly ("more than half" trips): all three fit
    (_limits(already=2), ["applied", "applied", "applied"]),
    # one retirement already spent past the share: the third trips, in order
    (_limits(already=3), ["applied", "applied", "guarded"]),
    # all at once (prune, archive): the same total refuses the whole batch
    (_limits(already=3, each=False), ["guarded", "guarded", "guarded"]),
    # --allow-retire 6 lifts the share up to 6
    (_limits(already=3, allow=6), ["applied", "applied", "applied"]),
    # tiny scopes (below min_scope_size) are outside the share
    (_limits(already=3, baseline=9), ["applied", "applied", "applied"]),
])
def test_the_guard_admits_retirements_in_order_or_all_together(
    limits: GuardLimits | None, expected: list[str],
) -> None:
    """Three archives of one note each against the blast-radius share (R20)."""
    results, tripped = evaluate([_archive("a"), _archive("b"), _archive("c")],
                                _state("a", "b", "c"), limits)
    assert [r.status.value for r in results] == expected
    assert (tripped is not None) == ("guarded" in expected)


def test_a_share_refusal_names_every_retirement_the_write_planned() -> None:
    """R20: the count offered for --allow-retire is the write's whole plan (3 already + 4),
    not the total at the first item refused (6), so re-running with it is not refused again
    by the rest of the same plan; every held-back item carries that reason."""
    results, tripped = evaluate([_archive("a"), _archive("b"), _archive("c"), _archive("d")],
                                _state("a", "b", "c", "d"), _limits(already=3))
    assert [r.status.value for r in results] == ["applied", "applied", "guarded", "guarded"]
    assert tripped is not None and "would retire 7 of 10" in tripped
    assert "--allow-retire 7 " in tripped and "a later phase may ask for more" in tripped
    assert {r.reason for r in results if r.reason} == {tripped}
    lifted, again = evaluate([_archive("a"), _archive("b"), _archive("c"), _archive("d")],
                             _state("a", "b", "c", "d"), _limits(already=3, allow=7))
    assert again is None and {r.status.value for r in lifted} == {"applied"}


def test_a_gate_counts_what_its_phase_held_back_unasked() -> None:
    """Contradictions asks the gate once, then holds later losers back without asking
    (``Gate.want``): the final reason counts them too; a protection trip keeps its reason."""
    gate = Gate(_limits(already=5))
    assert gate.check(["a"], ["standard"]) is not None
    gate.want(["b", "c"])
    assert "would retire 8 of 10" in (gate.final() or "")
    protected = Gate(_limits(already=5))
    reason = protected.check(["p"], ["protected"])
    protected.want(["b"])
    assert protected.final() == reason and "protected" in (reason or "")


def test_owner_gone_archives_are_outside_the_share() -> None:
    """Prune's recorded-gone owner is one explicit decision: never counted, never refused."""
    results, tripped = evaluate([_archive("a", "b", "c", owner_gone=True)],
                                _state("a", "b", "c"), _limits(already=5))
    assert [r.status for r in results] == [ItemStatus.APPLIED] and tripped is None


def test_stale_members_and_manual_notes_are_skipped_one_item_at_a_time() -> None:
    """A member at another version, retired by an earlier item, or written by a person (R26)
    makes only its own item stale; the others apply."""
    state = _state("a", "b", "c", "d", manual=("d",))
    state["b"]["version"] = 2
    first = Change(kind=ChangeKind.SUPERSEDE, name="a->c", members=(Member("a", 1),),
                   keep=(Member("c", 1),), into_id="c", relation="superseded", comment="x")
    again = Change(kind=ChangeKind.SUPERSEDE, name="a->c again", members=(Member("a", 1),),
                   keep=(Member("c", 1),), into_id="c", relation="superseded", comment="x")
    results, _ = evaluate([first, _archive("b"), again, _archive("d")], state, None)
    assert [r.status for r in results] == [ItemStatus.APPLIED, ItemStatus.STALE,
                                           ItemStatus.STALE, ItemStatus.STALE]
    assert [r.stale_ids for r in results[1:]] == [["b"], ["a"], ["d"]]


@pytest.mark.parametrize(("into", "new_manual", "expected"), [
    # a manual loser of a conflict: never retired into the winner
    ("w", None, "stale"),
    # a manual source of a fusion built as auto-generated (the host took it over since)
    (None, False, "stale"),
    # a fusion that carries a person's note is manual: it applies
    (None, True, "applied"),
])
def test_a_manual_member_is_superseded_only_into_a_new_manual_note(
        into: str | None, new_manual: bool | None, expected: str) -> None:
    """R26 at the write, whatever the plan read: a manual note may win a conflict, never lose
    one, and is fused only into a note that stays manual."""
    new = None if new_manual is None else NewNote(id="f", content="fused", type="Context",
                                                  is_auto_generated=not new_manual)
    change = Change(kind=ChangeKind.SUPERSEDE, name="m", members=(Member("m", 1),),
                    keep=(Member("w", 1),) if into else (), into_id=into, new_note=new,
                    relation="superseded", comment="x")
    results, _ = evaluate([change], _state("m", "w", manual=("m",)), None)
    assert results[0].status.value == expected
    assert results[0].stale_ids == (["m"] if expected == "stale" else [])


def test_protected_and_immutable_members_are_refused() -> None:
    """R23: a protected note only where the change says so; an immutable one never."""
    results, _ = evaluate([_archive("p")], _state("p", protection="protected"), _limits())
    assert results[0].status == ItemStatus.GUARDED and "protected" in results[0].reason
    allowed = Change(kind=ChangeKind.ARCHIVE, name="p", members=(Member("p", 1),),
                     protected_ok=True)
    results, _ = evaluate([allowed], _state("p", protection="protected"), _limits())
    assert results[0].status == ItemStatus.APPLIED
    immutable = Change(kind=ChangeKind.ARCHIVE, name="i", members=(Member("i", 1),),
                       protected_ok=True)
    results, _ = evaluate([immutable], _state("i", protection="immutable"), _limits())
    assert results[0].status == ItemStatus.GUARDED and "immutable" in results[0].reason


def test_a_change_survives_its_json_form() -> None:
    """What the review flow stores is the same change when read back (dates included)."""
    change = Change(kind=ChangeKind.SUPERSEDE, name="cluster 1",
                    members=(Member("a", 3), Member("b", 1)),
                    new_note=NewNote(id="n", content="fused", type="Preference",
                                     last_accessed_at=NOW, reason="consolidated 2 notes",
                                     stated_at=NOW - timedelta(days=3)),
                    relation="consolidated", reason="consolidated", comment="Consolidated into n",
                    valid_to=NOW, confidence=0.9, detail={"similarity": 0.93})
    assert Change.from_json(json.loads(json.dumps(change.to_json()))) == change


def test_a_member_whose_decided_field_moved_is_stale_alone_not_guarded() -> None:
    """``expect``: what the plan read beside the version (a host renews or pins a note without
    one); a member that differs there is stale, skipped alone, the rest still applies."""
    state = _state("a", "b", "c")
    state["a"]["expires_at"], state["b"]["expires_at"] = NOW, NOW
    state["b"]["protection"] = "immutable"  # pinned since the plan: stale, not a guard trip
    planned = {"expires_at": NOW, "protection": "standard"}
    changes = [Change(kind=ChangeKind.ARCHIVE, name=i, members=(Member(i, 1),), comment="gone",
                      expect={i: planned}) for i in "abc"]
    results, tripped = evaluate(changes, state, _limits(baseline=3, each=False))
    assert tripped is None
    # c: no expires_at in the state (None) where the plan read one: stale too
    assert [(r.status.value, r.stale_ids) for r in results] == [
        ("applied", []), ("stale", ["b"]), ("stale", ["c"])]


@pytest.mark.parametrize(("new", "now", "expected"), [
    # an ephemeral fusion of a note the host has since made standard: it would lose its keep
    ("ephemeral", "standard", "stale"),
    # a standard fusion (or remember's update) of a note the host has since protected or pinned
    ("standard", "protected", "stale"),
    ("standard", "immutable", "stale"),
    # a protection this code does not know is never weakened either
    ("standard", "archival", "stale"),
    # the new note is as strong as the member, or stronger: it applies
    ("ephemeral", "ephemeral", "applied"),
    ("standard", "standard", "applied"),
    ("standard", "ephemeral", "applied"),
])
def test_a_new_note_is_never_weaker_than_a_member_it_replaces(
        new: str, now: str, expected: str) -> None:
    """The backstop for every planner, an approved proposal too (no ``expect``): a SUPERSEDE
    into a new note is stale when a member's protection, as the write reads it, is stronger
    than the new note's; the guard never sees it (not a blast-radius trip)."""
    change = Change(kind=ChangeKind.SUPERSEDE, name="f", members=(Member("a", 1), Member("b", 1)),
                    new_note=NewNote(id="f", content="fused", type="Context", protection=new),
                    relation="consolidated", comment="x")
    state = _state("a", "b", protection=new)
    state["b"]["protection"] = now
    results, tripped = evaluate([change], state, _limits(baseline=100))
    assert (results[0].status.value, tripped) == (expected, None)
    assert results[0].stale_ids == (["b"] if expected == "stale" else [])


@pytest.mark.parametrize(("loaded", "now", "expected"), [
    ("ephemeral", "standard", "stale"),  # raised since the load
    ("standard", "ephemeral", "stale"),  # lowered: the plan (ephemeral pairs) read otherwise
    ("ephemeral", "ephemeral", "applied"),
])
def test_supersede_into_a_new_note_expects_each_sources_protection_as_loaded(
        loaded: str, now: str, expected: str) -> None:
    """``supersede`` (consolidation, host fuse, remember) derives the new note from its sources
    as read: a source whose protection moved since, either way, makes the item stale."""
    sources = [Note(id=i, scope=Scope("a"), content=i, version=1, protection=loaded)
               for i in ("a", "b")]
    new = NewNote(id="f", content="fused", type="Context", protection=loaded)  # as derived
    change = supersede("f", sources, new_note=new, relation="consolidated", reason="r",
                       comment="x")
    state = _state("a", "b", protection=loaded)
    state["b"]["protection"] = now
    results, _ = evaluate([change], state, None)
    assert (results[0].status.value, results[0].stale_ids) == (
        expected, ["b"] if expected == "stale" else [])
