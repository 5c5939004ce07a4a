"""A host's verdict (fuse, keep apart) is about the text its model read: with the versions the
candidates listing showed, a source changed since is refused and nothing is written (R10 for
the host's own model), on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from tests.support.factories import add_notes
from tests.support.host_writes import host_sets
from worker.app import App
from worker.domain.types import Scope
from worker.host import Conflict, Invalid, fuse, fusion_candidates, keep_apart
from worker.store.models import JudgementRow, NoteRow

FUSED = "Prefers green tea in the morning."


def _state(app: App) -> tuple[dict[str, tuple[str, int, str]], int]:
    with app.uow() as uow:
        notes = {r.id: (r.status, r.version, r.content)
                 for r in uow.session.scalars(select(NoteRow))}
        return notes, len(uow.session.scalars(select(JudgementRow)).all())


def _judged(app: App) -> dict[str, int]:
    """What the host's model was shown: the listed pair's ids and versions."""
    (pair,) = fusion_candidates(app, Scope("agent-1"), threshold=0.5)
    return {r["id"]: r["version"] for r in (pair["record_a"], pair["record_b"])}


def _verdict(app: App, call: str, versions: dict[str, Any]) -> Any:
    if call == "fuse":
        return fuse(app, ["a", "b"], FUSED, source_versions=versions)
    return keep_apart(app, ["a", "b"], source_versions=versions)


@pytest.mark.parametrize("call", ["fuse", "keep_apart"])
def test_a_verdict_on_a_source_changed_since_the_model_read_it_is_refused(
        app: App, call: str) -> None:
    """The host lists the pair, its model judges "the same preference", and meanwhile the
    user's own edit changes b (version 2). Before, fuse revoked b into a fusion of what b
    said, and keep-apart bound b's new text to a verdict on its old one: the host had no way
    to say which text it judged. With the versions it was shown, the verdict is a conflict
    naming b and both versions, and nothing is written; at b's current version it applies."""
    add_notes(app, {"id": "a", "content": "Prefers green tea."},
              {"id": "b", "content": "Prefers green tea in the morning."})
    judged = _judged(app)
    assert judged == {"a": 1, "b": 1}
    host_sets(app, "b", content="Switched to black coffee in the morning.", version=2)
    before = _state(app)
    with pytest.raises(Conflict) as info:
        _verdict(app, call, judged)
    message = str(info.value)
    assert "note b is at version 2, not version 1 that your model judged" in message
    assert "\n" not in message and "coffee" not in message
    assert _state(app) == before
    _verdict(app, call, {"a": 1, "b": 2})  # judged again, at its current text
    assert _state(app) != before


@pytest.mark.parametrize(("versions", "says"), [
    ({"a": 1, "c": 1}, "source_versions names note 'c', which is not one of the source ids"),
    ({"a": 0}, "must be a version number"),
    ({"a": True}, "must be a version number"),
    # past the API's bound (MCP passes any int): before, "changed since", a conflict
    ({"a": 2**31}, "must be a version number from 1 to 2147483647"),
    ({"a": 10**22}, "must be a version number from 1 to 2147483647"),
])
@pytest.mark.parametrize("call", ["fuse", "keep_apart"])
def test_versions_that_name_no_source_are_invalid(
        app: App, call: str, versions: dict[str, Any], says: str) -> None:
    """A version for a note the verdict does not name (another candidate's, a typo) or one no
    note can have is ``Invalid``, one line, nothing written."""
    add_notes(app, {"id": "a", "content": "Prefers green tea."},
              {"id": "b", "content": "Prefers green tea in the morning."},
              {"id": "c", "content": "Prefers green tea at noon."})
    before = _state(app)
    with pytest.raises(Invalid, match=says):
        _verdict(app, call, versions)
    assert _state(app) == before
