"""A keep-apart the host records after a run's load (while its model judges) holds at the run's
write: a keep-apart keeps the notes' versions, so the freshness check alone let the plan retire
one of the notes in favour of the other (SQLite and PostgreSQL)."""

from __future__ import annotations

from tests.phases.kit.test_write_hosts import SCOPE, _known, _only_b_skipped, _pairs, _rows, _write
from tests.support.factories import add_notes, claimed_phase_context
from worker.app import App
from worker.host.fusion import keep_apart
from worker.phases.kit import ItemStatus, NewNote, WriteTarget, open_write, supersede


def test_a_pair_kept_apart_after_the_load_is_not_revoked(app: App) -> None:
    """Pair b's notes kept apart after the load: b stale, naming both; a and c applied."""
    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    known = _known(app)
    keep_apart(app, ["bold", "bnew"])
    before = _rows(app)
    results = _write(ctx, parent, changes, known)
    assert results[1].status == ItemStatus.STALE and results[1].stale_ids == ["bnew", "bold"]
    assert _rows(app)["bold"] == before["bold"]
    _only_b_skipped(app, ctx, results, before)


def test_a_merge_of_notes_kept_apart_after_the_load_is_not_written(app: App) -> None:
    """Consolidation's fusion of two sources the host kept apart meanwhile: nothing written."""
    ctx, parent = claimed_phase_context(app, SCOPE, phase="consolidate")
    add_notes(app, {"id": "x", "content": "User owns a red bicycle"},
              {"id": "y", "content": "User owns a red bicycle."})
    with app.uow() as uow:
        sources = uow.notes.get_many(["x", "y"])
    text = "User owns a red bicycle"
    fused = NewNote(id="fused", content=text, type="Context", importance=0.5,
                    consolidation_generation=1, is_auto_generated=True, reason="merged")
    change = supersede("cluster", sources, new_note=fused, relation="consolidated",
                       reason="rule: identical", comment="Consolidated into fused")
    keep_apart(app, ["x", "y"])
    with open_write(WriteTarget.of(ctx, "consolidate", parent)) as w:
        (result,) = w.apply([change])
    assert result.status == ItemStatus.STALE and result.stale_ids == ["x", "y"]
    rows = _rows(app)
    assert rows["x"]["status"] == rows["y"]["status"] == "active" and "fused" not in rows
