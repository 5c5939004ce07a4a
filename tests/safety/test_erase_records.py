"""Erasure meets review items, earlier runs' undo and a dream in flight: the erased text is in
no record afterwards, and what erasure leaves behind (other notes, earlier runs) still works."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.safety.test_erase_survivors import CANARY, SCOPE, _active, _cli, _fuse_everything
from tests.support.factories import DARK_MODE_NOTES, add_entities, add_notes, days_ago
from tests.support.llm_stub import LLMStub, StubRequest
from tests.support.safety import all_rows_text, note_states, run_row
from worker.app import App
from worker.clock import utcnow
from worker.domain.types import Scope
from worker.errors import Conflict
from worker.review.items import ChangeKind, ProposedChange
from worker.review.service import Selector, approve, list_items
from worker.safety.erase import erase
from worker.store.models import NoteRow


def _merge_item(app: App, ids: list[str], content: str, scope: Scope = SCOPE) -> int:
    change = ProposedChange(phase="consolidate", kind=ChangeKind.MERGE,
                            versions=dict.fromkeys(ids, 1), reason="rule: contained",
                            content=content, source_ids=tuple(ids),
                            payload={"rule": "contained", "similarity": 1.0})
    with app.uow() as uow:
        uow.review.add_many(scope, None, [change.row()], utcnow())
        uow.commit()
        return int(uow.review.list(scope, status=None)[-1].id)


def test_erasing_a_note_takes_the_review_items_that_name_or_quote_it(app: App) -> None:
    """A proposed merge holds the fused text and its notes' ids; erasing a source took neither
    before (the canary stayed in ``review_items``). Items naming the note, open or decided, go;
    an item of the same scope about other notes and another scope's item stay."""
    add_notes(app, {"id": "t1", "user_id": "u1", "content": f"Prefers green tea {CANARY}"},
              {"id": "t2", "user_id": "u1", "content": f"Prefers green tea {CANARY} hot"},
              {"id": "c1", "user_id": "u1", "content": "Works from Lisbon"},
              {"id": "c2", "user_id": "u1", "content": "Works from Lisbon on Fridays"},
              {"id": "x1", "user_id": "u2", "content": "Works from Lisbon"},
              {"id": "x2", "user_id": "u2", "content": "Works from Lisbon on Fridays"})
    _merge_item(app, ["t1", "t2"], f"Prefers green tea {CANARY} hot")
    decided = _merge_item(app, ["t1", "c1"], "Prefers green tea; works from Lisbon")
    with app.uow() as uow:
        uow.review.decide(decided, "declined", now=utcnow(), by="ana", outcome="declined")
        uow.commit()
    kept = _merge_item(app, ["c1", "c2"], "Works from Lisbon on Fridays")
    other = _merge_item(app, ["x1", "x2"], "Works from Lisbon on Fridays", Scope("agent-1", "u2"))

    result = erase(app, note_id="t1")
    assert result.derived_ids == []  # t2 was written on its own: erase it by id too
    erase(app, note_id="t2")
    assert CANARY not in all_rows_text(app)
    assert [i["id"] for i in list_items(app, SCOPE, status=None)] == [kept]
    assert [i["id"] for i in list_items(app, Scope("agent-1", "u2"), status=None)] == [other]
    assert result.counts["review_items"] == 2


def _supersede(app: App, run_id: str, loser: str, winner: str) -> None:
    """What the contradictions phase writes when ``winner`` makes ``loser`` outdated."""
    with app.uow() as uow:
        note = uow.notes.get_many([loser])[0]
        assert uow.notes.change(note, run_id=run_id, reason="contradictions.superseded",
                                now=utcnow(), status="revoked", consolidated_into_id=winner,
                                comments=f"[Contradiction check: superseded by {winner}]")
        uow.notes.add_lineage(SCOPE, [loser], winner, "superseded", run_id)
        uow.commit()


def _berlin(app: App) -> str:
    add_notes(app, {"id": "old", "user_id": "u1", "content": "User lives in Paris"},
              {"id": "new", "user_id": "u1", "content": f"User now lives in Berlin {CANARY}"})
    run_id = run_row(app, SCOPE)
    _supersede(app, run_id, "old", "new")
    return run_id


def test_erase_scrubs_only_the_fields_that_name_the_erased_note(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run that retired ``old`` into the erased note logged it; before, the erase wiped that
    row whole (``{"erased": true}``), so `dream undo --force-cascade` of the run reported
    ``old`` restored and an overwritten host edit, yet left it revoked. Now only the pointer and
    the comment naming the erased note go: the run's undo gives ``old`` back."""
    run_id = _berlin(app)
    erase(app, note_id="new")
    with app.uow() as uow:
        (row,) = uow.safety.run_log(run_id)
    assert row.before is not None and row.after is not None
    assert row.before["status"] == "active" and row.before["version"] == 1
    assert row.after["status"] == "revoked" and row.after["version"] == 2
    assert row.after["consolidated_into_id"] is None
    assert row.after["comments"] == "[Contradiction check: superseded by [erased note]]"
    out = _cli(app, monkeypatch, "undo", run_id, "--force-cascade")
    assert out.exit_code == 0, out.output
    assert note_states(app)["old"]["status"] == "active"
    assert CANARY not in all_rows_text(app)


def test_undoing_the_erase_first_lets_the_earlier_run_be_undone(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dream undo RUN` refused because the erase's restoration changed ``old`` since and said
    "undo the later run first"; after `dream undo erase-…` it still refused, naming the erase
    id it had just undone (an id with no run row never counted as undone)."""
    run_id = _berlin(app)
    erase_id = erase(app, note_id="new").erase_id
    assert erase_id is not None
    refused = _cli(app, monkeypatch, "undo", run_id)
    assert refused.exit_code != 0 and f"changed since by run {erase_id}" in refused.output
    assert _cli(app, monkeypatch, "undo", erase_id).exit_code == 0
    out = _cli(app, monkeypatch, "undo", run_id)
    assert out.exit_code == 0, out.output
    assert note_states(app)["old"]["status"] == "active"
    assert CANARY not in all_rows_text(app)


def test_an_undone_host_fuse_is_no_change_for_an_earlier_run(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a ``fuse-…`` id: a run's note fused by the host, the fuse undone, then the
    run undone (before: refused, naming the undone fuse)."""
    from worker.host.fusion import fuse

    add_notes(app, {"id": "a", "user_id": "u1", "content": "likes tea"},
              {"id": "b", "user_id": "u1", "content": "likes green tea"})
    run_id = run_row(app, SCOPE)
    with app.uow() as uow:
        assert uow.notes.change(uow.notes.get_many(["a"])[0], run_id=run_id, reason="scored",
                                now=utcnow(), importance=0.9)
        uow.commit()
    fused = fuse(app, ["a", "b"], "likes green tea")
    assert _cli(app, monkeypatch, "undo", str(fused.undo_id)).exit_code == 0
    out = _cli(app, monkeypatch, "undo", run_id)
    assert out.exit_code == 0, out.output
    assert note_states(app)["a"]["importance"] == 0.5


@pytest.mark.parametrize("mode", ["auto", "propose"])
def test_r28_erasure_during_a_dream_leaves_none_of_the_erased_text(
        app: App, llm_stub: LLMStub, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """The model fuses the four notes while c0 is erased. Before, the run wrote what it had
    planned from c0's text after the erasure: the stale cluster's step kept the fused text,
    and in propose mode a review item held it and named the erased note. Now the erasure
    interrupts the run (its write rolls back), says so, and `dream run --due` resumes it from
    a fresh read: the three other conversations' notes fused without the erased text."""
    texts = [f"{DARK_MODE_NOTES[0]} {CANARY}", *DARK_MODE_NOTES[1:4]]
    add_notes(app, *({"id": f"n{k}", "user_id": "u1", "type": "Preference", "content": t,
                      "source_conversation_id": f"c{k}", "created_at": days_ago(10 - k)}
                     for k, t in enumerate(texts)))
    if mode == "propose":
        add_entities(app, {"kind": "agent", "id": "agent-1", "apply_mode": "propose"})
    erased: list[Any] = []

    def erase_while_fusing(req: StubRequest) -> Any:
        if req.prompt_name == "consolidate" and not erased:
            erased.append(_cli(app, monkeypatch, "erase", "--conversation", "c0", "--yes"))
        return _fuse_everything(req)

    llm_stub.set_handler(erase_while_fusing)
    run = _cli(app, monkeypatch, "run", "--agent", "agent-1", "--user", "u1", "--force",
               "--phase", "consolidate", stub=llm_stub)
    assert "interrupted by an erasure in its scope" in run.output
    assert "lost its lease" not in run.output  # before: told so after the erasure too
    (out,) = erased
    assert out.exit_code == 0 and "interrupted run" in out.output
    assert CANARY not in all_rows_text(app)
    assert _active(app) == {f"n{k}": texts[k] for k in (1, 2, 3)}

    again = _cli(app, monkeypatch, "run", "--due", stub=llm_stub)
    assert again.exit_code == 0, again.output
    assert CANARY not in all_rows_text(app)
    if mode == "auto":
        (fused,) = _active(app).values()
        assert all(t in fused for t in texts[1:])
    else:
        (item,) = list_items(app, SCOPE)
        assert item["note_ids"] == ["n1", "n2", "n3"]


def test_r29_no_prompt_after_an_erasure_carries_the_erased_text(
        app: App, llm_stub: LLMStub, monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-process run carries the scope it loaded from phase to phase. Before, after c0 was
    erased during consolidation, the contradictions phase still sent c0's text to the model
    (three prompts). Now the erasure interrupts the run: no prompt follows it."""
    texts = [f"{DARK_MODE_NOTES[0]} {CANARY}", *DARK_MODE_NOTES[1:4]]
    add_notes(app, *({"id": f"n{k}", "user_id": "u1", "type": "Preference", "content": t,
                      "source_conversation_id": f"c{k}", "created_at": days_ago(10 - k)}
                     for k, t in enumerate(texts)))
    erased_at: list[int] = []

    def erase_then_refuse(req: StubRequest) -> Any:
        if req.prompt_name == "consolidate" and not erased_at:
            erase(app, conversation_id="c0")
            erased_at.append(len(llm_stub.requests))
            return {"should_consolidate": False, "content": "", "type": "Preference",
                    "source_ids": [], "reason": "kept apart"}
        return _fuse_everything(req)

    llm_stub.set_handler(erase_then_refuse)
    run = _cli(app, monkeypatch, "run", "--agent", "agent-1", "--user", "u1", "--force",
               stub=llm_stub)
    assert "interrupted by an erasure in its scope" in run.output
    assert "lost its lease" not in run.output  # before: told so after the erasure too
    assert not any(CANARY in json.dumps(r.body) for r in llm_stub.requests[erased_at[0]:])
    assert CANARY not in all_rows_text(app)


def test_r29_a_fan_out_asks_nothing_more_once_an_erasure_moved_the_lease(
        app: App, llm_stub: LLMStub, monkeypatch: pytest.MonkeyPatch) -> None:
    """Contradictions renders its prompts, then asks them one by one; c0 is erased during the
    first. Before, the rest of the fan-out still went out quoting c0's notes (two prompts);
    now the run's budget asks whether the run still holds its lease before a call (at most
    once a second by default; here before every call, as a model slower than that is asked)."""
    import worker.runs.lease as lease

    monkeypatch.setattr(lease, "FENCE_SECONDS", 0.0)
    monkeypatch.setenv("DREAM_LLM_CONCURRENCY", "1")
    add_notes(app, *({"id": f"p{k}", "user_id": "u1", "source_conversation_id": "c0",
                      "content": f"User {CANARY} office is in city {k}"} for k in range(3)),
              *({"id": f"q{k}", "user_id": "u1", "content": f"User office is in city {k + 10}"}
                for k in range(3)))
    erased_at: list[int] = []

    def erase_first(req: StubRequest) -> Any:
        if not erased_at:
            erase(app, conversation_id="c0")
            erased_at.append(len(llm_stub.requests))
        return {"verdicts": [], "decisions": []}

    llm_stub.set_handler(erase_first)
    run = _cli(app, monkeypatch, "run", "--agent", "agent-1", "--user", "u1", "--force",
               "--phase", "contradictions", stub=llm_stub)
    assert "interrupted by an erasure in its scope" in run.output
    assert "lost its lease" not in run.output  # before: told so after the erasure too
    assert llm_stub.chat_requests() and erased_at == [1]
    assert not any(CANARY in json.dumps(r.body) for r in llm_stub.requests[1:])
    assert CANARY not in all_rows_text(app)


@pytest.mark.parametrize("stop", ["erase", "cancel"])
def test_an_approval_whose_run_is_stopped_meanwhile_is_one_refusal(app: App, stop: str) -> None:
    """An erasure (or `dream runs cancel`) while an approved merge is being written: before,
    the approval's write went on after the erasure and its stale step kept the fused text, and
    a cancel surfaced as a StaleLease traceback. Now nothing is written, the approval is one
    refusal naming its run (the erasure took the item with its notes: "gone", as a batch
    answers it, with its run's id), and the run is cancelled (never resumed by the gate
    check)."""
    from worker.runs.service import cancel_run

    add_notes(app, {"id": "t1", "user_id": "u1", "content": f"Prefers green tea {CANARY}"},
              {"id": "t2", "user_id": "u1", "content": "Prefers green tea in the morning"})
    item = _merge_item(app, ["t1", "t2"], f"Prefers green tea {CANARY} in the morning")
    inner = app.embedder

    class StopWhileEmbedding:
        """The fused note is embedded before its write: the moment to stop the approval."""

        model_name, dimensions = inner.model_name, inner.dimensions

        def embed(self, texts: list[str]) -> Any:
            if stop == "erase":
                erase(app, note_id="t1")
            else:
                with app.uow() as uow:
                    (run,) = uow.runs.list(SCOPE)
                cancel_run(app, run.id)
            return inner.embed(texts)

    app.embedder = StopWhileEmbedding()  # type: ignore[assignment]
    if stop == "erase":
        [gone] = approve(app, SCOPE, Selector(item_id=item), "ana")
        assert (gone.status, gone.line) == ("gone", f"review item {item} is gone: erased "
                                            "meanwhile with the notes it named; nothing was "
                                            "written for it")
    else:
        with pytest.raises(Conflict, match=f"item {item} not applied: its run .* was "
                                           "cancelled meanwhile"):
            approve(app, SCOPE, Selector(item_id=item), "ana")
    with app.uow() as uow:
        (run,) = uow.runs.list(SCOPE)
    assert run.status == "cancelled"
    if stop == "erase":
        assert gone.run_id == run.id
    if stop == "erase":
        assert CANARY not in all_rows_text(app)
    else:
        assert note_states(app)["t1"]["status"] == "active"
        assert [i["id"] for i in list_items(app, SCOPE)] == [item]


def test_an_erasure_waits_for_a_host_fusion_of_its_note_in_flight(pg_app: App) -> None:
    """PostgreSQL, READ COMMITTED: a host fuse holds the note (locked) and commits the fused
    note after the erasure began. Before, the erasure read the derived notes first, then waited
    only at its DELETE: the fused note, written from the erased text, stayed active with a
    lineage edge to nothing. Now the erasure locks the subject's notes before reading what was
    derived from them, so it sees the fusion and erases it too."""
    import threading
    import time

    add_notes(pg_app, {"id": "n0", "user_id": "u1", "content": f"likes tea {CANARY}"},
              {"id": "n1", "user_id": "u1", "content": "likes green tea"})
    done: list[Any] = []
    with pg_app.uow() as uow:
        assert set(uow.writes.lock_state(["n0", "n1"])) == {"n0", "n1"}  # the fuse's re-read
        worker = threading.Thread(target=lambda: done.append(erase(pg_app, note_id="n0")))
        worker.start()
        time.sleep(1.0)  # the erasure is waiting on the lock now (or would read past it)
        sources = uow.notes.get_many(["n0", "n1"])
        fused = uow.notes.create_note(scope=SCOPE, content=f"likes green tea {CANARY}",
                                      content_hash="h", type="Preference", embedding=None,
                                      embedding_model=None, run_id=None, now=utcnow())
        uow.notes.add_lineage(SCOPE, ["n0", "n1"], fused, "fused", None)
        for note in sources:
            assert uow.notes.change(note, run_id=None, reason="fused", now=utcnow(),
                                    status="revoked", consolidated_into_id=fused)
        uow.commit()
    worker.join(timeout=30)
    (result,) = done
    assert result.derived_ids == [fused] and result.restored_ids == ["n1"]
    assert CANARY not in all_rows_text(pg_app)


def test_erasing_a_superseded_fusion_does_not_bring_its_cosources_back(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """c0 and c1 were fused into one note, which a newer independent note (c5) later
    superseded. Before, erasing c0 made c1's note active again beside the note that had
    replaced its fact. Now c1's note stays retired for review (comment, review record, a
    `kept note` line); c5's note is untouched, and no row holds the erased text."""
    from sqlalchemy import select

    from tests.safety.test_erase_survivors import _retire_into, _write_fusion
    from worker.safety.erase import HELD_RETIRED_COMMENT, REVIEW_KIND
    from worker.store.models import ReviewRow

    add_notes(app, {"id": "n0", "user_id": "u1", "content": f"User lives in Paris {CANARY}",
                    "source_conversation_id": "c0"},
              {"id": "n1", "user_id": "u1", "content": "User lives in Paris, 11th",
               "source_conversation_id": "c1"},
              {"id": "g", "user_id": "u1", "content": "User moved to Berlin",
               "source_conversation_id": "c5"})
    fused = _write_fusion(app, run_row(app, SCOPE), ["n0", "n1"],
                          f"User lives in Paris 11th {CANARY}")
    _retire_into(app, fused, "g", "superseded")
    out = _cli(app, monkeypatch, "erase", "--conversation", "c0", "--yes")
    assert out.exit_code == 0, out.output
    assert "kept note n1 retired for review" in out.output and "restored note n1" not in out.output
    assert _active(app) == {"g": "User moved to Berlin"}
    n1 = note_states(app)["n1"]
    assert n1["status"] == "revoked" and n1["consolidated_into_id"] is None
    assert n1["comments"].endswith(HELD_RETIRED_COMMENT)
    with app.uow() as uow:
        reviews = list(uow.session.scalars(select(ReviewRow).where(ReviewRow.kind == REVIEW_KIND)))
    assert [r.note_ids for r in reviews] == [["n1"]]
    assert CANARY not in all_rows_text(app)


def _fuse_in(app: App, scope: Scope, ids: list[str], text: str) -> str:
    """A dream's fusion of ``ids`` in ``scope`` (fused note, lineage, sources revoked into it)
    by a run of that scope; the run's id."""
    from worker.domain.types import content_hash

    run_id = run_row(app, scope)
    with app.uow() as uow:
        new_id = uow.notes.create_note(scope=scope, content=text, content_hash=content_hash(text),
                                       type="Preference", embedding=None, embedding_model=None,
                                       run_id=run_id, now=utcnow())
        uow.notes.add_lineage(scope, ids, new_id, "consolidated", run_id)
        for note in uow.notes.get_many(ids):
            assert uow.notes.change(note, run_id=run_id, reason="merged", now=utcnow(),
                                    status="revoked", consolidated_into_id=new_id)
        uow.commit()
    return run_id


def test_force_cascade_never_undoes_an_erasure_in_another_scope(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Erasing conversation c0 restores a co-source in each of two scopes under one erase id.
    Undoing scope A's fusion run with --force-cascade (what a caller limited to scope A may
    do) must not undo that erase: it would retire scope B's note again."""
    runs = {}
    for agent in ("agent-1", "agent-2"):
        scope = Scope(agent, "u1")
        add_notes(app, {"id": f"{agent}-p", "agent_id": agent, "user_id": "u1",
                        "source_conversation_id": "c0", "content": f"likes tea {CANARY}"},
                  {"id": f"{agent}-q", "agent_id": agent, "user_id": "u1",
                   "source_conversation_id": "c1", "content": "likes green tea"})
        runs[agent] = _fuse_in(app, scope, [f"{agent}-p", f"{agent}-q"],
                               f"likes green tea {CANARY}")
    result = erase(app, conversation_id="c0")
    assert result.restored_ids == ["agent-1-q", "agent-2-q"]
    assert result.erase_id is not None
    out = _cli(app, monkeypatch, "undo", runs["agent-1"], "--force-cascade")
    assert out.exit_code == 0, out.output
    assert result.erase_id not in out.output
    states = note_states(app)
    assert states["agent-1-q"]["status"] == states["agent-2-q"]["status"] == "active"
    assert CANARY not in all_rows_text(app)


def test_a_short_erased_text_takes_only_records_that_quote_it_as_words(app: App) -> None:
    """Records are matched against the erased text. Before, a plain substring match made the
    erased note "tea" wipe another note's host metadata ("steady pace"), scrub its comment
    ("team lead") and delete a review item about the platform team. Now the text must stand as
    words; a record that merely uses the word ("likes tea") stays too, see
    ``test_erase_leftovers``; one quoting the note ("tea" as a whole value) goes."""
    add_notes(app, {"id": "x", "user_id": "u1", "content": "tea"},
              {"id": "y", "user_id": "u1", "content": "Works on the platform team",
               "metadata": {"context": "steady pace"}},
              {"id": "z", "user_id": "u1", "content": "Works on the platform team daily"},
              {"id": "w", "user_id": "u1", "content": "Drinks coffee"})
    run_id = run_row(app, SCOPE)
    with app.uow() as uow:
        assert uow.notes.change(uow.notes.get_many(["y"])[0], run_id=run_id, reason="noted",
                                now=utcnow(), comments="team lead")
        uow.commit()
    kept = _merge_item(app, ["y", "z"], "Works on the platform team daily")
    _merge_item(app, ["w", "z"], "tea")
    erase(app, note_id="x")
    y = note_states(app)["y"]
    assert y["comments"] == "team lead"
    with app.uow() as uow:
        assert uow.session.get(NoteRow, "y").meta == {"context": "steady pace"}  # type: ignore[union-attr]
    assert [i["id"] for i in list_items(app, SCOPE, status=None)] == [kept]


def test_an_erasure_that_deadlocks_with_a_run_write_tries_again(pg_app: App) -> None:
    """PostgreSQL: a run's write that takes its fence first (its run row) and then its notes,
    while an erasure holds a note and waits for that run row to interrupt the run: one of the
    two is chosen to fail by the deadlock detector. The erasure was (an OperationalError, the
    erase undone); now it tries again once the run's write has ended, and erases."""
    import threading
    import time

    from sqlalchemy.exc import OperationalError

    from tests.support.factories import claimed_phase_context

    add_notes(pg_app, {"id": "n0", "user_id": "u1", "content": f"likes tea {CANARY}"})
    ctx, _ = claimed_phase_context(pg_app, SCOPE)
    done: list[Any] = []
    with pg_app.uow() as uow:
        assert uow.writes.fence(ctx.run_id, ctx.epoch) is not None  # the run row, locked
        worker = threading.Thread(target=lambda: done.append(erase(pg_app, note_id="n0")))
        worker.start()
        time.sleep(0.5)  # the erasure holds n0 and waits for the run row
        try:
            uow.writes.lock_state(["n0"])  # the run's re-read: one of the two is the victim
        except OperationalError:
            uow.rollback()
        else:
            uow.commit()
    worker.join(timeout=30)
    assert [r.note_ids for r in done] == [["n0"]]
    assert CANARY not in all_rows_text(pg_app)


def test_an_undone_fuse_stays_undone_after_its_fused_note_is_erased(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Erasing a fused note whose fuse was undone scrubbed the undo's log rows whole (their
    reason too), so the fuse no longer read as undone and a second `dream undo fuse-…` ran
    again. The undo rows keep their reason now: the second undo is refused."""
    from worker.host.fusion import fuse

    add_notes(app, {"id": "a", "user_id": "u1", "content": "likes tea"},
              {"id": "b", "user_id": "u1", "content": "likes green tea"})
    fused = fuse(app, ["a", "b"], "likes green tea")
    assert _cli(app, monkeypatch, "undo", fused.undo_id).exit_code == 0
    erase(app, note_id=fused.note["id"])
    again = _cli(app, monkeypatch, "undo", fused.undo_id)
    assert again.exit_code != 0 and "already undone" in again.output
    assert {k: v["status"] for k, v in note_states(app).items()} == {"a": "active", "b": "active"}
