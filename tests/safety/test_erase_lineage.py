"""Erasure follows derivation, not supersession: an independent winner outlives its erased loser."""

from __future__ import annotations

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.safety.erase import erase

SCOPE = Scope("agent-1")


def _ids(app: App) -> set[str]:
    with app.uow() as uow:
        return {n.id for n in uow.notes.load_scope(SCOPE, ("active", "revoked", "archived")).notes}


def test_erasing_a_contradiction_loser_keeps_the_winner_but_takes_fused_children(app: App) -> None:
    """R19 edge: `superseded` edges are not derivation; `consolidated` and `fused` edges are."""
    add_notes(app,
              {"id": "loser", "content": "Customer uses metric units"},
              {"id": "winner", "content": "Customer uses imperial units"},
              {"id": "part", "content": "User prefers Python"},
              {"id": "fused", "content": "User prefers Python 3.12"},
              {"id": "fused2", "content": "User prefers Python 3.12 and unittest"})
    with app.uow() as uow:
        uow.notes.add_lineage(SCOPE, ["loser"], "winner", "superseded", None)
        uow.notes.add_lineage(SCOPE, ["part"], "fused", "consolidated", None)
        uow.notes.add_lineage(SCOPE, ["fused"], "fused2", "fused", None)
        uow.commit()
    result = erase(app, note_id="loser")
    assert result.derived_ids == [] and "winner" in _ids(app)
    result = erase(app, note_id="part")
    assert result.derived_ids == ["fused", "fused2"]
    assert _ids(app) == {"winner"}
