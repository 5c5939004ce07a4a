"""A keep-apart outlives a fusion (worker.phases.kit.apart): notes A and X kept apart, A fused
with its duplicate into N, then N and X are kept apart too. Before, a run fused A into N and
its contradictions phase then retired N into X: what the host kept apart merged after all."""

from __future__ import annotations

from types import SimpleNamespace

from tests.support.factories import add_notes
from worker.app import App
from worker.domain.types import Scope, fingerprint_versions
from worker.host import fuse, keep_apart
from worker.phases.kit.apart import inherited
from worker.phases.kit.snapshot import KEEP_APART
from worker.runs import service

SCOPE = Scope("tea-bot")
NOTES = ({"agent_id": "tea-bot", "id": "a1", "content": "The user likes green tea"},
         {"agent_id": "tea-bot", "id": "a2", "content": "The user likes green tea."},
         {"agent_id": "tea-bot", "id": "x", "content": "The user likes green tea every morning"},
         *({"agent_id": "tea-bot", "id": f"f{i}", "content": text} for i, text in enumerate((
             "The office is in Berlin", "The team uses Slack", "Invoices go to accounting",
             "The laptop is a ThinkPad", "Standup is at nine"))))


def _statuses(app: App) -> dict[str, tuple[str, str | None]]:
    with app.uow() as uow:
        snap = uow.notes.load_scope(SCOPE, ("active", "revoked", "archived"), vectors=False)
    return {n.id: (n.status, n.consolidated_into_id) for n in snap.notes}


def _kept(app: App) -> list[list[str]]:
    with app.uow() as uow:
        return sorted(sorted(r.note_ids) for r in uow.judgements.of_kinds(SCOPE, (KEEP_APART,)))


def test_a_run_that_fuses_a_note_keeps_its_fusion_apart_from_the_other(app: App) -> None:
    """The rule judge fuses a1 and a2 (identical) into a new note; contradictions finds that
    note contained in x. x was kept apart from a1, so it stays, and so does the fusion."""
    add_notes(app, *NOTES)
    keep_apart(app, ["a1", "x"])
    run = service.create_run(app, SCOPE, force=True)
    assert run is not None and service.execute_run(app, run) == "succeeded"
    after = _statuses(app)
    fused = after["a1"][1]
    assert fused is not None and after["a2"] == ("revoked", fused)  # the fusion happened
    assert after["x"] == ("active", None) and after[fused] == ("active", None)
    assert _kept(app) == sorted([["a1", "x"], sorted([fused, "x"])])


def test_a_hosts_fusion_passes_the_keep_apart_on_too(app: App) -> None:
    """`dream fuse` (no run, the write reads the keep-aparts itself): the fused note is kept
    apart from x, and a run after it leaves both."""
    add_notes(app, *NOTES)
    keep_apart(app, ["a1", "x"])
    fused = str(fuse(app, ["a1", "a2"], "The user likes green tea").note["id"])
    assert _kept(app) == sorted([["a1", "x"], sorted([fused, "x"])])
    run = service.create_run(app, SCOPE, force=True)
    assert run is not None and service.execute_run(app, run) == "succeeded"
    after = _statuses(app)
    assert after["x"] == ("active", None) and after[fused] == ("active", None)


def _row(ids: list[str], versions: dict[str, int]) -> SimpleNamespace:
    return SimpleNamespace(kind=KEEP_APART, verdict=KEEP_APART, note_ids=ids,
                           fingerprint=fingerprint_versions([(i, versions[i]) for i in ids]))


def test_only_a_keep_apart_that_held_passes_to_an_active_partner() -> None:
    """The pure rule, row by row: carried from the retired note to the one replacing it, at
    the versions after the write; nothing from a row a change had already outdated, nothing to
    a partner the write retires as well, nothing for a row naming no retired note."""
    before = {"a": 2, "x": 1, "y": 4, "z": 1}
    after: dict[str, int | None] = {"n": 1, "x": 1, "y": None, "z": 1}
    into = {"a": "n", "y": "m"}
    held = _row(["a", "x"], before)
    outdated = _row(["a", "z"], {**before, "z": 0})  # z changed after it was recorded
    both_go = _row(["a", "y"], before)
    elsewhere = _row(["x", "z"], before)
    (carried,) = inherited([held, outdated, both_go, elsewhere], into, before, after)
    assert carried.note_ids == ("n", "x")
    assert carried.fingerprint == fingerprint_versions([("n", 1), ("x", 1)])
    assert "a" in carried.reason and "x" in carried.reason
