"""An erasure takes back the life an erased note gave the note it was retired into.

The contradictions phase makes the note it keeps for a subsumed or equivalent note live as long
as either did, and a fusion lives as long as its longest-lived source. Before, erasing the
retired note's conversation left the kept note (and a fusion of it) living as long as the
erased note had: "Priya plays the cello." (c1, no expiry) subsumed into "… in a quartet this
season." (c2) kept c2's note for ever after c1 was erased. The erasure now gives it the expiry
it would have without the erased note, unless the host changed it since. SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from tests.phases.contradictions.test_expiry import CELLO, QUARTET, SEASON_END
from tests.phases.contradictions.test_service import rows, run_phase
from tests.safety.test_erase_kept_apart import _statuses_after_consolidating
from tests.safety.test_erase_survivors import _cli
from tests.support.factories import NOW, add_notes, days_ago
from worker.app import App
from worker.clock import utcnow
from worker.host.fusion import fuse, keep_apart
from worker.safety.erase import erase
from worker.safety.erase_expiry import shortened
from worker.safety.undo import undo_run
from worker.store.models import NoteRow, OperationLogRow
from worker.store.repositories.kept_lives import Keeper, Life

LATER = SEASON_END + timedelta(days=30)
# A host's fuse runs at the wall clock and refuses a source already expired then: the sources
# it fuses expire after it (the phases' notes keep the tests' fixed clock).
AHEAD = utcnow().replace(microsecond=0) + timedelta(days=60)
AHEAD_LATER = AHEAD + timedelta(days=30)
LATEST = SEASON_END + timedelta(days=90)
RENEWED = NOW + timedelta(days=400)


def _at(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _expiry(app: App, note_id: str) -> datetime | None:
    return _at(rows(app)[note_id].expires_at)


def _cello(app: App) -> None:
    """p1 (c1, never expires) subsumed into p2 (c2, the season's end) by the rule judge: p2
    never expires now."""
    add_notes(app, {"id": "p1", "content": CELLO, "created_at": days_ago(150),
                    "source_conversation_id": "c1"},
              {"id": "p2", "content": QUARTET, "created_at": days_ago(5),
               "expires_at": SEASON_END.isoformat(), "source_conversation_id": "c2"})
    run_phase(app)
    notes = rows(app)
    assert (notes["p1"].status, notes["p1"].consolidated_into_id) == ("revoked", "p2")
    assert (notes["p2"].status, notes["p2"].expires_at) == ("active", None)


@pytest.mark.parametrize("subject", [{"conversation_id": "c1"}, {"note_id": "p1"}])
def test_erasing_the_subsumed_note_gives_the_kept_note_its_own_expiry_back(
        app: App, subject: dict[str, str]) -> None:
    """p1 erased: p2 expires at the season's end again, one version up, logged under the
    erasure's id with its before-image; undoing the erasure gives the longer life back with
    the rest of what it changed."""
    _cello(app)
    version = rows(app)["p2"].version
    result = erase(app, **subject)
    assert result.note_ids == ["p1"]
    assert result.lived_ids == ["p2"]
    assert result.erase_id is not None
    p2 = rows(app)["p2"]
    assert (p2.status, _at(p2.expires_at), p2.version) == ("active", SEASON_END, version + 1)
    with app.uow() as uow:
        (entry,) = uow.session.query(OperationLogRow).filter_by(
            entity_id="p2", run_id=result.erase_id).all()
    assert entry.before is not None and entry.after is not None
    assert (entry.before["expires_at"], entry.after["expires_at"]) == (
        None, SEASON_END.isoformat())
    undo_run(app, result.erase_id)
    assert _expiry(app, "p2") is None


def test_dream_erase_says_which_notes_got_their_own_expiry_back(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    _cello(app)
    out = _cli(app, monkeypatch, "erase", "--conversation", "c1", "--yes")
    assert out.exit_code == 0, out.output
    assert "gave note p2 its own expiry back" in out.output
    assert _expiry(app, "p2") == SEASON_END


def test_an_expiry_the_host_changed_since_is_left_alone(app: App) -> None:
    """The host renewed p2's expiry after the run (no version, no log): it is the host's,
    and erasing c1 leaves it."""
    _cello(app)
    with app.uow() as uow:
        uow.session.execute(update(NoteRow).where(NoteRow.id == "p2").values(expires_at=RENEWED))
        uow.commit()
    result = erase(app, conversation_id="c1")
    assert result.note_ids == ["p1"]
    assert result.lived_ids == []
    assert _expiry(app, "p2") == RENEWED


def test_a_note_given_its_expiry_back_keeps_the_keep_apart_it_had(app: App) -> None:
    """The host kept p2 apart from its twin x (c3); erasing c1 gives p2 its expiry back one
    version up: the keep-apart binds the new version too, and a dream leaves both."""
    _cello(app)
    add_notes(app, {"id": "x", "content": QUARTET, "source_conversation_id": "c3"})
    keep_apart(app, ["p2", "x"])
    assert erase(app, conversation_id="c1").lived_ids == ["p2"]
    assert _statuses_after_consolidating(app, "p2", "x") == {"p2": "active", "x": "active"}


def test_a_fusion_of_the_kept_note_lives_no_longer_for_the_erased_note(app: App) -> None:
    """p2, which never expires for p1, fused by the host with p3 (c3, expiring later): the
    fusion never expires either. Erasing c1 gives p2 the season's end back and the fusion the
    later of its sources' expiries left, p3's."""
    _cello(app)
    add_notes(app, {"id": "p3", "content": "Priya plays the cello on Sundays.",
                    "created_at": days_ago(2), "expires_at": AHEAD_LATER.isoformat(),
                    "source_conversation_id": "c3"})
    fused = fuse(app, ["p2", "p3"], "Priya plays the cello in a quartet this season, on "
                 "Sundays.").note["id"]
    assert _expiry(app, fused) is None
    result = erase(app, conversation_id="c1")
    assert result.lived_ids == sorted([fused, "p2"])
    notes = rows(app)
    assert (notes[fused].status, _at(notes[fused].expires_at)) == ("active", AHEAD_LATER)
    assert (notes["p2"].status, _at(notes["p2"].expires_at)) == ("revoked", SEASON_END)


def test_a_fusion_of_the_erased_note_goes_and_the_other_source_keeps_its_own(app: App) -> None:
    """A fusion of n1 (c1, never expires) and n2 (c2, expiring) never expires; erasing c1
    erases the fusion with it (its text was written from n1) and gives n2 back, active, with
    the expiry it always had: nothing of n1's life is left."""
    add_notes(app, {"id": "n1", "content": "Prefers green tea.", "source_conversation_id": "c1"},
              {"id": "n2", "content": "Prefers green tea in the morning.",
               "expires_at": AHEAD.isoformat(), "source_conversation_id": "c2"})
    fused = fuse(app, ["n1", "n2"], "Prefers green tea, in the morning too.").note["id"]
    assert _expiry(app, fused) is None
    result = erase(app, conversation_id="c1")
    assert (result.note_ids, result.derived_ids, result.restored_ids) == (
        ["n1"], [fused], ["n2"])
    notes = rows(app)
    assert fused not in notes
    assert (notes["n2"].status, _at(notes["n2"].expires_at)) == ("active", AHEAD)


def _keeper(expires: Life, *, members: Sequence[Life] = (),
            sources: Sequence[tuple[str, Life]] = (), moves: Sequence[tuple[Life, Life]] = (),
            note_id: str = "k") -> Keeper:
    return Keeper(note_id, "agent-1", expires, [(f"m{i}", m) for i, m in enumerate(members)],
                  list(sources), list(moves))


@pytest.mark.parametrize(("keeper", "expected"), [
    # its only member, which never expired, was erased: its own expiry back
    (_keeper(None, moves=[(SEASON_END, None)]), SEASON_END),
    # a member left never expires: it still never does (nothing to write)
    (_keeper(None, members=[None], moves=[(SEASON_END, None)]), None),
    # a member left expires later than its own: that member's
    (_keeper(None, members=[LATER], moves=[(SEASON_END, None)]), LATER),
    # two extensions, the erased one the last: the first one's life stays
    (_keeper(LATEST, members=[LATER], moves=[(SEASON_END, LATER), (LATER, LATEST)]), LATER),
    # the host changed it since the worker set it: left alone
    (_keeper(RENEWED, moves=[(SEASON_END, None)]), None),
    # the host set it between two extensions: its own life from then on
    (_keeper(None, moves=[(SEASON_END, LATER), (RENEWED, None)]), RENEWED),
    # never lengthened (no logged change): its own, whatever retired into it
    (_keeper(SEASON_END), None),
    # an erasure never lengthens a life (a member retired before expiries were carried)
    (_keeper(SEASON_END, members=[None], moves=[(LATER, SEASON_END)]), None),
    # a fusion of sources none of which lived for an erased note: as it is
    (_keeper(LATER, sources=[("s1", SEASON_END), ("s2", LATER)]), None),
    # a fusion written before fusions carried an expiry (none, its sources expiring): left
    (_keeper(None, sources=[("s1", SEASON_END)]), None),
])
def test_shortened(keeper: Keeper, expected: datetime | None) -> None:
    """One keeper whose erased members are gone from it: its expiry when shorter than now."""
    assert shortened([keeper]).get("k") == expected


def test_shortened_follows_a_member_and_a_source_that_are_keepers_themselves() -> None:
    """k1 lived for an erased note; k1 was retired into k2, which lived for it, and k2 fused
    with s into f: each counts the one below at its new expiry."""
    k1 = _keeper(None, moves=[(SEASON_END, None)], note_id="k1")
    k2 = Keeper("k2", "agent-1", None, [("k1", None)], [], [(LATER, None)])
    f = Keeper("f", "agent-1", None, [], [("k2", None), ("s", SEASON_END)], [])
    assert shortened([f, k2, k1]) == {"k1": SEASON_END, "k2": LATER, "f": LATER}
