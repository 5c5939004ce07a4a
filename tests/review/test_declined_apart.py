"""A reviewer's "no" is about a set of notes, whichever phase asks next: a declined merge,
revocation or flag keeps its notes apart, so neither consolidation nor contradictions retires
one of them in favour of another (nor the host's candidates offer them together) until one of
them changes; another scope's identical notes are not bound by it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.factories import add_notes
from tests.support.host_writes import host_sets
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.host import fusion_candidates, keep_apart
from worker.review.items import ChangeKind, ProposedChange
from worker.review.service import Selector, decline
from worker.runs.service import create_run, execute_run
from worker.store.models import NoteRow

SCOPE, OTHER = Scope("agent-1"), Scope("agent-2")
TEA = "Prefers green tea."
# Contradictions' rule judge revokes the contained note into the longer one.
CONTAINED = {"tea-1": TEA, "tea-2": "Prefers green tea in the morning."}
# Consolidation's rule judge merges three identical notes into one.
IDENTICAL = {"dup-1": TEA, "dup-2": TEA, "dup-3": TEA}
# The phase that could have proposed each kind of item (the decline binds every phase).
PROPOSER = {ChangeKind.MERGE: "consolidate", ChangeKind.REVOKE: "contradictions",
            ChangeKind.FLAG: "contradictions"}


def _seed(app: App, notes: dict[str, str]) -> None:
    """The notes in SCOPE, and the same texts under other ids in OTHER (the control)."""
    add_notes(app, *({"id": i, "content": c} for i, c in notes.items()),
              *({"id": f"x-{i}", "agent_id": OTHER.agent_id, "content": c}
                for i, c in notes.items()))


def _decline(app: App, kind: ChangeKind, ids: list[str]) -> None:
    """An item of ``kind`` over ``ids`` at version 1, proposed and declined by a reviewer."""
    extra: dict[str, Any] = ({"content": TEA, "source_ids": tuple(ids)} if kind == ChangeKind.MERGE
                             else {"relation": "contained", "payload": {"winner": ids[-1]}})
    change = ProposedChange(phase=PROPOSER[kind], kind=kind, versions=dict.fromkeys(ids, 1),
                            reason="proposed", **extra)
    with app.uow() as uow:
        uow.review.add_many(SCOPE, None, [change.row()], utcnow())
        uow.commit()
        item = int(uow.review.list(SCOPE)[-1].id)
    (done,) = decline(app, SCOPE, Selector(item_id=item), "cli:ana", "not the same thing")
    assert done.status == "declined"


def _dream(app: App, scope: Scope, phase: str) -> None:
    run_id = create_run(app, scope, force=True, phases=[phase])
    assert run_id is not None
    execute_run(app, run_id)


def _status(app: App) -> dict[str, str]:
    with app.uow() as uow:
        return {r.id: r.status for r in uow.session.query(NoteRow)}


KINDS = [ChangeKind.MERGE, ChangeKind.REVOKE, ChangeKind.FLAG]


@pytest.mark.parametrize("kind", KINDS)
def test_a_declined_item_keeps_contradictions_from_revoking_one_into_the_other(
        sqlite_app: App, kind: ChangeKind) -> None:
    """Declined merge, revocation or flag of tea-1 and tea-2, then contradictions: tea-1 is
    contained in tea-2, which the rule judge revokes (as it does in the other scope), but the
    reviewer said no about these two notes: both stay. Once tea-2 changes, the "no" no longer
    binds and the next dream revokes tea-1."""
    app = sqlite_app
    _seed(app, CONTAINED)
    _decline(app, kind, ["tea-1", "tea-2"])
    _dream(app, SCOPE, "contradictions")
    _dream(app, OTHER, "contradictions")
    status = _status(app)
    assert (status["tea-1"], status["tea-2"]) == ("active", "active")
    assert (status["x-tea-1"], status["x-tea-2"]) == ("revoked", "active")  # not bound
    host_sets(app, "tea-2", version=2)
    _dream(app, SCOPE, "contradictions")
    assert _status(app)["tea-1"] == "revoked"


@pytest.mark.parametrize("kind", KINDS)
def test_a_declined_item_keeps_consolidation_from_merging_two_of_its_notes(
        sqlite_app: App, kind: ChangeKind) -> None:
    """Declined merge, revocation or flag of dup-1 and dup-2, then consolidation: the three
    identical notes merge into one in the other scope; here no cluster holds both declined
    notes (one of them may still merge with dup-3, outside the set)."""
    app = sqlite_app
    _seed(app, IDENTICAL)
    _decline(app, kind, ["dup-1", "dup-2"])
    _dream(app, SCOPE, "consolidate")
    _dream(app, OTHER, "consolidate")
    into = _successors(app)
    assert into["dup-1"] != into["dup-2"]
    assert into["x-dup-1"] == into["x-dup-2"] == into["x-dup-3"] is not None  # not bound
    assert into["dup-1"] != "dup-2" and into["dup-2"] != "dup-1"


def _successors(app: App) -> dict[str, str | None]:
    """Each note's successor (None while it is active)."""
    with app.uow() as uow:
        return {r.id: r.consolidated_into_id if r.status != "active" else None
                for r in uow.session.query(NoteRow)}


def test_a_declined_merge_binds_contradictions_on_postgres(pg_app: App) -> None:
    """The same rule on PostgreSQL: a declined merge of tea-1 and tea-2 keeps contradictions
    from revoking tea-1 into tea-2; the other scope's identical pair is revoked."""
    _seed(pg_app, CONTAINED)
    _decline(pg_app, ChangeKind.MERGE, ["tea-1", "tea-2"])
    _dream(pg_app, SCOPE, "contradictions")
    _dream(pg_app, OTHER, "contradictions")
    status = _status(pg_app)
    assert (status["tea-1"], status["tea-2"]) == ("active", "active")
    assert status["x-tea-1"] == "revoked"


def test_a_declined_pair_is_not_offered_to_the_host_to_fuse(sqlite_app: App) -> None:
    """`dream candidates` leaves out a pair a reviewer declined (its own model would fuse what
    the reviewer refused), and a pair inside a host's three-note keep-apart, not only the
    three together; other pairs are still offered."""
    app = sqlite_app
    add_notes(app, *({"id": i, "content": TEA} for i in ("a", "b", "c", "d", "e")))
    _decline(app, ChangeKind.REVOKE, ["a", "b"])
    keep_apart(app, ["c", "d", "e"])

    def offered() -> set[frozenset[str]]:
        return {frozenset(c["note_ids"]) for c in fusion_candidates(app, SCOPE, limit=None)}

    pairs = offered()
    assert frozenset(("a", "b")) not in pairs
    assert not {frozenset(p) for p in (("c", "d"), ("c", "e"), ("d", "e"))} & pairs
    assert frozenset(("a", "c")) in pairs
