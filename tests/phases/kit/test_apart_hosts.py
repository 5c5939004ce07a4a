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


def test_an_in_process_write_sees_a_keep_apart_by_its_update_not_by_a_read(app: App) -> None:
    """The run as it runs in one process: its carried state holds the verdict memory the plan
    read, so its write reads no keep-apart again (the SQL a scope costs stays as it was); its
    guarded UPDATE counts the scope's keep-aparts instead, and one recorded since makes the
    write start over with a re-read: pair b stale, a and c applied. (With none since, an
    in-process run reads the verdict memory once: tests/phases/kit/test_carry.py.)"""
    from tests.support.sql import recorded_statements
    from worker.phases.kit.carry import MEMORY_KINDS, Judged
    from worker.phases.kit.snapshot import Memory

    ctx, parent = claimed_phase_context(app, SCOPE)
    changes = _pairs(app)
    keep_apart(app, ["aold", "cold"])  # an earlier keep-apart, read by the plan: binds nothing here
    known = _known(app)
    with app.uow() as uow:
        rows = [Judged(*r) for r in uow.judgements.of_kinds(SCOPE, MEMORY_KINDS)]
    known.memory = Memory({(r.kind, r.fingerprint): r.verdict for r in rows}, rows)
    keep_apart(app, ["bold", "bnew"])
    before = _rows(app)
    with recorded_statements(app) as seen:
        results = _write(ctx, parent, changes, known)
    assert results[1].status == ItemStatus.STALE and results[1].stale_ids == ["bnew", "bold"]
    _only_b_skipped(app, ctx, results, before)
    assert any(s.startswith("SELECT") and "FROM judgements" in s for s in seen)  # the re-read
