"""An id seen before is "already present" only for the same record (README "Data file
formats"). Before, the notes, examples and sessions importers compared an id's scope and text
alone: a second line of the id with another status or protection, or a later export's line of a
note the store holds at an earlier state (the file says it was fused), counted as already
present, exit 0, its fields dropped silently. Now the whole file is refused with one line naming
the line, the id and the first field that differs, nothing written; a file imported again, or
a store's own export, still adds nothing, also after the store changed the records since."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.factories import NOW, add_notes
from tests.support.host_writes import host_sets
from worker.app import App
from worker.domain.types import Scope
from worker.export import export_notes, export_records
from worker.ingest import import_examples, import_notes, import_sessions
from worker.ingest.jsonl import InputError
from worker.runs import service

NOTE = {"id": "n1", "agent_id": "agent-1", "content": "User owns a red bicycle"}
DATED = {"created_at": "2026-01-01T00:00:00+00:00"}  # before the dream's clock (NOW)
TWINS = [{"id": "t1", "content": "User owns a red bicycle", **DATED},
         {"id": "t2", "content": "User owns a red bicycle", **DATED},
         {"id": "t3", "content": "User drinks green tea", **DATED}]


def _lines(*objs: dict[str, Any]) -> list[str]:
    return [json.dumps(o) for o in objs]


@pytest.mark.parametrize(("other", "field"), [({"status": "archived"}, "status"),
                                              ({"protection": "immutable"}, "protection"),
                                              ({"importance": 0.9}, "importance"),
                                              ({"lineage": [{"parent_id": "n0",
                                                             "relation": "fused"}]}, "lineage")])
def test_a_note_id_given_twice_as_two_records_refuses_the_file(
        app: App, other: dict[str, Any], field: str) -> None:
    lines = _lines({"id": "n0", "agent_id": "agent-1", "content": "Other"},
                   NOTE, {**NOTE, **other})
    with pytest.raises(InputError, match=f"^line 3: note id 'n1' is also the id of line 2, "
                                         f"with another {field}; a file gives each record once"):
        import_notes(app, lines)
    assert list(export_notes(app)) == []


def test_a_note_line_given_twice_alike_is_already_present(app: App) -> None:
    """Written alike once parsed (a type in any case, an id as a number): one record."""
    result = import_notes(app, _lines({**NOTE, "id": 1}, {**NOTE, "id": "1", "type": "context"}))
    assert (result.inserted, result.duplicates) == (1, 1)


def _fuse_twins(app: App) -> None:
    run_id = service.create_run(app, Scope("agent-1"), force=True, phases=["consolidate"],
                                clock=NOW)
    assert run_id
    service.execute_run(app, run_id)


def test_a_later_export_of_stored_notes_is_refused_an_earlier_one_present(
        app: App, other: App) -> None:
    """``other`` holds the twins as ``app`` exported them; ``app``'s dream then fused them. Its
    later export into ``other`` is refused (t1 revoked there, active here), nothing written; the
    earlier export into ``app`` (changed since) and each store's own export add nothing."""
    add_notes(app, *TWINS)
    earlier = list(export_notes(app))
    import_notes(other, earlier)
    _fuse_twins(app)
    later = list(export_notes(app))
    assert {json.loads(line)["status"] for line in later} == {"active", "revoked"}
    kept = list(export_notes(other))
    with pytest.raises(InputError, match=r"^line \d+: note 't[12]' is stored with another "
                                         "status, and this line is a later state of it"):
        import_notes(other, later)
    assert list(export_notes(other)) == kept
    for store, lines in ((app, earlier), (app, later), (other, earlier)):
        assert import_notes(store, lines).inserted == 0


def test_a_file_of_undated_lines_imported_twice_adds_nothing(app: App) -> None:
    lines = _lines(NOTE, {"agent_id": "agent-1", "content": "User drinks green tea"})
    import_notes(app, lines)
    assert import_notes(app, lines).inserted == 0


def test_a_file_imported_again_after_the_host_changed_a_note_adds_nothing(app: App) -> None:
    """The host pinned the note since (no version, same ``updated_at``): the store's is the
    later state."""
    import_notes(app, _lines({**NOTE, "updated_at": "2026-01-01T00:00:00+00:00",
                              "created_at": "2026-01-01T00:00:00+00:00"}))
    host_sets(app, "n1", protection="immutable")
    again = import_notes(app, _lines({**NOTE, "updated_at": "2026-01-01T00:00:00+00:00",
                                      "created_at": "2026-01-01T00:00:00+00:00"}))
    assert (again.inserted, again.duplicates) == (0, 1)


EXAMPLE = {"id": "e1", "agent_id": "agent-1", "input": "hi", "output": "hello",
           "created_at": "2026-01-01T00:00:00+00:00"}


def test_an_example_id_given_twice_as_two_records_refuses_the_file(app: App) -> None:
    with pytest.raises(InputError, match="^line 2: example id 'e1' is also the id of line 1, "
                                         "with another status"):
        import_examples(app, _lines(EXAMPLE, {**EXAMPLE, "status": "archived"}))
    assert list(export_records(app, "examples")) == []


def test_a_stored_example_takes_an_earlier_state_and_refuses_a_later_one(app: App) -> None:
    import_examples(app, _lines(EXAMPLE))
    with pytest.raises(InputError, match="^line 1: example 'e1' is stored with another status, "
                                         "and this line is a later state of it"):
        import_examples(app, _lines({**EXAMPLE, "status": "archived"}))
    with pytest.raises(InputError, match="^line 1: example 'e1' is stored with another "
                                         "success_score"):
        import_examples(app, _lines({**EXAMPLE, "success_score": 80}))
    host_sets_example = _lines({**EXAMPLE, "access_count": 4})  # reads: the host's
    assert import_examples(app, host_sets_example).duplicates == 1
    assert [json.loads(line)["status"] for line in export_records(app, "examples")] == ["active"]


SESSION = {"id": "s1", "agent_id": "agent-1", "started_at": "2026-01-01T00:00:00+00:00"}
ENDED = {**SESSION, "ended_at": "2026-01-01T01:00:00+00:00"}


def test_a_session_id_given_twice_as_two_records_refuses_the_file(app: App) -> None:
    with pytest.raises(InputError, match="^line 2: session id 's1' is also the id of line 1, "
                                         "with another ended_at"):
        import_sessions(app, _lines(SESSION, ENDED))
    assert list(export_records(app, "sessions")) == []


def test_a_stored_session_takes_an_earlier_state_and_its_end_and_refuses_another_end(
        app: App) -> None:
    """A session stored open takes the end a later line gives it (a host records a session as
    it starts and again once it ends: ``tests/ingest/test_session_ends.py``); the open line
    again is an earlier state, already present; another end is refused, nothing changed."""
    import_sessions(app, _lines(SESSION))
    assert import_sessions(app, _lines(ENDED)).ended == 1
    ended = [json.loads(line).get("ended_at") for line in export_records(app, "sessions")]
    assert ended != [None]
    assert import_sessions(app, _lines(SESSION)).duplicates == 1
    other = {**json.loads(_lines(ENDED)[0]), "ended_at": "2026-05-01T09:30:00+00:00"}
    with pytest.raises(InputError, match="^line 1: session 's1' already ended at"):
        import_sessions(app, [json.dumps(other)])
    assert [json.loads(line).get("ended_at") for line in export_records(app, "sessions")] \
        == ended
