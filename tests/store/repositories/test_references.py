"""The registry look-up of several kinds in one statement, on SQLite and PostgreSQL: the same
records as one look-up per kind; absent ids absent; more ids than one statement binds, all found."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from tests.support.factories import add_entities
from tests.support.sql import recorded_statements
from worker.app import App


def test_one_statement_answers_every_kind_as_one_per_kind_would(app: App) -> None:
    add_entities(app, {"kind": "agent", "id": "a1", "status": "disabled"},
                 {"kind": "user", "id": "u1"},
                 {"kind": "conversation", "id": "c1", "status": "deleted",
                  "deleted_reason": "erasure"},
                 {"kind": "conversation", "id": "c2"})
    wanted = {"agent": ["a1", "a-unknown"], "user": ["u1"], "conversation": ["c1", "c2", "c3"]}
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(args[2])

    with app.uow() as uow:
        event.listen(app.engine, "before_cursor_execute", record)
        try:
            together = uow.references.registry_many(wanted)
        finally:
            event.remove(app.engine, "before_cursor_execute", record)
        apart = {kind: uow.references.registry(kind, ids) for kind, ids in wanted.items()}
    assert len(seen) == 1 and "UNION ALL" in seen[0]
    assert together == apart
    assert set(together["agent"]) == {"a1"} and together["agent"]["a1"].status == "disabled"
    assert together["conversation"]["c1"].deleted_reason == "erasure"
    assert together["conversation"]["c1"].deleted and not together["conversation"]["c2"].deleted


def test_a_look_up_of_more_ids_than_one_chunk_finds_every_record(app: App) -> None:
    """Two look-ups' worth of conversations and a few more (1,000 ids a statement), asked with an
    unknown id among them: every stored one found, in two statements, by kind or all kinds."""
    stored = [f"c{k:05d}" for k in range(1003)]
    add_entities(app, *({"kind": "conversation", "id": i} for i in stored))
    asked = [*stored, "c-unknown"]
    with app.uow() as uow, recorded_statements(app) as seen:
        one_kind = uow.references.registry("conversation", asked)
    assert set(one_kind) == set(stored) and len(seen) == 2
    with app.uow() as uow, recorded_statements(app) as seen:
        every_kind = uow.references.registry_many({"conversation": asked, "agent": ["a1"]})
    assert every_kind == {"conversation": one_kind, "agent": {}} and len(seen) == 2
