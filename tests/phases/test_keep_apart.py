"""A host's keep-apart binds the dream, not only the candidates it is offered: two notes kept
apart are never merged together by the rule judge or a model, and neither retires the other as
superseded, until one of them changes."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from tests.support.factories import NOW, add_notes, days_ago
from worker.app import App
from worker.domain.types import Scope
from worker.host import keep_apart
from worker.llm.fake import FakeLLM, FakeRule
from worker.runs import service
from worker.store.models import NoteRow

SCOPE = Scope("agent-1")
CELLO = "Alice plays the cello."
CELLO_MORE = "Alice plays the cello in a community orchestra."


def _run(app: App, phases: list[str]) -> dict[str, Any]:
    run_id = service.create_run(app, SCOPE, force=True, phases=phases, clock=NOW)
    assert run_id
    service.execute_run(app, run_id)
    with app.uow() as uow:
        return {r.id: r.status for r in uow.session.scalars(select(NoteRow))}


def test_the_rule_judge_never_merges_notes_the_host_kept_apart(app: App) -> None:
    """Before: `dream keep-apart n1 n2` then a run with the default rule judge revoked n1 into
    n2 (contained text), against what the host had just decided."""
    add_notes(app, {"id": "n1", "content": CELLO}, {"id": "n2", "content": CELLO_MORE})
    keep_apart(app, ["n1", "n2"])
    assert _run(app, ["consolidate", "contradictions"]) == {"n1": "active", "n2": "active"}


def test_a_model_is_not_asked_to_merge_a_cluster_holding_notes_kept_apart(app: App) -> None:
    """The verdict bound only a cluster of exactly those notes; a third look-alike joining them
    put the pair before the model again."""
    merge = {"should_consolidate": True, "content": CELLO_MORE, "type": "Context",
             "source_ids": "$aliases", "reason": "one fact"}
    app.llm = FakeLLM(rules=[FakeRule(prompt="consolidate", reply=merge),
                             FakeRule(prompt="contradictions", reply={"topics": []})])
    add_notes(app, {"id": "n1", "content": CELLO, "created_at": days_ago(3)},
              {"id": "n2", "content": CELLO_MORE, "created_at": days_ago(2)})
    keep_apart(app, ["n1", "n2"])
    add_notes(app, {"id": "n3", "content": "Alice plays the cello, in an orchestra.",
                    "created_at": days_ago(1)})
    statuses = _run(app, ["consolidate"])
    assert statuses["n1"] == statuses["n2"] == "active"


def test_a_look_alike_still_merges_with_one_of_the_notes_kept_apart(app: App) -> None:
    """A third note holding all of n1's words: before, the cluster of all three was dropped
    because it held the pair, so the two stayed duplicates for good. Now the cluster grows
    around the pair: the rule judge merges n1 and the richer n3 (its words), and n2 stays."""
    add_notes(app, {"id": "n1", "content": CELLO, "created_at": days_ago(3)},
              {"id": "n2", "content": CELLO_MORE, "created_at": days_ago(2)})
    keep_apart(app, ["n1", "n2"])
    add_notes(app, {"id": "n3", "content": "Alice plays the cello, mostly Bach.",
                    "created_at": days_ago(1)})
    statuses = _run(app, ["consolidate"])
    assert [statuses.pop(i) for i in ("n1", "n2", "n3")] == ["revoked", "active", "revoked"]
    (merged,) = statuses
    with app.uow() as uow:
        got = {n.id: n for n in uow.notes.get_many(["n1", "n3", merged])}
    assert got["n1"].consolidated_into_id == got["n3"].consolidated_into_id == merged
    assert got[merged].content == "Alice plays the cello, mostly Bach."


def test_a_changed_note_may_be_judged_again(app: App) -> None:
    """Keep-apart holds at the notes' versions: once one changes, the rules may settle them."""
    add_notes(app, {"id": "n1", "content": CELLO}, {"id": "n2", "content": CELLO_MORE})
    keep_apart(app, ["n1", "n2"])
    with app.uow() as uow:
        (note,) = uow.notes.get_many(["n2"])
        uow.notes.change(note, run_id=None, reason="host edit", comments="edited")
        uow.commit()
    assert _run(app, ["consolidate", "contradictions"])["n1"] == "revoked"
