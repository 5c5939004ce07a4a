"""Prune follows lineage (SQLite and PostgreSQL): a note fused from a deleted conversation's
notes is archived like them; what it stood for that came from other conversations is active
again, as erasure does for co-sources; a scope where nothing is gone pays no statement for it."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from tests.support.factories import NOW, add_entities, add_notes
from tests.support.sql import recorded_statements
from worker.app import App
from worker.domain.types import Note, RunStatus, Scope
from worker.host.fusion import fuse
from worker.phases.prune.core import DeadReference, dead_conversations, find_orphans
from worker.phases.prune.lineage import RESTORED_COMMENT, plan_restorations
from worker.reporting import run_tree
from worker.review.service import Selector, approve, list_items
from worker.runs import service
from worker.safety.undo import undo_run
from worker.store.models import NoteRow
from worker.store.repositories.references import EntityRecord
from worker.store.repositories.retention import LineageParent

SCOPE = Scope("agent-1")
EDITOR = "User prefers dark mode in the code editor"


def _run(app: App, phases: list[str] | None = None) -> str:
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW, phases=phases)
    assert run_id
    assert service.execute_run(app, run_id) == RunStatus.SUCCEEDED.value
    return run_id


def _rows(app: App) -> dict[str, NoteRow]:
    with app.uow() as uow:
        return {r.id: r for r in uow.session.scalars(select(NoteRow))}


def _fused(app: App, conversations: tuple[str, str], registered: bool = True) -> str:
    """Two notes the rules merge (one holds the other), from ``conversations`` (in the registry,
    active, if ``registered``); the fused note's id."""
    add_entities(app, {"kind": "agent", "id": "agent-1"},
                 *({"kind": "conversation", "id": c} for c in sorted(set(conversations))
                   if registered))
    add_notes(app, {"id": "d1", "content": EDITOR, "source_conversation_id": conversations[0]},
              {"id": "d2", "content": f"{EDITOR} at night",
               "source_conversation_id": conversations[1]})
    _run(app, ["consolidate"])
    rows = _rows(app)
    [fused] = [i for i, r in rows.items() if r.status == "active"]
    assert rows[fused].lineage_conversation_ids == sorted(set(conversations))
    return fused


def test_a_fused_note_of_a_deleted_conversation_gives_back_its_other_sources(app: App) -> None:
    """c1's note was fused with c2's; c1 was deleted. Prune left the fused note active (it has
    no conversation of its own), so c1's facts outlived it. Now the fused note is archived, its
    comment saying why; c2's note is active again (pointer cleared, a comment), c1's stays
    retired; the run's undo puts all three back as they were."""
    fused = _fused(app, ("c1", "c2"))
    add_entities(app, {"kind": "conversation", "id": "c1", "status": "deleted"})
    run_id = _run(app)
    rows = _rows(app)
    assert rows[fused].status == "archived"
    fused_comments = rows[fused].comments
    assert fused_comments is not None and fused_comments.endswith(
        "source conversation of a note it was fused from is deleted")
    assert (rows["d2"].status, rows["d2"].consolidated_into_id) == ("active", None)
    assert rows["d2"].comments is not None
    assert rows["d2"].comments.endswith(RESTORED_COMMENT)
    assert (rows["d1"].status, rows["d1"].consolidated_into_id) == ("revoked", fused)
    step = next(s for s in run_tree(app, run_id)["steps"] if s["phase"] == "prune")
    orphans = next(c for c in step["children"] if c["name"] == "orphans")
    assert orphans["output"]["restored"] == ["d2"]
    assert step["output"]["orphaned_conversations"] == 1

    undo_run(app, run_id)
    rows = _rows(app)
    assert rows[fused].status == "active"
    assert (rows["d2"].status, rows["d2"].consolidated_into_id) == ("revoked", fused)


def test_a_restored_source_of_a_host_fusion_gets_its_importance_back(app: App) -> None:
    """A host fuse revokes its sources at importance 0.0. When the fused note is archived for
    c1's deletion, c2's note comes back with the importance it had (0.7, from the operation
    log), not the fusion's zero, as erasure gives a co-source back; undo zeroes it again."""
    add_entities(app, {"kind": "agent", "id": "agent-1"},
                 {"kind": "conversation", "id": "c1"}, {"kind": "conversation", "id": "c2"})
    add_notes(app, {"id": "d1", "content": EDITOR, "source_conversation_id": "c1",
                    "importance": 0.4},
              {"id": "d2", "content": "User codes at night", "source_conversation_id": "c2",
               "importance": 0.7})
    fused = fuse(app, ["d1", "d2"], f"{EDITOR}; codes at night").note["id"]
    assert _rows(app)["d2"].importance == 0.0
    add_entities(app, {"kind": "conversation", "id": "c1", "status": "deleted"})
    run_id = _run(app)
    rows = _rows(app)
    assert rows[fused].status == "archived"
    assert (rows["d2"].status, rows["d2"].importance) == ("active", 0.7)
    assert (rows["d1"].status, rows["d1"].importance) == ("revoked", 0.0)

    undo_run(app, run_id)
    assert (_rows(app)["d2"].status, _rows(app)["d2"].importance) == ("revoked", 0.0)


def test_a_fused_note_all_of_a_deleted_conversation_is_archived_with_nothing_back(
        app: App) -> None:
    """Both notes came from c1: the fused note goes as they would have, none comes back."""
    fused = _fused(app, ("c1", "c1"))
    add_entities(app, {"kind": "conversation", "id": "c1", "status": "deleted"})
    _run(app)
    assert {i: r.status for i, r in _rows(app).items()} == {
        fused: "archived", "d1": "revoked", "d2": "revoked"}


def test_approving_the_proposed_archive_gives_the_other_sources_back(app: App) -> None:
    """Review before apply: the run proposes archiving the fused note (nothing changes yet);
    approving the item archives it and makes c2's note active again, as the run would have."""
    fused = _fused(app, ("c1", "c2"))
    add_entities(app, {"kind": "agent", "id": "agent-1", "apply_mode": "propose"},
                 {"kind": "conversation", "id": "c1", "status": "deleted"})
    run_id = _run(app, ["prune"])
    [item] = list_items(app, SCOPE, run_id=run_id)
    assert item["note_ids"] == [fused] and item["payload"]["gone_conversations"] == ["c1"]
    assert _rows(app)[fused].status == "active"
    approve(app, SCOPE, Selector(item_id=item["id"]), by="ana")
    rows = _rows(app)
    assert (rows[fused].status, rows["d2"].status, rows["d1"].status) == (
        "archived", "active", "revoked")


@pytest.mark.parametrize("registry", ["alive", "unknown"])
def test_a_fused_note_of_live_conversations_costs_prune_no_statement(
        app: App, registry: str) -> None:
    """The sources' conversations are looked up with the note's own references (one look-up
    statement, as before); the lineage is read only once one of them is gone."""
    fused = _fused(app, ("c1", "c2"), registered=registry == "alive")
    with recorded_statements(app) as seen:
        _run(app, ["prune"])
    assert [s for s in seen if "note_lineage" in s] == []
    assert len([s for s in seen if "FROM conversations" in s]) == 1
    assert _rows(app)[fused].status == "active"


def _parent(pid: str, child: str, conversation: str | None = None, relation: str = "consolidated",
            lineage: tuple[str, ...] = (), revived: bool = False) -> LineageParent:
    """A lineage parent revoked into ``child`` (``revived``: active again, pointer cleared)."""
    return LineageParent(pid, child, relation, "active" if revived else "revoked",
                         None if revived else child, conversation, lineage)


# f2 was fused from f1 and n3; f1 from n1 (c1) and n2 (c2); d was a duplicate loser of f2;
# s was superseded by f2; m was merged into f2 once but is active again.
LINEAGE: dict[str, list[LineageParent]] = {
    "f2": [_parent("f1", "f2", lineage=("c1", "c2")), _parent("n3", "f2", "c3"),
           _parent("d", "f2", "c4", "duplicate"), _parent("s", "f2", "c5", "superseded"),
           _parent("m", "f2", "c6", revived=True)],
    "f1": [_parent("n1", "f1", "c1"), _parent("n2", "f1", "c2")],
}


@pytest.mark.parametrize("dead, restored", [
    # c1 gone: f1 carries it, so what f1 was fused from comes back in its place, but n1.
    ({"c1"}, {"n2": "f1", "n3": "f2", "d": "f2"}),
    # c3 gone: f1 is clean and comes back whole; n3 stays retired.
    ({"c3"}, {"f1": "f2", "d": "f2"}),
    # Everything f2 was written from is gone: only the duplicate (written on its own) returns.
    ({"c1", "c2", "c3"}, {"d": "f2"}),
])
def test_plan_restorations(dead: set[str], restored: dict[str, str]) -> None:
    """One row per gone set: the superseded note and the one revived since never come back."""
    reads: list[list[str]] = []

    def read(children: list[str]) -> list[LineageParent]:
        reads.append(children)
        return [p for c in children for p in LINEAGE.get(c, [])]

    assert plan_restorations(["f2"], dead, read) == restored
    assert len(reads) <= 2  # one read per generation, never one per note


def test_a_gone_conversation_of_a_fused_notes_sources_orphans_it() -> None:
    """The conversations in a fused note's lineage are references too (inherited, named so in
    the comment); one without a record proves nothing (R25)."""
    records: dict[str, dict[str, EntityRecord | None]] = {
        "agent": {"agent-1": EntityRecord("active", False)},
        "conversation": {"c1": EntityRecord("deleted", True), "c2": None}}
    fused = Note("f", SCOPE, "text", lineage_conversation_ids=("c1", "c2"))
    [orphan] = find_orphans([fused, Note("g", SCOPE, "text", lineage_conversation_ids=("c2",))],
                            records)
    assert orphan.note.id == "f" and orphan.inherited and orphan.only_conversation
    assert orphan.dead == [DeadReference("conversation", "c1", "deleted", inherited=True)]
    assert orphan.comment(NOW).endswith(
        "source conversation of a note it was fused from is deleted")
    assert dead_conversations(records) == {"c1"}


def test_a_note_given_back_keeps_the_keep_apart_it_had(app: App) -> None:
    """The host kept a (c1) and its twin x (c3) apart, then fused a with b (c2); c2 is deleted,
    prune archives the fusion and gives a back, one version up. Before, the keep-apart bound a
    at its version before the fuse only, so it lapsed and the next consolidation merged the
    twins the host had said were different (an erasure of c2 already kept it)."""
    from worker.host.fusion import keep_apart

    add_entities(app, {"kind": "agent", "id": "agent-1"},
                 *({"kind": "conversation", "id": c} for c in ("c1", "c3")))
    add_notes(app, {"id": "a", "content": "User owns a red bicycle", "source_conversation_id": "c1"},
              {"id": "x", "content": "User owns a red bicycle", "source_conversation_id": "c3"},
              {"id": "b", "content": "User owns a red bicycle, a Brompton",
               "source_conversation_id": "c2"})
    keep_apart(app, ["a", "x"])
    fuse(app, ["a", "b"], "User owns a red bicycle, a Brompton")
    add_entities(app, {"kind": "conversation", "id": "c2", "status": "deleted"})
    _run(app, ["prune"])
    assert _rows(app)["a"].status == "active"
    _run(app, ["consolidate"])
    rows = _rows(app)
    assert (rows["a"].status, rows["x"].status) == ("active", "active")
