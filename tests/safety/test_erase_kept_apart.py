"""Erasure takes nothing else (R28): a keep-apart over three notes or more, one of them erased,
still keeps the others apart. Before, the whole decision went with the erased note and the next
dream merged the notes the host (or a reviewer) had said were not the same (SQLite and
PostgreSQL)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tests.review.test_service import _cli, _merge, _propose
from tests.support.factories import NOW, add_notes
from tests.support.host_writes import host_sets
from worker.app import App
from worker.domain.types import Scope
from worker.host.candidates import fusion_candidates
from worker.host.fusion import fuse, keep_apart
from worker.host.remember import remember
from worker.runs import service
from worker.safety.erase import erase
from worker.store.models import JudgementRow

SCOPE = Scope("agent-1")
TRIPLETS = [{"id": f"t{i}", "content": "User owns a red bicycle"} for i in (1, 2, 3)]


def _consolidated(app: App) -> dict[str, str]:
    run_id = service.create_run(app, SCOPE, force=True, phases=["consolidate"], clock=NOW)
    assert run_id
    service.execute_run(app, run_id)
    with app.uow() as uow:
        return {n.id: n.status for n in uow.notes.get_many(["t2", "t3"])}


def _named(app: App) -> list[list[str]]:
    with app.uow() as uow:
        return [list(ids) for ids in uow.session.scalars(select(JudgementRow.note_ids))]


def test_erasing_one_of_three_notes_kept_apart_keeps_the_other_two_apart(app: App) -> None:
    """No record names the erased note; the rule judge leaves the identical t2 and t3 apart."""
    add_notes(app, *TRIPLETS)
    keep_apart(app, ["t1", "t2", "t3"])
    erase(app, note_id="t1")
    assert _named(app) == [["t2", "t3"]]
    assert _consolidated(app) == {"t2": "active", "t3": "active"}


def test_erasing_one_note_of_a_declined_three_note_merge_keeps_the_no(app: App) -> None:
    """Sibling: a reviewer declined merging t1, t2 and t3; t1 is erased; the "no" stands for
    t2 and t3."""
    add_notes(app, *TRIPLETS)
    item = _propose(app, _merge(["t1", "t2", "t3"], "User owns a red bicycle"))
    assert _cli(app, "review", "decline", str(item), "--agent", "agent-1").exit_code == 0
    erase(app, note_id="t1")
    assert all("t1" not in ids for ids in _named(app))
    assert _consolidated(app) == {"t2": "active", "t3": "active"}


def test_a_keep_apart_that_no_longer_bound_is_not_kept_for_the_rest(app: App) -> None:
    """t2 changed after the keep-apart (it lapsed): the erasure does not bring it back."""
    add_notes(app, *TRIPLETS)
    keep_apart(app, ["t1", "t2", "t3"])
    host_sets(app, "t2", version=2)
    erase(app, note_id="t1")
    assert _named(app) == []
    assert _consolidated(app) == {"t2": "revoked", "t3": "revoked"}  # merged


BICYCLES = [{"id": "a", "content": "User owns a red bicycle", "source_conversation_id": "c1"},
            {"id": "x", "content": "User owns a red bicycle", "source_conversation_id": "c3"},
            {"id": "b", "content": "User owns a red bicycle, a Brompton",
             "source_conversation_id": "c2"}]


def _statuses_after_consolidating(app: App, *ids: str) -> dict[str, str]:
    run_id = service.create_run(app, SCOPE, force=True, phases=["consolidate"], clock=NOW)
    assert run_id
    service.execute_run(app, run_id)
    with app.uow() as uow:
        return {n.id: n.status for n in uow.notes.get_many(ids)}


@pytest.mark.parametrize("subject", [{"conversation_id": "c2"}, {"note_id": "b"}])
def test_a_note_given_back_keeps_the_keep_apart_it_had(app: App,
                                                       subject: dict[str, str]) -> None:
    """The host kept a (c1) and x (c3) apart, then fused a with b (c2); erasing c2 (or b) gives
    a back one version up. Before, the keep-apart bound a at its version before the fuse only,
    so it lapsed: `dream candidates` offered a and x again and the rule judge merged the
    twins; now it binds a's new version, as an undo of the fuse leaves it."""
    add_notes(app, *BICYCLES)
    keep_apart(app, ["a", "x"])
    fuse(app, ["a", "b"], "User owns a red bicycle, a Brompton")
    assert erase(app, **subject).restored_ids == ["a"]
    assert not any({c["record_a"]["id"], c["record_b"]["id"]} == {"a", "x"}
                   for c in fusion_candidates(app, SCOPE, 0.5, 50) if c["kind"] == "pair")
    assert _statuses_after_consolidating(app, "a", "x") == {"a": "active", "x": "active"}


def test_a_note_dated_back_keeps_the_keep_apart_it_had(app: App) -> None:
    """Sibling: t1 said again in c2 (a NOOP dating it), then kept apart from its twin x (c3);
    erasing c2 dates t1 back, one version up: the keep-apart binds the new version too."""
    add_notes(app, {"id": "t1", "content": "User owns a red bicycle"},
              {"id": "x", "content": "User owns a red bicycle", "source_conversation_id": "c3"})
    assert remember(app, SCOPE, "User owns a red bicycle", conversation_id="c2").id == "t1"
    keep_apart(app, ["t1", "x"])
    assert erase(app, conversation_id="c2").redated_ids == ["t1"]
    assert _statuses_after_consolidating(app, "t1", "x") == {"t1": "active", "x": "active"}
