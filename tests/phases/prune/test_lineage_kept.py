"""Prune gives back what a note stood for whatever the relation (SQLite and PostgreSQL).

"Priya plays the cello." (c1) was retired as subsumed into "Priya plays the cello in a quartet
this season." (c2). c2 is deleted: prune archives the quartet note for its own conversation.
Before, only a note archived for a *source's* conversation gave its sources back, so the cello
fact, whose conversation is alive, stayed retired into an archived note: lost. Now every note
archived for a gone conversation gives back the notes retired into it (fused, duplicate,
subsumed) whose own conversations are alive, looked up with the checker, since a note retired
into another as its duplicate is not in that note's lineage.
"""

from __future__ import annotations

from tests.phases.contradictions.test_service import with_stub
from tests.phases.prune.test_lineage import LINEAGE, SCOPE, _rows, _run
from tests.support.factories import add_entities, add_notes, days_ago
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.phases.prune.lineage import RESTORED_COMMENT, read_behind
from worker.reporting import run_tree
from worker.review.service import Selector, approve, list_items
from worker.safety.undo import undo_run
from worker.store.repositories.retention import LineageParent

CELLO = "Priya plays the cello."
QUARTET = "Priya plays the cello in a quartet this season."


def fuller(a: str, b: str) -> tuple[str, float]:
    return ("a_subsumes_b" if len(a) > len(b) else "b_subsumes_a", 0.95)


def _subsumed(app: App, llm_stub: LLMStub) -> None:
    """p1 (c1) retired as subsumed into p2 (c2) by a model verdict; both conversations and the
    agent registered, active."""
    add_entities(app, {"kind": "agent", "id": "agent-1"},
                 {"kind": "conversation", "id": "c1"}, {"kind": "conversation", "id": "c2"})
    add_notes(app, {"id": "p1", "content": CELLO, "source_conversation_id": "c1",
                    "created_at": days_ago(150)},
              {"id": "p2", "content": QUARTET, "source_conversation_id": "c2",
               "created_at": days_ago(5)})
    with_stub(app, llm_stub, fuller)
    _run(app, ["contradictions"])
    app.llm = None
    rows = _rows(app)
    assert (rows["p1"].status, rows["p1"].consolidated_into_id) == ("revoked", "p2")


def test_a_subsumed_note_comes_back_when_its_keeper_goes_for_its_own_conversation(
        app: App, llm_stub: LLMStub) -> None:
    _subsumed(app, llm_stub)
    add_entities(app, {"kind": "conversation", "id": "c2", "status": "deleted"})
    run_id = _run(app)
    rows = _rows(app)
    assert rows["p2"].status == "archived"
    assert (rows["p1"].status, rows["p1"].consolidated_into_id) == ("active", None)
    assert (rows["p1"].comments or "").endswith(RESTORED_COMMENT)
    step = next(s for s in run_tree(app, run_id)["steps"] if s["phase"] == "prune")
    orphans = next(c for c in step["children"] if c["name"] == "orphans")
    assert orphans["output"]["restored"] == ["p1"]

    undo_run(app, run_id)
    rows = _rows(app)
    assert rows["p2"].status == "active"
    assert (rows["p1"].status, rows["p1"].consolidated_into_id) == ("revoked", "p2")


def test_a_subsumed_note_of_a_gone_conversation_stays_retired(
        app: App, llm_stub: LLMStub) -> None:
    """c1 is deleted too: p1 is no candidate of prune (it is retired) and c1 is not in p2's
    lineage, so it is looked up on its own; p1 is not given back."""
    _subsumed(app, llm_stub)
    add_entities(app, {"kind": "conversation", "id": "c1", "status": "deleted"},
                 {"kind": "conversation", "id": "c2", "status": "deleted"})
    _run(app)
    rows = _rows(app)
    assert (rows["p2"].status, rows["p1"].status) == ("archived", "revoked")


def test_approving_the_proposed_archive_gives_the_subsumed_note_back(
        app: App, llm_stub: LLMStub) -> None:
    _subsumed(app, llm_stub)
    add_entities(app, {"kind": "agent", "id": "agent-1", "apply_mode": "propose"},
                 {"kind": "conversation", "id": "c2", "status": "deleted"})
    run_id = _run(app, ["prune"])
    [item] = list_items(app, SCOPE, run_id=run_id)
    assert item["note_ids"] == ["p2"] and item["payload"]["gone_conversations"] == ["c2"]
    approve(app, SCOPE, Selector(item_id=item["id"]), by="ana")
    rows = _rows(app)
    assert (rows["p2"].status, rows["p1"].status) == ("archived", "active")


def test_read_behind_reads_each_generation_once() -> None:
    """Every note the restoration may look at, behind fusions too: their conversations, and
    every edge by child, which the write's restoration then reads instead of the store."""
    reads: list[list[str]] = []

    def read(children: list[str]) -> list[LineageParent]:
        reads.append(children)
        return [p for c in children for p in LINEAGE.get(c, [])]

    behind = read_behind(["f2"], read)
    assert behind.conversations == {"c1", "c2", "c3", "c4", "c5", "c6"}
    assert reads == [["f2"], ["f1"]]
    assert behind.parents == {c: LINEAGE.get(c, []) for c in ("f1", "f2")}


def test_a_note_retired_earlier_in_the_same_run_comes_back(app: App, llm_stub: LLMStub) -> None:
    """c2 is gone before the run: contradictions retires p1 into p2, then prune archives p2 in
    the same run. The scope the phases carry learns from that write that p2 holds p1, so prune
    gives p1 back without a fresh read of the scope."""
    add_entities(app, {"kind": "agent", "id": "agent-1"},
                 {"kind": "conversation", "id": "c1"},
                 {"kind": "conversation", "id": "c2", "status": "deleted"})
    add_notes(app, {"id": "p1", "content": CELLO, "source_conversation_id": "c1",
                    "created_at": days_ago(150)},
              {"id": "p2", "content": QUARTET, "source_conversation_id": "c2",
               "created_at": days_ago(5)})
    with_stub(app, llm_stub, fuller)
    run_id = _run(app, ["contradictions", "prune"])
    rows = _rows(app)
    assert rows["p2"].status == "archived"
    assert (rows["p1"].status, rows["p1"].consolidated_into_id) == ("active", None)
    tree = run_tree(app, run_id)["steps"]
    retired = next(s for s in tree if s["phase"] == "contradictions")
    assert retired["status"] == "succeeded"
    prune = next(s for s in tree if s["phase"] == "prune")
    orphans = next(c for c in prune["children"] if c["name"] == "orphans")
    assert orphans["output"]["restored"] == ["p1"]
