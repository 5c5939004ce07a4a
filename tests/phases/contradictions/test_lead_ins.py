"""The contradictions phase asks about two versions of one attribute that a scope's lead-ins
wrapped apart ("During the call the user mentioned that …" / "…, according to what the user
said"), as a same-frame pair; ``LEAD_IN_NOTES=0`` turns that off."""

from __future__ import annotations

from tests.similarity.test_lead_ins import CALL, OTHER, TOLD, W, _scope
from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.embeddings.refresh import ensure_scope_embeddings
from worker.phases.contradictions.service import load_candidates
from worker.phases.kit import read_snapshot

SCOPE = Scope("agent-1")


def _candidates(app: App, lead_in_notes: int) -> dict[tuple[str, str], set[str]]:
    app.settings.contradictions.lead_in_notes = lead_in_notes
    with app.uow() as uow:
        snap = read_snapshot(uow, SCOPE, None, ("pair",))
    return {(p.a_id, p.b_id): set(p.sources) for p in load_candidates(app, snap, []).pairs}


def test_versions_under_different_lead_ins_are_a_candidate(app: App) -> None:
    texts = _scope(CALL + "the team chats on Slack every day",
                   TOLD + "the team chats on Microsoft Teams")
    add_notes(app, *({"id": f"n{k}", "content": t} for k, t in enumerate(texts)))
    ensure_scope_embeddings(app, SCOPE)
    # Here "team" and "chat" are rare: the shared-term source would join them too (in a scope
    # of a hundred wrapped notes the wrappings' "chatting" makes "chat" common); it is off.
    app.settings.contradictions.term_max_notes = 0
    on, off = _candidates(app, 5), _candidates(app, 0)
    versions = (f"n{W}", f"n{W + 1}")
    assert versions not in off
    assert on == {**off, versions: {"same_frame"}}  # that pair, and nothing else, added


def test_a_value_said_once_more_meets_the_other_value_of_its_frame(app: App) -> None:
    """"… premium economy class once more" differs from "… books business class" by two spans,
    one of them its "once more": said before, retired since, the value said again met only the
    other value's note, and was never asked about."""
    texts = ["The user always books business class",
             "The user always flies premium economy class once more",
             *(t[0].upper() + t[1:] for t in OTHER)]
    add_notes(app, *({"id": f"n{k}", "content": t} for k, t in enumerate(texts)))
    ensure_scope_embeddings(app, SCOPE)
    app.settings.contradictions.term_max_notes = 0
    assert "same_frame" in _candidates(app, 5)[("n0", "n1")]
