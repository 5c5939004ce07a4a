"""An erasure takes back the date an erased statement gave a fused note.

A fusion (a host's fuse, a dream's consolidation) is written dated at its newest source's
statement. When that source had been dated at a later statement of its fact (a host's
``remember`` said it again in c2, a contradictions run kept it for a restatement), the fusion
carries that date. Before, erasing c2 dated the source back but left the active fused note at
c2's date: the erased conversation still made its facts the newest. The fusion is now dated at
its newest source's statement left. SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.phases.contradictions.test_service import rows
from tests.safety.test_erase_dates import _history
from tests.safety.test_erase_survivors import _active, _cli, _fuse_everything
from tests.support.factories import DARK_MODE_NOTES, add_notes, days_ago
from tests.support.llm_stub import LLMStub
from worker.app import App
from worker.domain.types import Scope
from worker.host.fusion import fuse
from worker.host.remember import remember
from worker.safety.erase import erase
from worker.safety.undo import UndoRefused, undo_run

SCOPE = Scope("agent-1", "u1")
ECONOMY = "User flies economy class"
ON_TRIPS = "User flies economy class on trips"

Said = tuple[datetime | None, int | None]


def _said(app: App, note_id: str) -> Said:
    note = rows(app)[note_id]
    when = note.created_at
    return (when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when,
            note.write_seq)


def _economy(app: App) -> tuple[str, str]:
    """n1 (day 30, no conversation) said again word for word in c2 (a NOOP: dated now), n2
    (day 20, c1); the host fuses them: the fusion is dated at n1's c2 statement. Its id and
    the fuse's undo id."""
    add_notes(app, {"id": "n1", "user_id": "u1", "content": ECONOMY, "created_at": days_ago(30)},
              {"id": "n2", "user_id": "u1", "content": ON_TRIPS, "created_at": days_ago(20),
               "source_conversation_id": "c1"})
    assert remember(app, SCOPE, ECONOMY, conversation_id="c2").action == "NOOP"
    fused = fuse(app, ["n1", "n2"], ON_TRIPS)
    assert _said(app, fused.note["id"]) == _said(app, "n1") != _said(app, "n2")
    assert fused.undo_id is not None
    return fused.note["id"], fused.undo_id


def test_erasing_the_statement_dates_the_host_fusion_at_its_newest_source_left(app: App) -> None:
    """Erasing c2 dates n1 back to day 30 and the active fused note to n2's statement (day 20,
    its recorded order too), one version up, listed with n1."""
    fused_id, _ = _economy(app)
    version = rows(app)[fused_id].version
    result = erase(app, conversation_id="c2")
    assert result.note_ids == []
    assert result.redated_ids == sorted([fused_id, "n1"])
    assert _said(app, fused_id) == _said(app, "n2")
    assert _said(app, "n1")[0] == datetime.fromisoformat(days_ago(30))
    fused = rows(app)[fused_id]
    assert (fused.status, fused.version) == ("active", version + 1)


def test_the_fusion_can_still_be_undone_after_the_erase(app: App) -> None:
    """The erasure changed the fusion and its source after the fuse: undoing the fuse names
    the erasure, as for a dream's run; with --force-cascade both are undone and the sources
    are active again, the fusion retired."""
    fused_id, undo_id = _economy(app)
    erase(app, conversation_id="c2")
    with pytest.raises(UndoRefused, match="changed since by run erase-"):
        undo_run(app, undo_id)
    undo_run(app, undo_id, force_cascade=True)
    notes = rows(app)
    assert {i: notes[i].status for i in ("n1", "n2", fused_id)} == {
        "n1": "active", "n2": "active", fused_id: "revoked"}


def test_a_fusion_fused_again_is_dated_back_through_both(app: App) -> None:
    """The fused note fused again with n3 (day 25): the second fusion carries c2's date too;
    erasing c2 dates it at its newest source left, the first fusion at day 20."""
    fused_id, _ = _economy(app)
    add_notes(app, {"id": "n3", "user_id": "u1", "content": "User flies economy class often",
                    "created_at": days_ago(25), "source_conversation_id": "c3"})
    again = fuse(app, [fused_id, "n3"], "User flies economy class on trips, often").note["id"]
    assert _said(app, again) == _said(app, fused_id)
    result = erase(app, conversation_id="c2")
    assert set(result.redated_ids) == {again, fused_id, "n1"}
    assert _said(app, fused_id) == _said(app, "n2")
    assert _said(app, again) == _said(app, "n2")  # day 20 is later than n3's day 25


@pytest.mark.parametrize("subject", [{"conversation_id": "c3"}, {"note_id": "short"}])
def test_a_fusion_of_a_note_a_dream_kept_for_a_restatement_is_dated_back(
        app: App, subject: dict[str, str]) -> None:
    """A contradictions run kept the fuller note for the short restatement (c3) and dated it
    there; the host fused it with x (day 10): the fusion carries c3's date. Erasing c3, or the
    short note itself, dates the fusion at x's statement, the newest left."""
    add_notes(app, {"id": "x", "content": "User prefers dark mode everywhere",
                    "created_at": days_ago(10), "source_conversation_id": "c5"})
    _history(app)
    fused_id = fuse(app, ["full", "x"], "User prefers dark mode everywhere, in the editor too"
                    ).note["id"]
    assert _said(app, fused_id) == _said(app, "full")
    result = erase(app, **subject)
    assert result.note_ids == ["short"]
    assert set(result.redated_ids) == {fused_id, "full"}
    assert _said(app, fused_id) == _said(app, "x")


def test_a_dream_consolidation_is_dated_back_as_a_host_fusion_is(
        app: App, llm_stub: LLMStub, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the CLI: four notes of one preference, n0 said again in c9 (a NOOP dating it
    now); a dream fuses them, dated at n0's c9 statement; erasing c9 dates the fused note at
    n3's statement (day 7), the newest of its sources left."""
    add_notes(app, *({"id": f"n{k}", "user_id": "u1", "type": "Preference",
                      "content": DARK_MODE_NOTES[k], "created_at": days_ago(10 - k),
                      **({"source_conversation_id": f"c{k}"} if k else {})} for k in range(4)))
    assert remember(app, SCOPE, DARK_MODE_NOTES[0], "Preference",
                    conversation_id="c9").action == "NOOP"
    llm_stub.set_handler(_fuse_everything)
    run = _cli(app, monkeypatch, "run", "--agent", "agent-1", "--user", "u1", "--force",
               "--phase", "consolidate", stub=llm_stub)
    assert run.exit_code == 0, run.output
    (fused_id,) = _active(app)
    assert _said(app, fused_id) == _said(app, "n0")
    out = _cli(app, monkeypatch, "erase", "--conversation", "c9", "--yes")
    assert out.exit_code == 0, out.output
    assert f"dated note {fused_id} back" in out.output
    assert _said(app, fused_id) == _said(app, "n3")
