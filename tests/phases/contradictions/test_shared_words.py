"""The contradictions phase reads each note's words from the run's carry when an earlier phase
made them (consolidation's topical pass), and makes them itself otherwise, with one result."""

from __future__ import annotations

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.embeddings.refresh import ensure_scope_embeddings
from worker.phases.contradictions.service import load_candidates
from worker.phases.kit import read_snapshot
from worker.phases.kit.carry import ScopeLoad
from worker.similarity.terms import NoteWords, words_of

SCOPE = Scope("agent-1")
TEXTS = ["The team chats on Slack every day", "Team chat runs on Zulip",  # a shared rare term
         "Customer uses metric units for all reports",  # one frame, two values
         "Customer uses imperial units for all reports",
         "İlkay moved to İzmir last spring", "The user swims on Thursday evenings"]


def test_candidates_from_the_runs_words_equal_those_a_phase_makes_alone(app: App) -> None:
    """A phase given the run's words (in-process) reads the texts it holds, adds the others and
    finds exactly the candidates of a phase without them (Celery, a host)."""
    add_notes(app, *({"id": f"n{k}", "content": t} for k, t in enumerate(TEXTS)))
    ensure_scope_embeddings(app, SCOPE)
    with app.uow() as uow:
        snap = read_snapshot(uow, SCOPE, None, ("pair",))
    alone = load_candidates(app, snap, [])
    texts = [n.content for n in snap.notes.notes]
    known: dict[str, NoteWords] = {}
    made = words_of(texts[:3], known)  # what consolidation read (it may hold fewer notes)
    carried = load_candidates(app, ScopeLoad(snap.notes, snap.journal, snap.memory,
                                             words=known), [])
    assert all(known[t] is w for t, w in zip(texts[:3], made, strict=True))  # read, not remade
    assert known == dict(zip(texts, words_of(texts), strict=True))
    assert [(p.a_id, p.b_id, p.sources) for p in carried.pairs] == [
        (p.a_id, p.b_id, p.sources) for p in alone.pairs]
    assert carried.counters == alone.counters
    assert alone.counters["candidates_shared_term"] >= 1
    assert alone.counters["candidates_same_frame"] >= 1


def test_a_rare_word_in_common_joins_two_notes_a_little_alike(app: App) -> None:
    """The shared-term source's floor is 0.0: "Smokes about five cigarettes a day" / "Quit
    smoking in March" (cosine 0.09) meet; at the old floor of 0.15 they did not."""
    texts = ["Smokes about five cigarettes a day", "Quit smoking in March",
             "The user plays the cello", "Lunch is ordered from the Thai place",
             "The car needs new tyres", "The dog is called Biscuit"]
    add_notes(app, *({"id": f"s{k}", "content": t} for k, t in enumerate(texts)))
    ensure_scope_embeddings(app, SCOPE)
    with app.uow() as uow:
        snap = read_snapshot(uow, SCOPE, None, ("pair",))
    found = {(p.a_id, p.b_id): p for p in load_candidates(app, snap, []).pairs}
    assert 0.0 <= found[("s0", "s1")].similarity < 0.15
    assert "shared_term" in found[("s0", "s1")].sources
