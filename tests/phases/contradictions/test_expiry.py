"""A note retired into another as the same fact never shortens that fact's life.

When the contradictions phase retires a note as subsumed by, or equivalent to, the note it
keeps, the kept note stands for both: it expires at the later of the two expiries, and never
when either never expires. Before, "Priya plays the cello." (no expiry) subsumed into "Priya
plays the cello in a quartet this season." (expiring) left nothing about the cello once the
season ended. A conflict's loser is outdated, so its life is not carried. The kept note's
expiry is written at its version, logged, and `dream undo` gives the old one back.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from tests.phases.contradictions.test_service import (
    SCOPE,
    Judge,
    phase_step,
    rows,
    run_phase,
    with_stub,
)
from tests.support.factories import NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.phases.kit.changes import Change, ChangeKind, Member
from worker.phases.kit.evaluate import outlive
from worker.runs import service
from worker.safety.undo import UndoRefused, undo_run
from worker.store.models import NoteRow, OperationLogRow

CELLO = "Priya plays the cello."
QUARTET = "Priya plays the cello in a quartet this season."
SEASON_END = NOW + timedelta(days=10)


def _at(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _cello(app: App, cello_expires: datetime | None = None) -> None:
    add_notes(app, {"id": "p1", "content": CELLO, "created_at": days_ago(150),
                    "expires_at": cello_expires.isoformat() if cello_expires else None},
              {"id": "p2", "content": QUARTET, "created_at": days_ago(5),
               "expires_at": SEASON_END.isoformat()})


def judged(relation: str) -> Judge:
    """The model calls the pair ``relation`` (the quartet note the fuller one when subsumed)."""
    def judge(a: str, b: str) -> tuple[str, float] | None:
        if relation != "subsumed":
            return (relation, 0.95)
        return ("a_subsumes_b" if len(a) > len(b) else "b_subsumes_a", 0.95)
    return judge


def test_the_rule_judge_keeps_the_quartet_note_as_long_as_the_cello_fact(app: App) -> None:
    """The brief's case through the rule judge: p1 is retired into p2, and p2 no longer expires
    at the season's end; an archive run after it leaves p2 active. The log holds p2's old
    expiry, at its version."""
    _cello(app)
    run_id = run_phase(app)
    notes = rows(app)
    assert (notes["p1"].status, notes["p1"].consolidated_into_id) == ("revoked", "p2")
    assert (notes["p2"].status, notes["p2"].expires_at, notes["p2"].version) == (
        "active", None, 1)
    with app.uow() as uow:
        (entry,) = uow.session.query(OperationLogRow).filter_by(entity_id="p2",
                                                                  run_id=run_id).all()
    assert entry.before is not None and entry.after is not None
    assert (entry.before["expires_at"], entry.after["expires_at"]) == (
        SEASON_END.isoformat(), None)
    later = service.create_run(app, SCOPE, force=True, phases=["archive"],
                               clock=SEASON_END + timedelta(days=30))
    assert later
    service.execute_run(app, later)
    assert rows(app)["p2"].status == "active"


@pytest.mark.parametrize(("relation", "cello_expires", "kept_until"), [
    # the loser never expires: neither does the note kept for it
    ("subsumed", None, None),
    ("equivalent", None, None),
    # both expire: the later of the two
    ("subsumed", SEASON_END + timedelta(days=60), SEASON_END + timedelta(days=60)),
    ("equivalent", SEASON_END + timedelta(days=60), SEASON_END + timedelta(days=60)),
    # the loser expires first: the kept note keeps its own
    ("subsumed", SEASON_END - timedelta(days=5), SEASON_END),
    # a conflict's loser is outdated: nothing of its life is carried
    ("conflicting", None, SEASON_END),
])
def test_a_model_verdict_keeps_the_later_expiry(
        app: App, llm_stub: LLMStub, relation: str, cello_expires: datetime | None,
        kept_until: datetime | None) -> None:
    _cello(app, cello_expires)
    """The newer, fuller quartet note is kept whatever the relation; its expiry is the later
    of the two for the same fact, its own for a conflict."""
    with_stub(app, llm_stub, judged(relation))
    run_phase(app)
    notes = rows(app)
    assert (notes["p1"].status, notes["p1"].consolidated_into_id) == ("revoked", "p2")
    assert notes["p2"].status == "active"
    assert _at(notes["p2"].expires_at) == kept_until
    assert _at(notes["p1"].expires_at) == cello_expires


def test_undo_gives_the_kept_note_its_old_expiry_back(app: App) -> None:
    _cello(app)
    run_id = run_phase(app)
    assert rows(app)["p2"].expires_at is None
    undo_run(app, run_id)
    notes = rows(app)
    assert notes["p1"].status == notes["p2"].status == "active"
    assert _at(notes["p2"].expires_at) == SEASON_END
    assert notes["p1"].expires_at is None


def test_undo_refuses_to_overwrite_an_expiry_the_host_renewed_since(app: App) -> None:
    """A host renews an expiry without a version: restoring the run's before-image would undo
    the renewal silently, so the undo refuses, naming the field."""
    _cello(app)
    run_id = run_phase(app)
    renewed = NOW + timedelta(days=400)
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == "p2").values(expires_at=renewed))
        uow.commit()
    with pytest.raises(UndoRefused, match="expires_at"):
        undo_run(app, run_id)
    assert _at(rows(app)["p2"].expires_at) == renewed


def test_a_stored_change_keeps_its_expiry_extension() -> None:
    change = Change(kind=ChangeKind.SUPERSEDE, name="p1->p2", members=(Member("p1", 1),),
                    keep=(Member("p2", 1),), into_id="p2", relation="subsumed",
                    extend_expiry=True)
    assert Change.from_json(change.to_json()).extend_expiry is True
    assert Change.from_json({**change.to_json(), "extend_expiry": None}).extend_expiry is False


def test_an_expired_fuller_note_keeps_nothing_and_goes_in_the_same_runs_archive(
        app: App) -> None:
    """The season ended before the run: the quartet note, which says all the cello note says,
    is past its expiry but still active. It is archive's to take, so the rules do not retire
    the cello note into it (nor lend it the cello note's lasting life): the run's archive
    phase takes it and the cello note stays. (Until the expiry rule, the cello note was
    retired into it and the ended season's note lived on with no expiry.)"""
    add_notes(app, {"id": "p1", "content": CELLO, "created_at": days_ago(150)},
              {"id": "p2", "content": QUARTET, "created_at": days_ago(5),
               "expires_at": (NOW - timedelta(days=1)).isoformat()})
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW,
                                phases=["contradictions", "archive"])
    assert run_id
    service.execute_run(app, run_id)
    assert {k: r.status for k, r in rows(app).items()} == {"p1": "active", "p2": "archived"}


def test_outlive() -> None:
    """The kept note's expiry as the write computes it, one row per case."""
    later = SEASON_END + timedelta(days=30)
    cases: list[tuple[datetime | None, list[datetime | None], str, datetime | None]] = [
        (SEASON_END, [None], "standard", None),  # a member never expires
        (SEASON_END, [later], "protected", later),  # the later of the two
        (later, [SEASON_END], "standard", later),  # its own is later: kept
        (None, [SEASON_END], "standard", None),  # it never expires: kept
        (SEASON_END, [None], "immutable", SEASON_END),  # immutable: its own, as its date
    ]
    for own, members, protection, expected in cases:
        kept = {"expires_at": own, "protection": protection}
        outlive(kept, [{"expires_at": m} for m in members])
        assert kept["expires_at"] == expected


STANDUP = "The standup starts at 9:00"
THIS_WEEK = "This week only, the standup starts at 11:00"


def test_a_note_expired_at_the_run_s_clock_retires_nothing(app: App, llm_stub: LLMStub) -> None:
    """The audit's case: "… 11:00" (this week only) expired before the run; the model would
    call the pair a conflict the newer note wins. It is archive's to take, so it is no
    candidate (``notes_expired``): "… 9:00" stays, and the full run leaves it the one value.
    Before, 9:00 was retired into 11:00 and archive then took 11:00: no value at all."""
    add_notes(app, {"id": "old", "content": STANDUP, "created_at": days_ago(30)},
              {"id": "week", "content": THIS_WEEK, "created_at": days_ago(10),
               "expires_at": days_ago(6)})
    with_stub(app, llm_stub, lambda a, b: ("conflicting", 0.95))
    run_id = run_phase(app)
    assert rows(app)["old"].status == "active"
    assert phase_step(app, run_id)["output"]["notes_expired"] == 1
    full = service.create_run(app, SCOPE, force=True, clock=NOW)
    assert full
    service.execute_run(app, full)
    assert {k: r.status for k, r in rows(app).items()} == {"old": "active", "week": "archived"}
