"""An id-less line whose text differs from another's only by a mark that carries a value is a
note of its own. Before, ".5 mg" after "5 mg" answered "1 added, 1 already present": the
".5 mg" line was never stored and the old note was re-dated as if said again."""

from __future__ import annotations

import json

from worker.app import App
from worker.domain.types import Scope
from worker.ingest import import_notes

LINES = [("User takes 5 mg of melatonin at night", "2026-01-10T10:00:00Z"),
         ("User takes .5 mg of melatonin at night", "2026-03-10T10:00:00Z")]


def test_a_line_differing_by_a_decimal_point_is_added(sqlite_app: App) -> None:
    lines = [json.dumps({"agent_id": "a1", "content": c, "created_at": at}) for c, at in LINES]
    assert import_notes(sqlite_app, lines).inserted == 2
    with sqlite_app.uow() as uow:
        notes = uow.notes.load_scope(Scope("a1"), statuses=("active",)).by_id().values()
    assert sorted((n.content, n.created_at.isoformat()[:10]) for n in notes if n.created_at) == [
        ("User takes .5 mg of melatonin at night", "2026-03-10"),
        ("User takes 5 mg of melatonin at night", "2026-01-10")]
    # what carries no value still folds: the same fact said again is present
    again = json.dumps({"agent_id": "a1", "content": "user takes .5 mg of melatonin at night."})
    assert import_notes(sqlite_app, [again]).inserted == 0
