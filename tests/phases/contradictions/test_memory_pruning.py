"""Verdict memory is pruned: a run deletes the rows of earlier runs no run reads again (a
verdict naming a note no longer active, a question or pair cooling off past
DREAM_LLM_UNANSWERED_HOURS), so the memory each run loads per scope stops growing with every
question ever asked. What a person decided (a host's keep-apart or fuse, a reviewer's
decline) stays, and so does every verdict on live notes: the next run asks nothing again.
Before, every row stayed for ever (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, select

from tests.phases.contradictions.test_service import (
    IMPERIAL,
    METRIC,
    TEA_BREAKFAST,
    TEA_SUGAR,
    phase_step,
    with_stub,
)
from tests.support.factories import NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub
from tests.support.safety import run_row
from tests.support.sql import recorded_statements
from worker.app import App
from worker.domain.types import Scope, fingerprint_versions
from worker.host.fusion import keep_apart
from worker.phases.kit.carry import Judged
from worker.phases.kit.forget import dead
from worker.runs import service
from worker.safety.undo import undo_run
from worker.store.models import JudgementRow, NoteRow

SCOPE = Scope("agent-1")
DAY = timedelta(days=1)
Row = tuple[str, tuple[str, ...], str | None]  # kind, note ids, run


def _dream(app: App, at: datetime) -> str:
    """A contradictions run of ``SCOPE`` at ``at`` (the run's clock)."""
    run_id = service.create_run(app, SCOPE, force=True, phases=["contradictions"], clock=at)
    assert run_id
    service.execute_run(app, run_id)
    return run_id


def _memory(app: App) -> list[Row]:
    with app.uow() as uow:
        rows = uow.session.execute(select(JudgementRow.kind, JudgementRow.note_ids,
                                          JudgementRow.run_id)).all()
    return sorted(((r.kind, tuple(r.note_ids), r.run_id) for r in rows),
                  key=lambda r: (r[0], r[1], r[2] or ""))


def _add(app: App, kind: str, ids: list[str], run_id: str | None, at: datetime) -> None:
    with app.uow() as uow:
        uow.session.execute(insert(JudgementRow).values(
            scope_key=SCOPE.key, kind=kind, fingerprint=f"{kind}-{'-'.join(ids)}-{at:%j%H}",
            note_ids=sorted(ids), verdict="x", reason=None, run_id=run_id, created_at=at))
        uow.commit()


def _asked(app: App, run_id: str) -> list[tuple[str, str]]:
    """The pairs the run asked the model about."""
    return sorted((p["a"], p["b"]) for c in phase_step(app, run_id)["children"]
                  for t in c["input"].get("topics", []) for p in t["pairs"])


def test_a_run_deletes_dead_verdicts_of_earlier_runs_and_keeps_every_other(
    app: App, llm_stub: LLMStub
) -> None:
    with_stub(app, llm_stub)
    add_notes(app, {"id": "old", "content": METRIC, "created_at": days_ago(20)},
              {"id": "new", "content": IMPERIAL, "created_at": days_ago(6)},
              {"id": "t1", "content": TEA_BREAKFAST, "created_at": days_ago(30)},
              {"id": "t2", "content": TEA_SUGAR, "created_at": days_ago(1)})
    keep_apart(app, ["old", "t1"])
    first = _dream(app, NOW)
    with app.uow() as uow:
        assert {n.id: n.status for n in uow.session.query(NoteRow)}["old"] == "revoked"
    asked = len(llm_stub.chat_requests())
    judged = _memory(app)
    gone = [r for r in judged if r[2] == first and "old" in r[1]]
    assert gone and any(r[0] == "pair" and "old" not in r[1] for r in judged)
    later = NOW + DAY
    period = timedelta(hours=app.settings.llm_unanswered_hours)
    _add(app, "pair", ["new", "old"], None, NOW)  # a reviewer's decline: no run
    _add(app, "fused", ["old", "t2"], "fuse-1", NOW)  # a host's fuse
    _add(app, "unanswered", ["t1", "t2"], first, later - period - DAY)  # cooled off
    _add(app, "unsettled", ["new", "t2"], first, later - period - DAY)  # cooled off
    _add(app, "unanswered", ["new", "t1"], first, NOW)  # still cooling
    before = _memory(app)

    second = _dream(app, later)
    cooled = [("unanswered", ("t1", "t2"), first), ("unsettled", ("new", "t2"), first)]
    assert _memory(app) == [r for r in before if r not in gone and r not in cooled]
    assert ("keep_apart", ("old", "t1"), None) in _memory(app)
    assert phase_step(app, second)["output"]["verdicts_pruned"] == len(gone) + len(cooled)
    assert len(llm_stub.chat_requests()) == asked  # every live pair still remembered

    # Nothing dead left: the next run deletes nothing, in no statement, and asks nothing.
    with recorded_statements(app) as seen:
        third = _dream(app, later + DAY)
    assert not [s for s in seen if s.startswith("DELETE FROM judgements")]
    assert "verdicts_pruned" not in phase_step(app, third)["output"]
    assert len(llm_stub.chat_requests()) == asked


def three_notes_dreamed(app: App, llm_stub: LLMStub) -> str:
    """Notes a, b, c, the host keeping a and c apart, and a first dream that asks about
    (a, b) and (b, c); its run id."""
    with_stub(app, llm_stub)
    add_notes(app, {"id": "a", "content": TEA_BREAKFAST, "created_at": days_ago(30)},
              {"id": "b", "content": TEA_SUGAR, "created_at": days_ago(20)},
              {"id": "c", "content": METRIC, "created_at": days_ago(10)})
    keep_apart(app, ["a", "c"])
    first = _dream(app, NOW)
    assert _asked(app, first) == [("a", "b"), ("b", "c")]
    return first


def test_an_undo_after_pruning_gives_the_note_back_and_asks_only_its_pairs(
    app: App, llm_stub: LLMStub
) -> None:
    """A run archived c; the next dream pruned c's verdicts (not the host's keep-apart of a
    and c); undoing the archive gives c back at a new version, and the dream after asks only
    about c's pair the host did not keep apart (what it would ask had nothing been pruned:
    c's version moved), applying nothing it should not."""
    three_notes_dreamed(app, llm_stub)
    archived = run_row(app, SCOPE)
    with app.uow() as uow:
        (c,) = uow.notes.get_many(["c"])
        assert uow.notes.change(c, run_id=archived, reason="archive", now=NOW, status="archived")
        uow.commit()

    pruned = _dream(app, NOW + DAY)
    assert phase_step(app, pruned)["output"]["verdicts_pruned"] == 1
    assert [r for r in _memory(app) if "c" in r[1]] == [("keep_apart", ("a", "c"), None)]
    assert _asked(app, pruned) == [] and len(llm_stub.chat_requests()) == 1

    assert undo_run(app, archived).restored == ["c"]
    after = _dream(app, NOW + 2 * DAY)
    assert _asked(app, after) == [("b", "c")] and len(llm_stub.chat_requests()) == 2
    out: dict[str, Any] = phase_step(app, after)["output"]
    assert out["pairs_kept_apart"] == 1 and "verdicts_pruned" not in out
    with app.uow() as uow:
        assert {n.id: n.status for n in uow.session.query(NoteRow)} == {
            "a": "active", "b": "active", "c": "active"}


AB = fingerprint_versions([("a", 1), ("b", 1)])  # a and b at their versions now


def _row(kind: str, ids: list[str], run_id: str | None, at: datetime, row_id: int = 1,
         fp: str = "fp") -> Judged:
    return Judged(kind, fp, ids, "v", None, at, row_id, run_id)


def test_only_a_run_kind_of_another_run_naming_a_retired_note_or_cooled_off_is_dead() -> None:
    live, since = {"a": 1, "b": 1}, NOW - DAY
    rows = [
        _row("pair", ["a", "x"], "r1", NOW, 1),  # x retired: dead
        _row("pair", ["a", "b"], "r1", NOW - 9 * DAY, 2, AB),  # live notes, any age: kept
        _row("cluster", ["a", "b", "x"], "r1", NOW, 3),  # dead
        _row("retire_pending", ["x", "a"], "r1", NOW, 4),  # dead
        _row("unanswered", ["a"], "r1", since - timedelta(seconds=1), 5),  # cooled off: dead
        _row("unanswered", ["a"], "r1", since, 6),  # still cooling: kept
        _row("unsettled", ["a", "b"], "r1", NOW - 2 * DAY, 7),  # dead
        _row("pair", ["a", "x"], None, NOW, 8),  # a reviewer's decline: kept
        _row("keep_apart", ["a", "x"], "r1", NOW, 9),  # a person's decision: kept
        _row("declined_apart", ["a", "x"], "r1", NOW, 10),
        _row("review_declined", ["a", "x"], "r1", NOW, 11),
        _row("fused", ["a", "x"], "fuse-1", NOW, 12),
        _row("pair", ["a", "x"], "r2", NOW, 13),  # this run's own: kept (its undo's)
        Judged("pair", "fp", ["a", "x"], "v", None),  # recorded since the load: kept
    ]
    assert dead(rows, live, since, "r2") == [1, 3, 4, 5, 7]
    assert dead(rows, live, None, "r2") == [1, 3, 4]  # period 0: nothing by date
