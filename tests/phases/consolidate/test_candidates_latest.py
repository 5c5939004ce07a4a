"""Which run `dream candidates` reads its open candidates from (found by the adversarial pass):
the latest dream that still stands, as the ``dream_open_candidates`` gauge counts it, not a run
that was cancelled or failed before it judged anything. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from tests.phases.consolidate.test_service import SCOPE, _notes, _run
from tests.support.factories import NOW, add_notes
from worker.app import App
from worker.domain.types import RunStatus
from worker.host import fusion_candidates
from worker.phases.consolidate.service import open_candidates
from worker.reporting import scope_health
from worker.runs import service
from worker.store.repositories.dashboard import ScopeFilter


@pytest.mark.parametrize("ends", [RunStatus.CANCELLED.value, RunStatus.FAILED.value])
def test_a_run_that_ended_before_judging_hides_no_candidate(app: App, ends: str) -> None:
    """The rule judge left one cluster open. A later run the operator cancelled (or that
    failed) judged nothing, yet `dream candidates` read it and listed none while the gauge
    still counted one. Now both read the dream before it."""
    add_notes(app, *_notes([
        "User prefers dark mode in the code editor",
        "User prefers dark mode in the code editor and terminal",
        "User prefers the dark mode theme in the code editor",
    ]))
    dreamed = _run(app)["run_id"]
    assert [c["run_id"] for c in open_candidates(app, SCOPE)] == [dreamed]
    later = service.create_run(app, SCOPE, force=True, clock=NOW)
    assert later is not None
    if ends == RunStatus.CANCELLED.value:
        service.cancel_run(app, later)
    else:
        with app.uow() as uow:
            run = uow.runs.get(later)
            assert run is not None
            assert uow.runs.finish_unclaimed(run, ends, NOW, status_reason="broker lost")
            uow.commit()
    with app.uow() as uow:
        assert uow.runs.get(later).status == ends  # type: ignore[union-attr]
        assert uow.run_history.latest_open_candidates(SCOPE) == {SCOPE.key: 1}
    assert [c["run_id"] for c in open_candidates(app, SCOPE)] == [dreamed]


def test_a_run_of_other_phases_hides_no_candidate(app: App) -> None:
    """`dream run --phases prune` after the dream judged no cluster, yet `dream candidates`
    read it and listed none, and the gauge counted zero for the scope. Now both still read the
    dream that judged them; the prune run records no count of its own."""
    add_notes(app, *_notes([
        "User prefers dark mode in the code editor",
        "User prefers dark mode in the code editor and terminal",
        "User prefers the dark mode theme in the code editor",
    ]))
    dreamed = _run(app)["run_id"]
    later = service.create_run(app, SCOPE, force=True, clock=NOW, phases=["prune", "archive"])
    assert later is not None
    assert service.execute_run(app, later) == RunStatus.SUCCEEDED.value
    with app.uow() as uow:
        assert uow.run_history.latest_open_candidates(SCOPE) == {SCOPE.key: 1}
        assert (uow.runs.get(later).totals or {})["open_candidates"] is None  # type: ignore[union-attr]
    assert [c["run_id"] for c in open_candidates(app, SCOPE)] == [dreamed]
    [row] = scope_health(app, ScopeFilter(scope=SCOPE), 1, 10)["scopes"]
    assert row["open"] == [1]  # the dashboard's series: no zero for the prune run


def test_a_dry_run_hides_no_candidate_and_offers_none(app: App) -> None:
    """`dream candidates` read the scope's latest finished run, a dry run too (the gauge and
    the growth check leave dry runs out): it offered the dry run's open clusters, of a scope
    its merges never changed, citing the dry run, and hid the open items of the dream before
    it. Both the phase's listing and the host's read the dream."""
    add_notes(app, *_notes([
        "User prefers dark mode in the code editor",
        "User prefers dark mode in the code editor and terminal",
        "User prefers the dark mode theme in the code editor",
    ]))
    dreamed = _run(app)["run_id"]
    dry = _run(app, dry_run=True)["run_id"]
    assert [c["run_id"] for c in open_candidates(app, SCOPE)] == [dreamed]
    cited = {c["run_id"] for c in fusion_candidates(app, SCOPE) if c.get("run_id")}
    assert cited == {dreamed} and dry not in cited


def test_a_proposing_runs_open_rest_of_one_note_is_no_candidate(app: App) -> None:
    """In propose mode the rules' merge of two notes is proposed (a note-to-be) and the third
    is left: the step of the open rest names that one note. `dream candidates` (the host's
    listing) offered no one-note cluster; the phase's own listing did."""
    from tests.support.factories import add_entities

    add_entities(app, {"kind": "agent", "id": SCOPE.agent_id, "apply_mode": "propose"})
    add_notes(app, *_notes([
        "User prefers dark mode in the code editor",
        "User prefers dark mode in the code editor and terminal",
        "User prefers the dark mode theme in the code editor",
    ]))
    run_id = _run(app)["run_id"]
    with app.uow() as uow:
        named = [(s.output or {})["note_ids"] for s in uow.runs.steps(run_id)
                 if (s.output or {}).get("verdict") == "open"]
    assert named == [["d2"]]  # the rest the step records: one note beside the proposal
    assert open_candidates(app, SCOPE) == []
