"""R28 / R19: erasure takes the subject's text and what was written from it, and nothing else.

Black-box through the CLI where the issue describes a user's steps (`dream run`, `dream erase`,
`dream undo` with the real `openai` client against the local stub model), on SQLite and
PostgreSQL; lineage shapes that a run cannot easily produce are written the way phases write them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import select

from tests.support.factories import DARK_MODE_NOTES, NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub, StubRequest
from tests.support.safety import all_rows_text, note_states, run_row
from worker.app import App
from worker.cli import main
from worker.domain.types import Scope, content_hash
from worker.errors import Conflict
from worker.host.remember import remember
from worker.safety.erase import REVIEW_KIND, erase
from worker.store.models import ReviewRow

SCOPE = Scope("agent-1", "u1")
CANARY = "zebracanary"


def _cli(app: App, monkeypatch: pytest.MonkeyPatch, *args: str,
         stub: LLMStub | None = None) -> Result:
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    if stub is not None:
        monkeypatch.setenv("DREAM_LLM_PROVIDER", "openai")
        monkeypatch.setenv("DREAM_LLM_BASE_URL", stub.url)
        monkeypatch.setenv("DREAM_LLM_API_KEY", "k")
        monkeypatch.setenv("DREAM_LLM_MAX_RETRIES", "0")
    return CliRunner().invoke(main, list(args))


def _fuse_everything(req: StubRequest) -> dict[str, Any]:
    """A careful model: fuses a cluster into the sources' texts joined (grounded by design)."""
    if req.prompt_name != "consolidate":
        return {"verdicts": [], "decisions": []}
    start = req.user.index("[")
    notes, _ = json.JSONDecoder().raw_decode(req.user[start:])
    return {"should_consolidate": True, "content": "; ".join(n["content"] for n in notes),
            "type": "Preference", "source_ids": [n["alias"] for n in notes],
            "reason": "same preference"}


def _active(app: App) -> dict[str, str]:
    return {k: v["content"] for k, v in note_states(app).items() if v["status"] == "active"}


def test_r28_erasing_one_conversation_keeps_the_other_conversations_active(
        app: App, llm_stub: LLMStub, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 11 case 4: four notes from four conversations fused into one; erasing c0 removes
    c0's note and the fused note, the other three are active again (printed), and the next
    dream re-fuses them into a note without the erased text — which no prompt carries either."""
    texts = [f"{DARK_MODE_NOTES[0]} {CANARY}", *DARK_MODE_NOTES[1:4]]
    add_notes(app, *({"id": f"n{k}", "user_id": "u1", "type": "Preference", "content": t,
                      "source_conversation_id": f"c{k}", "created_at": days_ago(10 - k)}
                     for k, t in enumerate(texts)))
    llm_stub.set_handler(_fuse_everything)
    run = _cli(app, monkeypatch, "run", "--agent", "agent-1", "--user", "u1", "--force",
               "--phase", "consolidate", stub=llm_stub)
    assert run.exit_code == 0, run.output
    fused = list(_active(app))
    assert len(fused) == 1 and CANARY in _active(app)[fused[0]]

    out = _cli(app, monkeypatch, "erase", "--conversation", "c0", "--yes")
    assert out.exit_code == 0, out.output
    assert "removed note n0" in out.output and f"removed derived note {fused[0]}" in out.output
    for k in (1, 2, 3):
        assert f"restored note n{k}" in out.output
    # the counts line names only what was done (before: examples=0 and the like too)
    assert "=0" not in out.output, out.output
    assert _active(app) == {f"n{k}": texts[k] for k in (1, 2, 3)}
    states = note_states(app)
    assert all(states[f"n{k}"]["consolidated_into_id"] is None for k in (1, 2, 3))
    assert CANARY not in all_rows_text(app)

    llm_stub.requests.clear()
    again = _cli(app, monkeypatch, "run", "--agent", "agent-1", "--user", "u1", "--force",
                 "--phase", "consolidate", stub=llm_stub)
    assert again.exit_code == 0, again.output
    rebuilt = list(_active(app).values())
    assert len(rebuilt) == 1 and all(t in rebuilt[0] for t in texts[1:])
    assert CANARY not in all_rows_text(app)
    assert llm_stub.chat_requests() and not any(
        CANARY in json.dumps(r.body) for r in llm_stub.requests)


def _write_fusion(app: App, run_id: str, ids: list[str], text: str, relation: str = "consolidated",
                  generation: int = 1) -> str:
    """What consolidation (or host fuse) writes for one cluster: a new note, lineage, revoked
    sources pointing at it."""
    with app.uow() as uow:
        notes = {n.id: n for n in uow.notes.get_many(ids)}
        new_id = uow.notes.create_note(scope=SCOPE, content=text, content_hash=content_hash(text),
                                       type="Preference", embedding=None, embedding_model=None,
                                       run_id=run_id, now=NOW, consolidation_generation=generation)
        uow.notes.add_lineage(SCOPE, ids, new_id, relation, run_id, NOW)
        for nid in ids:
            assert uow.notes.change(notes[nid], run_id=run_id, reason="merged", now=NOW,
                                    status="revoked", consolidated_into_id=new_id,
                                    comments=f"merged into {new_id}")
        uow.commit()
    return new_id


def _retire_into(app: App, loser: str, winner: str, relation: str) -> None:
    """What the contradictions phase writes: the loser revoked into the winner, one edge."""
    run_id = run_row(app, SCOPE)
    with app.uow() as uow:
        note = uow.notes.get_many([loser])[0]
        assert uow.notes.change(note, run_id=run_id, reason=f"contradictions.{relation}", now=NOW,
                                status="revoked", consolidated_into_id=winner,
                                comments=f"[Contradiction check: into {winner}]")
        uow.notes.add_lineage(SCOPE, [loser], winner, relation, run_id, NOW)
        uow.commit()


def test_r28_chain_of_fusions_gives_back_every_survivor(app: App) -> None:
    """Generation 2: a0+b+c → f1, then f1+e → f2 (host fuse). Erasing a0 erases f1 and f2 and
    makes b, c and e active again; the erased text is in no row."""
    add_notes(app, *({"id": i, "user_id": "u1", "content": f"{i} likes tea {extra}"}
                     for i, extra in (("a0", CANARY), ("b", "green"), ("c", "hot"), ("e", "iced"))))
    f1 = _write_fusion(app, run_row(app, SCOPE), ["a0", "b", "c"], f"likes tea {CANARY} green hot")
    f2 = _write_fusion(app, run_row(app, SCOPE), [f1, "e"], f"likes tea {CANARY} green hot iced",
                       relation="fused", generation=2)
    result = erase(app, note_id="a0")
    assert result.derived_ids == sorted([f1, f2])
    assert result.restored_ids == ["b", "c", "e"] and result.held_ids == []
    assert set(_active(app)) == {"b", "c", "e"}
    assert CANARY not in all_rows_text(app)


def test_r28_a_loser_superseded_by_an_erased_winner_is_kept_for_review(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Decision: a conflict loser is not resurrected (the store knew it was outdated) nor lost
    in silence: it stays revoked, points at nothing, gets a comment, a review record, and a line
    in `dream erase`'s output. An equivalent (duplicate) loser was retired only because the
    erased note stood for it: it is active again. Undoing the erase takes both back, review too."""
    add_notes(app, {"id": "old", "user_id": "u1", "content": "User lives in Paris"},
              {"id": "dup", "user_id": "u1", "content": "User now lives in Berlin!"},
              {"id": "new", "user_id": "u1", "content": f"User now lives in Berlin {CANARY}"})
    _retire_into(app, "old", "new", "superseded")
    _retire_into(app, "dup", "new", "duplicate")
    out = _cli(app, monkeypatch, "erase", "--note", "new", "--yes")
    assert out.exit_code == 0, out.output
    assert "kept note old retired for review" in out.output and "restored note dup" in out.output
    states = note_states(app)
    assert states["old"]["status"] == "revoked" and states["old"]["consolidated_into_id"] is None
    assert "kept retired for review" in states["old"]["comments"]
    assert states["dup"]["status"] == "active"
    with app.uow() as uow:
        reviews = list(uow.session.scalars(select(ReviewRow).where(ReviewRow.kind == REVIEW_KIND)))
    assert [r.note_ids for r in reviews] == [["old"]]
    assert CANARY not in all_rows_text(app)
    erase_id = next(line.split()[-1] for line in out.output.splitlines() if "dream undo" in line)
    # Its undo would retire dup into the erased note, its fact in no active note (R8): refused,
    # nothing written, the review kept (before, dup was revoked again into nothing).
    before = note_states(app)
    undone = _cli(app, monkeypatch, "undo", erase_id)
    assert undone.exit_code == Conflict.exit_code, undone.output
    assert f"error: cannot undo {erase_id}: note dup would be retired into no active note" \
        in undone.output
    assert note_states(app) == before
    with app.uow() as uow:
        assert uow.session.scalars(select(ReviewRow).where(ReviewRow.kind == REVIEW_KIND)).all()


def test_r28_an_erasure_that_only_held_a_loser_for_review_is_undone(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """An erase id that retires no live note again (it only held a conflict loser for review)
    is undone as before: the review goes with it, the loser stays retired."""
    add_notes(app, {"id": "old", "user_id": "u1", "content": "User lives in Paris"},
              {"id": "new", "user_id": "u1", "content": f"User now lives in Berlin {CANARY}"})
    _retire_into(app, "old", "new", "superseded")
    out = _cli(app, monkeypatch, "erase", "--note", "new", "--yes")
    assert out.exit_code == 0, out.output
    erase_id = next(line.split()[-1] for line in out.output.splitlines() if "dream undo" in line)
    undone = _cli(app, monkeypatch, "undo", erase_id)
    assert undone.exit_code == 0, undone.output
    # The summary names only what the undo did: one review removed, no judgement to speak of.
    assert "removed 1 review the run(s) recorded" in undone.output
    assert "judgement" not in undone.output
    assert note_states(app)["old"]["status"] == "revoked"
    with app.uow() as uow:
        assert not uow.session.scalars(select(ReviewRow)
                                       .where(ReviewRow.kind == REVIEW_KIND)).all()


def test_r28_restorations_are_recorded_and_undoable(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The restorations are operation-log rows under an erase id. `dream undo <id>` alone
    would retire the co-sources again into the erased fused note, their facts in no active note
    (R8): refused in one line naming both and the way out, nothing written (before: both
    revoked, pointing at nothing). That way out, the fusing run's undo with --force-cascade,
    undoes the erase id with it and leaves both active; the erase id's undo is then refused as
    already undone; the erased notes stay erased."""
    add_notes(app, *({"id": f"n{k}", "user_id": "u1", "content": f"likes tea {k}"}
                     for k in range(3)))
    run_id = run_row(app, SCOPE)
    _write_fusion(app, run_id, ["n0", "n1", "n2"], "likes tea 0 1 2")
    result = erase(app, note_id="n0")
    assert result.erase_id is not None and result.restored_ids == ["n1", "n2"]
    before = note_states(app)
    out = _cli(app, monkeypatch, "undo", result.erase_id)
    assert out.exit_code == Conflict.exit_code, out.output
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        f"error: cannot undo {result.erase_id}: 2 notes (n1, n2) would be retired into no "
        "active note")
    assert lines[0].endswith(f"`dream undo {run_id} --force-cascade` instead (it gives the "
                             "notes their state before that run)")
    assert note_states(app) == before
    out = _cli(app, monkeypatch, "undo", run_id, "--force-cascade")
    assert out.exit_code == 0, out.output
    assert f"undone {result.erase_id}" in out.output
    states = note_states(app)
    assert set(states) == {"n1", "n2"}
    assert all(s["status"] == "active" for s in states.values())
    again = _cli(app, monkeypatch, "undo", result.erase_id)
    assert again.exit_code == Conflict.exit_code and "already undone" in again.output


def test_r19_erasing_a_note_follows_the_remember_update_successor(app: App) -> None:
    """Issue 12 item 19: a host `remember` UPDATE writes a longer successor of the note; erasing
    the original erases the successor too (it restates it) and the fact is in no row."""
    first = remember(app, SCOPE, f"User's locker code is {CANARY}")
    second = remember(app, SCOPE, f"User's locker code is {CANARY} at the north gym entrance")
    assert second.action == "UPDATE" and second.superseded_id == first.id
    result = erase(app, note_id=first.id)
    assert result.derived_ids == [second.id]
    assert note_states(app) == {}
    assert CANARY not in all_rows_text(app)


def test_erase_without_yes_and_no_terminal_is_one_error_line(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 11 case 6 / issue 12 item 15: not "Aborted!", one `error:` line, exit 2, nothing
    erased."""
    add_notes(app, {"id": "n0", "user_id": "u1", "content": "likes tea"})
    out = _cli(app, monkeypatch, "erase", "--note", "n0")
    assert out.exit_code == 2
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert lines == ["error: erase asks for confirmation but stdin is not a terminal; pass "
                     "--yes to erase without asking"]
    assert set(note_states(app)) == {"n0"}


def test_r19_text_with_quotes_and_newlines_is_scrubbed_from_every_record(app: App) -> None:
    """Siblings of item 19: records hold text as JSON, where quotes and newlines are escaped; a
    survivor's comments and host metadata and a run's error quoting the erased note are scrubbed
    too (before, a multi-line note's text survived in JSON records)."""
    quoted = f'He said "{CANARY}"\nand left'
    add_notes(app, {"id": "x", "user_id": "u1", "content": quoted},
              {"id": "y", "user_id": "u1", "content": "likes tea",
               "metadata": {"context": quoted}})
    run_id = run_row(app, SCOPE)
    with app.uow() as uow:
        note = uow.notes.get_many(["y"])[0]
        assert uow.notes.change(note, run_id=run_id, reason="test", now=NOW,
                                comments=f"see also: {quoted}")
        uow.notes.log(run_id=run_id, scope=SCOPE, entity_id="y", op="update", before=None,
                      after={"quote": quoted}, reason="planted quote", now=NOW)
        uow.runs.set_status(run_id, "blocked", error=f"boom while reading {quoted}",
                            status_reason="guard: would retire x and 3 more")
        uow.commit()
    erase(app, note_id="x")
    assert CANARY not in all_rows_text(app)
    assert set(note_states(app)) == {"y"}
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.status_reason == "guard: would retire [erased note] and 3 more"


def test_r28_host_fuse_sources_come_back_as_they_were(app: App) -> None:
    """A host fuse zeroes its sources' importance and ends their validity; erasing one source
    erases the fused note and gives the others back their importance, open validity, active."""
    from worker.host.fusion import fuse

    add_notes(app, *({"id": f"s{k}", "user_id": "u1", "content": f"likes tea {word}",
                      "importance": 0.7} for k, word in enumerate((CANARY, "green", "hot"))))
    fused = fuse(app, ["s0", "s1", "s2"], f"likes tea {CANARY} green hot")
    assert note_states(app)["s1"]["importance"] == 0.0
    result = erase(app, note_id="s0")
    assert result.derived_ids == [fused.note["id"]] and result.restored_ids == ["s1", "s2"]
    states = note_states(app)
    for nid in ("s1", "s2"):
        assert states[nid]["status"] == "active" and states[nid]["importance"] == 0.7
        assert states[nid]["valid_to"] is None
    assert CANARY not in all_rows_text(app)


def test_erasing_a_subject_with_no_notes_says_so(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """An erasure request for a conversation the store never saw is done (exit 0), and the
    output says nothing was there instead of a row of zeros only."""
    add_notes(app, {"id": "n0", "user_id": "u1", "content": "likes tea",
                    "source_conversation_id": "c1"})
    out = _cli(app, monkeypatch, "erase", "--conversation", "never-seen", "--yes")
    assert out.exit_code == 0, out.output
    assert "nothing to erase: no notes or examples of conversation never-seen" in out.output
    assert set(note_states(app)) == {"n0"}


def test_an_erased_id_is_matched_as_a_whole_token_only(app: App) -> None:
    """Erasing note n1 scrubs records that name n1, not records that name n12 or n1x (before,
    the substring match wiped such log rows and mangled "n12" into "[erased note]2"). A line
    naming n1 ends at the name: what follows speaks of n1 (tests/safety/test_erase_reasons.py)."""
    add_notes(app, {"id": "n1", "user_id": "u1", "content": "likes tea"},
              {"id": "n12", "user_id": "u1", "content": "likes coffee"},
              {"id": "n13", "user_id": "u1", "content": "likes cocoa"})
    run_id = run_row(app, SCOPE)
    with app.uow() as uow:
        n12, n13 = uow.notes.get_many(["n12", "n13"])
        assert uow.notes.change(n12, run_id=run_id, reason="kept n12", now=NOW,
                                comments="n12 kept, unlike n1x")
        assert uow.notes.change(n13, run_id=run_id, reason="compared", now=NOW,
                                comments="compared with n1 and n12")
        uow.commit()
    erase(app, note_id="n1")
    states = note_states(app)
    assert states["n12"]["comments"] == "n12 kept, unlike n1x"
    assert states["n13"]["comments"] == "compared with [erased note]"
    with app.uow() as uow:
        rows = {r.reason: r.after for r in uow.safety.run_log(run_id)}
    # Only the row naming n1 was scrubbed, and only in the field that named it.
    assert rows["kept n12"] is not None and rows["compared"] is not None
    assert rows["kept n12"]["comments"] == "n12 kept, unlike n1x"
    assert rows["compared"]["comments"] == "compared with [erased note]"


def test_erasing_a_user_takes_their_examples_and_sessions(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--user` erases the user's examples and session records too; another user's stay."""
    from tests.support.factories import add_sessions
    from worker.ingest import import_examples
    from worker.store.models import ExampleRow, SessionRow

    add_notes(app, {"id": "n0", "user_id": "u1", "content": "likes tea"})
    import_examples(app, [json.dumps({"id": f"ex-{u}", "agent_id": "agent-1", "user_id": u,
                                      "input": "q", "output": "a"}) for u in ("u1", "u2")])
    add_sessions(app, 3, user_id="u1")
    add_sessions(app, 2, user_id="u2")
    out = _cli(app, monkeypatch, "erase", "--user", "u1", "--yes")
    assert out.exit_code == 0, out.output
    assert "examples=1" in out.output and "sessions=3" in out.output
    with app.uow() as uow:
        assert [r.user_id for r in uow.session.scalars(select(ExampleRow))] == ["u2"]
        assert {r.user_id for r in uow.session.scalars(select(SessionRow))} == {"u2"}


def test_a_fact_said_again_in_another_conversation_outlives_the_fusion_it_matches(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same words said in c1 and c3, fused by a dream (the rule judge merges identical
    notes), then said again in c5 by an import's line and by a host's remember. Before, the
    fused note stood in for both ("already present", a NOOP): erasing c1, then c3, took the
    fact c5 had said too. Now c5's line is its own note (the remember a NOOP on it), and it
    outlives both erasures."""
    text = "The user prefers dark mode in every editor"
    add_notes(app, *({"id": f"n{k}", "user_id": "u1", "content": text,
                      "source_conversation_id": f"c{k}", "created_at": days_ago(20 - k)}
                     for k in (1, 3)))
    run = _cli(app, monkeypatch, "run", "--agent", "agent-1", "--user", "u1", "--force")
    assert run.exit_code == 0, run.output
    (fused,) = _active(app)
    with app.uow() as uow:
        (note,) = uow.notes.get_many([fused])
    assert sorted(note.lineage_conversation_ids) == ["c1", "c3"]
    add_notes(app, {"id": "n5", "user_id": "u1", "content": text,
                    "source_conversation_id": "c5", "created_at": days_ago(2)})
    assert set(_active(app)) == {fused, "n5"}
    again = remember(app, SCOPE, text, conversation_id="c5")
    assert (again.action, again.id) == ("NOOP", "n5")
    for conversation in ("c1", "c3"):
        out = _cli(app, monkeypatch, "erase", "--conversation", conversation, "--yes")
        assert out.exit_code == 0, out.output
    assert _active(app) == {"n5": text}
