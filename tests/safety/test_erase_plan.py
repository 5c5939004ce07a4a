"""Erasure's pure rules: which survivors come back, which are held for review, and that every
lineage relation the code writes has a rule (a new relation must be decided, not forgotten)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from worker.host.fusion import FUSED
from worker.phases.consolidate.decision import LINEAGE as CONSOLIDATED
from worker.phases.contradictions.apply import LINEAGE
from worker.phases.kit.rows import restored_fields
from worker.safety.erase import RESTORE_RELATIONS, REVIEW_RELATIONS, plan_survivors
from worker.store.repositories.safety import DERIVED_RELATIONS, Survivor

ERASED = {"gone"}


def _s(status: str = "revoked", into: str | None = "gone", relation: str | None = "consolidated",
       ) -> Survivor:
    return Survivor("n", "scope", status, into, relation)


@pytest.mark.parametrize("survivor, outcome", [
    # a co-source of an erased fused note (dream or host fuse): back to active
    (_s(relation="consolidated"), "restore"),
    (_s(relation="fused"), "restore"),
    # the older note of an erased `remember` update: the host's earlier version stands again
    (_s(relation="updated"), "restore"),
    # retired only because the erased note stood for it (same fact / contained in it)
    (_s(relation="duplicate"), "restore"),
    (_s(relation="subsumed"), "restore"),
    # judged outdated by the erased note: not resurrected, not lost in silence
    (_s(relation="superseded"), "review"),
    # a pointer with no lineage edge (older data): treated as a fused co-source
    (_s(relation=None), "restore"),
    # revoked into something that is not erased: retired for its own reason, untouched
    (_s(into="other"), "none"),
    # archived or already active again: its state is not erasure's business
    (_s(status="archived"), "none"),
    (_s(status="active"), "none"),
])
def test_plan_survivors(survivor: Survivor, outcome: str) -> None:
    """One row per relation and state; see the rules in worker/safety/erase.py."""
    plan = plan_survivors([survivor], ERASED)
    got = "restore" if plan.restore else "review" if plan.review else "none"
    assert got == outcome


def test_a_note_that_is_itself_erased_is_never_planned() -> None:
    """A survivor list may include erased notes (a chain's middle link); they are skipped."""
    assert plan_survivors([Survivor("gone", "s", "revoked", "gone", "fused")], ERASED).restore == []


def test_restored_fields_give_back_importance_and_validity() -> None:
    """A host fuse zeroed importance and set valid_to; the before-image brings them back."""
    assert restored_fields({"importance": 0.7, "valid_to": None, "status": "active"}) == {
        "status": "active", "valid_to": None, "importance": 0.7}
    assert restored_fields({})["status"] == "active"


def test_every_lineage_relation_written_has_an_erasure_rule() -> None:
    """Every relation passed to add_lineage or supersede anywhere in worker/ (string literals,
    the consolidation and host-fuse constants and the contradictions table) is either followed as derivation or has a survivor rule."""
    root = Path(__file__).resolve().parents[2] / "worker"
    literals = set()
    for path in root.rglob("*.py"):
        text = path.read_text()
        literals |= set(re.findall(r'add_lineage\([^)]*?"(\w+)"', text, re.DOTALL))
        # The phase kit's supersede() takes the relation as a keyword.
        literals |= set(re.findall(r'relation="(\w+)"', text))
    written = literals | set(LINEAGE.values()) | {CONSOLIDATED, FUSED}
    assert {"consolidated", "fused", "updated"} <= written
    assert set(DERIVED_RELATIONS) <= RESTORE_RELATIONS
    assert written - (RESTORE_RELATIONS | REVIEW_RELATIONS) == set()


FATES = {"gone": ("revoked", "kept"), "fused2": ("active", None), "mid": ("revoked", "fused2"),
         "old": ("archived", None)}


@pytest.mark.parametrize("into, outcome", [
    # the erased fused note was active: its co-sources come back
    ("fused2", "restore"),
    # merged into a note that was fused again, the second fusion erased too and active: back
    ("mid", "restore"),
    # the erased fused note had been superseded by a note that is kept: its co-sources' fact
    # was no longer current; before, they came back active beside the newer note
    ("gone", "review"),
    # the erased fused note had been archived: not made active either
    ("old", "review"),
])
def test_a_cosource_follows_the_fate_of_the_erased_note_it_was_merged_into(
        into: str, outcome: str) -> None:
    """Restored only when the erased note it stood for (followed through erased fusions) was
    live at the erase; otherwise held for review like a superseded loser."""
    plan = plan_survivors([_s(into=into, relation="consolidated")], set(FATES), FATES)
    got = "restore" if plan.restore else "review" if plan.review else "none"
    assert got == outcome
