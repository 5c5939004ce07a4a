"""Lines without an id (sessions, examples) get one made from what identifies the record, so a
file imported again adds nothing: before, each import gave each line a new UUID, and a sessions
file imported twice counted every session twice towards the gate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from tests.conftest import make_sqlite_app
from worker.app import App
from worker.domain.types import Scope
from worker.ingest import InputError, import_examples, import_sessions
from worker.ingest.record_ids import derived_id, import_key, unkeyed_id
from worker.safety.erase import erase
from worker.store.models import ExampleRow, SessionRow


def test_a_sessions_file_without_ids_imported_twice_counts_each_session_once(
        tmp_path: Path) -> None:
    app = make_sqlite_app(tmp_path)
    lines = [json.dumps({"agent_id": "a", "started_at": f"2026-11-0{d}T09:00:00Z"})
             for d in (1, 2, 3)]
    lines.append(json.dumps({"agent_id": "a", "user_id": "u", "started_at": "2026-11-01T09:00Z"}))
    first = import_sessions(app, lines)
    again = import_sessions(app, lines)
    # The same session twice in one file, its start written another way: one session.
    twice = import_sessions(app, [json.dumps({"agent_id": "a",
                                              "started_at": "2026-11-01T10:00:00+01:00"})])
    assert (first.inserted, again.inserted, again.duplicates, twice.inserted) == (4, 0, 4, 0)
    with app.uow() as uow:
        assert uow.session.scalar(select(func.count()).select_from(SessionRow)) == 4
    app.dispose()


def test_an_examples_file_without_ids_imported_twice_adds_each_example_once(
        tmp_path: Path) -> None:
    app = make_sqlite_app(tmp_path)
    lines = [json.dumps({"agent_id": "a", "input": f"q{i}", "output": "a"}) for i in range(3)]
    lines.append(json.dumps({"agent_id": "b", "input": "q0", "output": "a"}))  # another scope
    first = import_examples(app, lines)
    again = import_examples(app, [*lines, lines[0]])
    assert (first.inserted, again.inserted, again.duplicates) == (4, 0, 5)
    with app.uow() as uow:
        assert uow.session.scalar(select(func.count()).select_from(ExampleRow)) == 4
    app.dispose()


def _example_ids(app: App) -> set[str]:
    with app.uow() as uow:
        return set(uow.session.scalars(select(ExampleRow.id)))


def test_a_derived_example_id_is_keyed_with_the_databases_secret(app: App,
                                                                 tmp_path: Path) -> None:
    """Before, the id was an unkeyed uuid5 of scope, input and output: an example erased with
    its user left an id (an export, a host's records) that confirmed a guess at its text
    offline. Now another database (another key) derives another id, neither the uuid5."""
    line = {"agent_id": "a", "user_id": "u", "input": "What is my PIN?", "output": "4831"}
    import_examples(app, [json.dumps(line)])
    (made,) = _example_ids(app)
    unkeyed = unkeyed_id(Scope("a", "u").key, line["input"], line["output"])
    assert made != unkeyed and made == derived_id(import_key(app), Scope("a", "u").key,
                                                  line["input"], line["output"])
    other = make_sqlite_app(tmp_path / "other")
    try:
        import_examples(other, [json.dumps(line)])
        assert _example_ids(other).isdisjoint({made, unkeyed})
    finally:
        other.dispose()
    erase(app, user_id="u")  # what it erased is named by no id derivable without the key
    assert _example_ids(app) == set()


def test_a_store_holding_records_under_the_unkeyed_ids_finds_them_present(app: App) -> None:
    """Examples and sessions an import stored before under their uuid5 ids: the same lines
    (without ids) imported again add nothing, and a session's end lands on the stored one."""
    scope = Scope("a", "u").key
    examples = [{"agent_id": "a", "user_id": "u", "input": f"q{i}", "output": "a"}
                for i in range(3)]
    import_examples(app, [json.dumps({"id": unkeyed_id(scope, e["input"], e["output"]), **e})
                          for e in examples])  # as the import before stored them
    started = "2026-11-01T09:00:00+00:00"
    import_sessions(app, [json.dumps({"id": unkeyed_id(scope, started), "agent_id": "a",
                                      "user_id": "u", "started_at": started})])
    again = import_examples(app, [json.dumps(e) for e in examples])
    # An older export's line (the stored id) beside its record's line without an id: one.
    both = import_examples(app, [json.dumps({"id": unkeyed_id(scope, "q0", "a"),
                                             **examples[0]}), json.dumps(examples[0])])
    ended = import_sessions(app, [json.dumps({"agent_id": "a", "user_id": "u",
                                              "started_at": started,
                                              "ended_at": "2026-11-01T10:00:00Z"})])
    assert (again.inserted, again.duplicates, both.inserted) == (0, 3, 0)
    assert (ended.inserted, ended.ended) == (0, 1)
    with app.uow() as uow:
        assert uow.session.scalar(select(func.count()).select_from(ExampleRow)) == 3
        (session,) = uow.session.scalars(select(SessionRow)).all()
    assert session.id == unkeyed_id(scope, started) and session.ended_at is not None
    with pytest.raises(InputError, match="line 2: example id .* is also the id of line 1"):
        import_examples(app, [json.dumps({"id": unkeyed_id(scope, "q1", "a"), **examples[1]}),
                              json.dumps({**examples[1], "success_score": 50})])
