"""Blast-radius guard (R20) and protected/immutable notes through every phase (R23)."""

from __future__ import annotations

import re

from sqlalchemy import select

from tests.support.factories import NOW, add_entities, add_notes, days_ago
from worker.app import App
from worker.domain.types import Scope
from worker.reporting import run_tree
from worker.runs import service
from worker.safety.undo import undo_run
from worker.store.models import NoteRow, ReviewRow

SCOPE = Scope("agent-1", "u1")


def _orphan_heavy_store(app: App) -> None:
    add_entities(app, {"kind": "agent", "id": "agent-1"}, {"kind": "user", "id": "u1"},
                 {"kind": "conversation", "id": "gone", "status": "deleted"})
    add_notes(app, *({"user_id": "u1", "content": f"Order {i} was discussed in a deleted chat",
                      "source_conversation_id": "gone"} for i in range(8)),
              *({"user_id": "u1", "content": f"Distinct durable fact number {i} about the user"}
                for i in range(4)))


def _run(app: App, force: bool, allow_retire: int | None = None) -> str:
    run_id = service.create_run(app, SCOPE, force=force, clock=NOW, phases=["prune"],
                                allow_retire=allow_retire)
    assert run_id
    service.execute_run(app, run_id)
    return run_id


def _statuses(app: App) -> dict[str, int]:
    with app.uow() as uow:
        return uow.notes.count_by_status(SCOPE)


def test_r20_guard_stops_a_run_that_would_retire_most_of_a_scope(app: App) -> None:
    """R20: prune would archive 8 of 12 active notes (> 50%): nothing is archived, even with
    --force (it skips the gate only); a skipped 'blast_radius_guard' step and an open review say
    why and name the override with its count; the run is blocked (R27)."""
    _orphan_heavy_store(app)
    run_id = _run(app, force=True)
    assert _statuses(app) == {"active": 12}
    tree = run_tree(app, run_id)
    prune = next(s for s in tree["steps"] if s["phase"] == "prune")
    guard = next(c for c in prune["children"] if c["name"] == "blast_radius_guard")
    assert guard["status"] == "skipped"
    assert "would retire 8 of 12" in guard["output"]["reason"]
    assert "re-run with --allow-retire 8" in guard["output"]["reason"]
    assert tree["status"] == "blocked" and "would retire 8 of 12" in tree["status_reason"]
    assert prune["output"]["notes_held"] == 8  # the count a dashboard reads, not only the step
    with app.uow() as uow:
        reviews = uow.session.scalars(select(ReviewRow)).all()
    assert [r.kind for r in reviews] == ["blast_radius"] and len(reviews[0].note_ids) == 8


def test_r20_allow_retire_naming_the_count_overrides_the_share_limit(app: App) -> None:
    """R20: --allow-retire 7 is not enough for 8 retirements (still blocked, nothing archived);
    --allow-retire 8 archives the 8 orphans and the run succeeds."""
    _orphan_heavy_store(app)
    short = _run(app, force=True, allow_retire=7)
    assert _statuses(app) == {"active": 12}
    assert "--allow-retire 7 is not enough" in run_tree(app, short)["status_reason"]
    enough = _run(app, force=True, allow_retire=8)
    assert _statuses(app) == {"active": 4, "archived": 8}
    assert run_tree(app, enough)["status"] == "succeeded"


def test_r23_protected_and_immutable_notes_survive_every_phase(app: App) -> None:
    """R23: immutable and protected notes that are duplicates, contained in other notes,
    orphaned and expired are never revoked, archived or rewritten by a full run."""
    add_entities(app, {"kind": "agent", "id": "agent-1"}, {"kind": "user", "id": "u1"},
                 {"kind": "conversation", "id": "gone", "status": "deleted"})
    guarded = []
    for protection in ("immutable", "protected"):
        ids = [f"{protection}-{k}" for k in range(4)]
        guarded += ids
        add_notes(app,
                  {"id": ids[0], "user_id": "u1", "protection": protection,
                   "content": f"User prefers dark mode ({protection})",
                   "last_accessed_at": days_ago(1)},
                  {"id": ids[1], "user_id": "u1", "protection": protection,
                   "content": f"User prefers dark mode in the editor ({protection})",
                   "last_accessed_at": days_ago(1)},
                  {"id": ids[2], "user_id": "u1", "protection": protection,
                   "content": f"Order {protection} discussed in a deleted chat",
                   "source_conversation_id": "gone", "last_accessed_at": days_ago(1)},
                  {"id": ids[3], "user_id": "u1", "protection": protection,
                   "content": f"Trial of {protection} plan ends", "expires_at": days_ago(5),
                   "last_accessed_at": days_ago(1)})
    add_notes(app, {"user_id": "u1", "content": "User prefers dark mode"},
              {"user_id": "u1", "content": "User prefers dark mode in the editor at night"},
              {"user_id": "u1", "content": "Trial of immutable plan ends"})
    with app.uow() as uow:
        before = {r.id: (r.version, r.status, r.content)
                  for r in uow.session.scalars(select(NoteRow).where(NoteRow.id.in_(guarded)))}
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW)
    assert run_id
    service.execute_run(app, run_id)
    with app.uow() as uow:
        after = {r.id: (r.version, r.status, r.content)
                 for r in uow.session.scalars(select(NoteRow).where(NoteRow.id.in_(guarded)))}
    assert after == before
    assert all(status == "active" for _, status, _ in after.values())


def test_a_held_archive_says_how_many_notes_it_held(app: App) -> None:
    """The archive phase the guard held recorded all zeros (``notes_expired=0``) beside a
    blocked run: only its ``blast_radius_guard`` child listed the notes. Its counters now say
    ``notes_held``, as prune's, contradictions' and consolidation's do; absent when nothing
    was held."""
    add_notes(app, *({"user_id": "u1", "content": f"Coupon code {i} for the spring sale",
                      "expires_at": days_ago(3)} for i in range(12)))
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW, phases=["archive"])
    assert run_id and service.execute_run(app, run_id) == "blocked"
    archive = next(s for s in run_tree(app, run_id)["steps"] if s["phase"] == "archive")
    assert (archive["output"]["notes_expired"], archive["output"]["notes_held"]) == (0, 12)
    enough = service.create_run(app, SCOPE, force=True, clock=NOW, phases=["archive"],
                                allow_retire=12)
    assert enough and service.execute_run(app, enough) == "succeeded"
    archive = next(s for s in run_tree(app, enough)["steps"] if s["phase"] == "archive")
    assert archive["output"]["notes_expired"] == 12 and "notes_held" not in archive["output"]


def test_r20_the_count_a_blocked_run_offers_is_enough_for_the_same_plan(sqlite_app: App) -> None:
    """R20 (a new user's report): two clusters of near-duplicates (12 notes) tripped the guard
    at the first cluster, offered --allow-retire 7, and the re-run was blocked again asking 12.
    The offered count now covers the phase's whole plan: undo, re-run with it, and it succeeds."""
    app = sqlite_app
    scope = Scope("guard-bot")
    add_notes(app, *({"id": f"g{i}", "agent_id": "guard-bot",
                      "content": "The office opens at nine" + "." * i} for i in range(12)))
    first = service.create_run(app, scope, force=True, clock=NOW)
    assert first
    service.execute_run(app, first)
    reason = run_tree(app, first)["status_reason"] or ""
    assert run_tree(app, first)["status"] == "blocked"
    offered = int(re.search(r"re-run with --allow-retire (\d+)", reason).group(1))  # type: ignore[union-attr]
    undo_run(app, first)
    again = service.create_run(app, scope, force=True, clock=NOW, allow_retire=offered)
    assert again
    service.execute_run(app, again)
    tree = run_tree(app, again)
    assert tree["status"] == "succeeded", tree["status_reason"]
