"""A forced undo's cascade and the notes a person holds (R17, R23, R26): a pinned or manual note
a later write's undo retires on the way and the asked run's undo gives back active loses nothing,
so the undo proceeds (before, it refused at that step, naming the later write); one the whole
undo leaves retired still refuses it, in one line naming the asked run, the step, the note and
what to do, and nothing is written. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from tests.phases.prune.test_lineage import _fused, _run
from tests.safety.test_undo import SCOPE, _fuse, _seed
from tests.support.factories import add_entities
from tests.support.host_writes import host_sets, note_rows
from tests.support.safety import note_states, run_row
from worker.app import App
from worker.cli import main
from worker.errors import RunError
from worker.safety.undo import UndoRefused, undo_run
from worker.store.models import DreamRunRow

HOLDS = [{"protection": "protected"}, {"protection": "immutable"}, {"is_auto_generated": False}]
HOLD_IDS = ["protected", "immutable", "manual"]


@pytest.mark.parametrize("hold", HOLDS, ids=HOLD_IDS)
def test_a_cascade_gives_back_active_a_source_a_prune_restored_and_a_person_held_since(
        app: App, hold: dict[str, Any]) -> None:
    """Real runs: consolidation fuses d1 and d2; c1 is deleted and a prune run archives the
    fused note, giving d2 back; a person pins d2 or takes it over. The prune's own undo would
    retire d2 again: refused, naming it. The consolidation's forced undo undoes the prune on the
    way and then gives d1 and d2 back active, d2 still held: it proceeds."""
    fused = _fused(app, ("c1", "c2"))
    with app.uow() as uow:
        [consolidated] = uow.session.scalars(select(DreamRunRow.id)).all()
    add_entities(app, {"kind": "conversation", "id": "c1", "status": "deleted"})
    pruned = _run(app)
    assert note_states(app)["d2"]["status"] == "active"
    host_sets(app, "d2", **hold)
    before = note_states(app)
    with pytest.raises(UndoRefused, match=f"cannot undo run {pruned}: note d2 is "):
        undo_run(app, pruned, force_cascade=True)
    assert note_states(app) == before
    assert undo_run(app, consolidated, force_cascade=True).run_ids == [pruned, consolidated]
    after = note_states(app)
    assert {i: s["status"] for i, s in after.items()} == {
        "d1": "active", "d2": "active", fused: "revoked"}
    row = note_rows(app)["d2"]
    assert {k: getattr(row, k) for k in hold} == hold


def _chain(app: App) -> tuple[str, str, str, str]:
    """Run 1 fuses n0 and n1 into f; run 2 fuses f and n2 into g. (run 1, f, run 2, g)."""
    _seed(app)
    first = run_row(app, SCOPE)
    f = _fuse(app, first, ["n0", "n1"], "User likes tea")
    second = run_row(app, SCOPE)
    g = _fuse(app, second, [f, "n2"], "User likes tea a lot")
    return first, f, second, g


@pytest.mark.parametrize("hold", HOLDS, ids=HOLD_IDS)
def test_a_cascade_that_would_leave_a_held_note_retired_still_refuses(
        app: App, hold: dict[str, Any]) -> None:
    """A person holds g, run 2's fused note: run 1's forced undo, whose cascade undoes run 2,
    would leave g retired. Refused, one line naming run 1, the cascade's run 2, g and what to
    do; nothing written. Released, the undo proceeds and g is retired."""
    first, f, second, g = _chain(app)
    host_sets(app, g, **hold)
    before = note_states(app)
    what = "manual" if "is_auto_generated" in hold else hold["protection"]
    with pytest.raises(UndoRefused) as refused:
        undo_run(app, first, force_cascade=True)
    line = str(refused.value)
    assert line.startswith(f"cannot undo run {first} with --force-cascade (which undoes run "
                           f"{second} on its way): note {g} is {what}")
    assert ("is_auto_generated back to true" if what == "manual" else
            "protection back to standard") in line and "\n" not in line
    assert [(r["id"], r["outcome"]) for r in refused.value.refused] == [(g, "refused")]
    assert note_states(app) == before
    released = {"is_auto_generated": True} if what == "manual" else {"protection": "standard"}
    host_sets(app, g, **released)
    assert undo_run(app, first, force_cascade=True).run_ids == [second, first]
    states = note_states(app)
    assert (states[g]["status"], states[f]["status"]) == ("revoked", "revoked")
    assert {i: states[i]["status"] for i in ("n0", "n1", "n2", "n3")} == dict.fromkeys(
        ("n0", "n1", "n2", "n3"), "active")


@pytest.mark.parametrize("hold", HOLDS, ids=HOLD_IDS)
def test_a_held_note_a_cascade_gives_back_and_the_run_retires_still_refuses(
        app: App, hold: dict[str, Any]) -> None:
    """A person holds f after run 2 retired it: the cascade gives f back active, then run 1's
    undo would retire it (run 1 created it). Refused, naming f; nothing written."""
    first, f, _second, _g = _chain(app)
    host_sets(app, f, **hold)
    before = note_states(app)
    with pytest.raises(UndoRefused, match=f"^cannot undo run {first}: note {f} is "):
        undo_run(app, first, force_cascade=True)
    assert note_states(app) == before


def test_the_cascades_refusal_is_one_error_line_and_exit_4(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dream undo RUN --force-cascade` answers it as one `error:` line, the conflict exit code,
    and `--json` lists the held note as refused."""
    first, _f, second, g = _chain(app)
    host_sets(app, g, protection="immutable")
    before = note_states(app)
    monkeypatch.setenv("DREAM_DATABASE_URL", app.settings.database_url)
    out = CliRunner().invoke(main, ["undo", first, "--force-cascade"])
    assert out.exit_code == RunError.exit_code
    assert out.stderr.count("\n") == 1
    assert out.stderr.startswith(f"error: cannot undo run {first} with --force-cascade (which "
                                 f"undoes run {second} on its way): note {g} is immutable")
    out = CliRunner().invoke(main, ["undo", first, "--force-cascade", "--json"])
    assert out.exit_code == RunError.exit_code and f'"id": "{g}"' in out.stdout
    assert note_states(app) == before


@pytest.mark.parametrize("hold", HOLDS, ids=HOLD_IDS)
def test_a_plain_undo_names_the_hold_not_a_forced_undo_that_would_refuse_too(
        app: App, hold: dict[str, Any]) -> None:
    """A person edits run 1's fused note (a new version, no log row) and pins or takes it over:
    the plain undo refused over the edit and offered --force-cascade, which then refused over
    the hold. Now both name the hold and what to do, nothing written; released, the plain undo
    offers --force-cascade again and that retires the note."""
    _seed(app)
    first = run_row(app, SCOPE)
    f = _fuse(app, first, ["n0", "n1"], "User likes tea")
    version = note_rows(app)[f].version
    host_sets(app, f, content="User likes green tea", version=version + 1, **hold)
    before = note_states(app)
    what = "manual" if "is_auto_generated" in hold else hold["protection"]
    for force in (False, True):
        with pytest.raises(UndoRefused, match=f"^cannot undo run {first}: note {f} is {what} "):
            undo_run(app, first, force_cascade=force)
        assert note_states(app) == before
    host_sets(app, f, **({"is_auto_generated": True} if what == "manual"
                         else {"protection": "standard"}))
    with pytest.raises(UndoRefused, match=f"note {f} was edited since .*--force-cascade"):
        undo_run(app, first)
    assert undo_run(app, first, force_cascade=True).retired == [f]
