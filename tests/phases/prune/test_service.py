"""Prune on SQLite and PostgreSQL: orphans archived once with every reason, batched look-ups."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from tests.support.factories import NOW, add_entities, add_notes
from worker.app import App
from worker.domain.types import Scope
from worker.references import RegistryReferenceChecker, SqlReferenceChecker
from worker.reporting import run_tree
from worker.runs import service
from worker.store.models import NoteRow, OperationLogRow

SCOPE = Scope("agent-1", "user-1", "co-1")
ALIVE = ({"kind": "agent", "id": "agent-1"}, {"kind": "user", "id": "user-1"},
         {"kind": "company", "id": "co-1"})


def _scoped(**fields: Any) -> dict[str, Any]:
    return {"agent_id": "agent-1", "user_id": "user-1", "company_id": "co-1", **fields}


def _run(app: App, scope: Scope = SCOPE, phases: list[str] | None = None) -> str:
    run_id = service.create_run(app, scope, force=True, clock=NOW, phases=phases)
    assert run_id
    service.execute_run(app, run_id)
    return run_id


def _rows(app: App) -> dict[str, NoteRow]:
    with app.uow() as uow:
        return {r.id: r for r in uow.session.scalars(select(NoteRow))}


def _prune_step(app: App, run_id: str) -> dict[str, Any]:
    return next(s for s in run_tree(app, run_id)["steps"] if s["phase"] == "prune")


def test_disabled_agent_archives_note_with_reason(app: App) -> None:
    """A note whose agent is disabled is archived, its comment naming the reason and the date."""
    add_entities(app, {"kind": "agent", "id": "agent-1", "status": "disabled"}, *ALIVE[1:])
    add_notes(app, _scoped(id="n1", content="prefers tea"))
    run_id = _run(app, phases=["prune"])
    row = _rows(app)["n1"]
    assert row.status == "archived"
    assert row.comments == "archived by prune on 2026-06-01: referenced agent is disabled"
    out = _prune_step(app, run_id)["output"]
    assert out["notes_archived"] == 1 and out["orphaned_agents"] == 1
    with app.uow() as uow:
        log = uow.session.scalars(select(OperationLogRow).where(
            OperationLogRow.entity_id == "n1", OperationLogRow.run_id == run_id)).all()
    assert [((entry.before or {})["status"], (entry.after or {})["status"]) for entry in log] == [
        ("active", "archived")]


def test_active_references_keep_the_note(app: App) -> None:
    """Every referenced entity active → the note stays active, counted as checked on the step;
    its row is not written at all (the scope fits one run's budget: no rotation mark)."""
    add_entities(app, *ALIVE, {"kind": "conversation", "id": "c1"})
    add_notes(app, _scoped(id="n1", content="prefers tea", source_conversation_id="c1"))
    before = _rows(app)["n1"].updated_at
    run_id = _run(app, phases=["prune"])
    row = _rows(app)["n1"]
    assert (row.status, row.version, row.updated_at, row.last_checked_at) == (
        "active", 1, before, None)
    out = _prune_step(app, run_id)["output"]
    assert out["notes_checked"] == 1 and out["notes_archived"] == 0


def test_deleted_conversation_archives(app: App) -> None:
    """A deleted source conversation orphans the note (default review=archive, no model call)."""
    add_entities(app, *ALIVE, {"kind": "conversation", "id": "c1", "status": "deleted"})
    add_notes(app, _scoped(id="n1", content="prefers tea", source_conversation_id="c1"))
    run_id = _run(app, phases=["prune"])
    comments = _rows(app)["n1"].comments
    assert comments is not None and comments.endswith("source conversation is deleted")
    assert _prune_step(app, run_id)["output"]["orphaned_conversations"] == 1


def test_three_dead_references_archived_once_naming_all(app: App) -> None:
    """Agent disabled, user and conversation deleted: one archive, one oplog row, three reasons."""
    add_entities(app, {"kind": "agent", "id": "agent-1", "status": "disabled"},
                 {"kind": "user", "id": "user-1", "status": "deleted"}, ALIVE[2],
                 {"kind": "conversation", "id": "gone", "status": "deleted"})
    add_notes(app, _scoped(id="n1", content="prefers tea", source_conversation_id="gone"))
    run_id = _run(app, phases=["prune"])
    row = _rows(app)["n1"]
    assert row.status == "archived" and row.version == 2
    assert row.comments == ("archived by prune on 2026-06-01: referenced agent is disabled; "
                            "referenced user is deleted; source conversation is deleted")
    with app.uow() as uow:
        n_logs = len(uow.session.scalars(select(OperationLogRow).where(
            OperationLogRow.entity_id == "n1")).all())
    assert n_logs == 1  # imports write no log row; the archive writes exactly one
    out = _prune_step(app, run_id)["output"]
    assert (out["orphaned_agents"], out["orphaned_users"], out["orphaned_conversations"]) == (1, 1, 1)


def test_250_orphans_take_two_runs(app: App) -> None:
    """At most 200 notes per scope per run, oldest-checked first: 200 now, the other 50 next run."""
    add_entities(app, {"kind": "agent", "id": "agent-1", "status": "deleted"}, *ALIVE[1:])
    add_notes(app, *(_scoped(id=f"n{i:03}", content=f"fact number {i}") for i in range(250)))
    first = _run(app, phases=["prune"])
    assert _prune_step(app, first)["output"]["notes_archived"] == 200
    assert sum(r.status == "archived" for r in _rows(app).values()) == 200
    second = _run(app, phases=["prune"])
    assert _prune_step(app, second)["output"]["notes_archived"] == 50
    assert all(r.status == "archived" for r in _rows(app).values())


def test_unchecked_notes_come_before_recently_checked_ones(app: App) -> None:
    """Over the budget, the checked notes are marked: never checked first, then the least
    recently checked (all eventually)."""
    add_entities(app, *ALIVE)
    add_notes(app, *(_scoped(id=f"n{i}", content=f"fact number {i}") for i in range(5)))
    app.settings.prune.max_notes_per_run = 3
    _run(app, phases=["prune"])
    checked_first = {k for k, r in _rows(app).items() if r.last_checked_at is not None}
    assert len(checked_first) == 3
    with app.uow() as uow:  # a later clock for the second run
        uow.notes.mark_checked(sorted(checked_first), NOW.replace(year=2025))
        uow.commit()
    _run(app, phases=["prune"])
    rows = _rows(app)
    assert {k for k, r in rows.items() if r.last_checked_at == NOW} >= set(rows) - checked_first


def test_a_check_stamped_after_the_run_clock_counts_as_none(app: App) -> None:
    """A run with a later clock (`dream run --now 2099-…`, over the budget) marked its notes
    checked in 2099: every run since sorted them after all others and never checked them
    again. Such a mark now counts as never checked, in the carried scope and in the SQL read."""
    add_entities(app, *ALIVE)
    add_notes(app, *(_scoped(id=f"n{i}", content=f"fact number {i}") for i in range(5)))
    app.settings.prune.max_notes_per_run = 3
    with app.uow() as uow:
        uow.notes.mark_checked(["n0"], NOW.replace(year=2099))
        uow.notes.mark_checked(["n1", "n2"], NOW - timedelta(days=1))
        uow.notes.mark_checked(["n3", "n4"], NOW - timedelta(days=2))
        uow.commit()
    with app.uow() as uow:
        first = [n.id for n in uow.retention.prune_candidates(SCOPE, 3, NOW)[0]]
    assert first == ["n0", "n3", "n4"]
    _run(app, phases=["prune"])
    assert _rows(app)["n0"].last_checked_at == NOW


def test_one_lookup_per_entity_type_per_batch(app: App) -> None:
    """A lookup counter: 120 notes with 40 conversations → one query per entity type, cached after."""
    add_entities(app, *ALIVE, *({"kind": "conversation", "id": f"c{i}"} for i in range(40)))
    add_notes(app, *(_scoped(id=f"n{i:03}", content=f"fact {i}", source_conversation_id=f"c{i % 40}")
                     for i in range(120)))
    checkers: list[RegistryReferenceChecker] = []

    def factory(a: App) -> RegistryReferenceChecker:
        checkers.append(RegistryReferenceChecker(a))
        return checkers[-1]

    app.reference_checker = factory
    run_id = _run(app, phases=["prune"])
    checker = checkers[0]
    assert dict(checker.lookups) == {"agent": 1, "user": 1, "company": 1, "conversation": 1}
    assert _prune_step(app, run_id)["output"]["notes_checked"] == 120
    checker.records("conversation", ["c1", "c2"])  # already seen in this run: no new query
    assert checker.lookups["conversation"] == 1


def test_erased_conversation_always_archives_even_with_llm_review(app: App) -> None:
    """deleted_reason=erasure archives without asking the model; a plain deletion is asked."""
    add_entities(app, *ALIVE, {"kind": "conversation", "id": "erased", "status": "deleted",
                               "deleted_reason": "erasure"},
                 {"kind": "conversation", "id": "gone", "status": "deleted"})
    add_notes(app, _scoped(id="n1", content="prefers tea", source_conversation_id="erased"),
              _scoped(id="n2", content="prefers metric units", source_conversation_id="gone"))
    app.settings.prune.review = "llm"
    llm = KeepEverything()
    app.llm = llm
    run_id = _run(app, phases=["prune"])
    rows = _rows(app)
    assert rows["n1"].status == "archived" and rows["n1"].comments is not None
    assert "source conversation was erased" in rows["n1"].comments
    assert rows["n2"].status == "active"  # the model said it stands on its own
    assert llm.asked == [["n2"]]
    children = _prune_step(app, run_id)["children"]
    review = next(c for c in children if c["name"].startswith("review"))
    assert review["prompt_name"] == "prune" and review["template_hash"]


def test_llm_review_without_model_falls_back_to_archive(app: App) -> None:
    """prune.review=llm with no model configured archives like the default (no call possible)."""
    add_entities(app, *ALIVE, {"kind": "conversation", "id": "gone", "status": "deleted"})
    add_notes(app, _scoped(id="n1", content="prefers tea", source_conversation_id="gone"))
    app.settings.prune.review = "llm"
    _run(app, phases=["prune"])
    assert _rows(app)["n1"].status == "archived"


def test_protected_manual_and_immutable_notes_are_never_pruned(app: App) -> None:
    """R23: only active, auto-generated, standard/ephemeral notes are prune candidates."""
    add_entities(app, {"kind": "agent", "id": "agent-1", "status": "deleted"}, *ALIVE[1:])
    add_notes(app, _scoped(id="p", content="a", protection="protected"),
              _scoped(id="i", content="b", protection="immutable"),
              _scoped(id="m", content="c", is_auto_generated=False),
              _scoped(id="s", content="d"))
    _run(app, phases=["prune"])
    assert {k: r.status for k, r in _rows(app).items()} == {
        "p": "active", "i": "active", "m": "active", "s": "archived"}


def test_missing_registry_entries_are_unknown_never_a_reason(app: App) -> None:
    """R25: an empty registry proves nothing. Every referenced entity is `unknown`, counted on
    the step, and the note stays active; the run succeeds."""
    add_notes(app, {"agent_id": "ghost", "user_id": "u9", "id": "n1", "content": "x",
                    "source_conversation_id": "c9"})
    run_id = _run(app, Scope("ghost", "u9"), phases=["prune"])
    assert _rows(app)["n1"].status == "active" and not _rows(app)["n1"].comments
    out = _prune_step(app, run_id)["output"]
    assert out["notes_archived"] == 0 and out["orphaned_agents"] == 0
    assert (out["unknown_agents"], out["unknown_users"], out["unknown_companies"],
            out["unknown_conversations"]) == (1, 1, 0, 1)
    with app.uow() as uow:
        run = uow.runs.get(run_id)
        assert run is not None and run.status == "succeeded"


def test_absence_means_deleted_only_when_the_host_says_so(app: App) -> None:
    """R25: with the SQL checker, an id absent from the host's table is unknown (kept); only
    DREAM_PRUNE__ABSENCE_MEANS_DELETED=true makes absence evidence (archived, "no longer
    exists"). The setting is refused with the built-in registry."""
    from sqlalchemy import text

    from worker.config import ConfigError, load_settings

    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE host_agents (agent_key VARCHAR(64) PRIMARY KEY, "
                          "state VARCHAR(16))"))
        conn.execute(text("INSERT INTO host_agents VALUES ('agent-1', 'active')"))
    add_notes(app, {"agent_id": "agent-1", "id": "kept", "content": "x"},
              {"agent_id": "ghost", "id": "gone", "content": "y"})
    app.settings.prune.checker = "sql"
    app.settings.prune.sql_agents = "host_agents.agent_key.state"
    _run(app, Scope("ghost"), phases=["prune"])
    assert _rows(app)["gone"].status == "active"
    app.settings.prune.absence_means_deleted = True
    run_id = _run(app, Scope("ghost"), phases=["prune"])
    assert _rows(app)["gone"].status == "archived"
    comments = _rows(app)["gone"].comments
    assert comments is not None and comments.endswith("referenced agent no longer exists")
    assert _prune_step(app, run_id)["output"]["orphaned_agents"] == 1
    _run(app, Scope("agent-1"), phases=["prune"])
    assert _rows(app)["kept"].status == "active"
    with pytest.raises(ConfigError, match="ABSENCE_MEANS_DELETED=true needs DREAM_PRUNE__CHECKER=sql"):
        load_settings(prune={"absence_means_deleted": True})


def test_sql_checker_reads_host_tables(app: App) -> None:
    """The SQL checker reads a host's own table by configured names, read-only."""
    from sqlalchemy import text

    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE host_agents (agent_key VARCHAR(64) PRIMARY KEY, "
                          "state VARCHAR(16))"))
        conn.execute(text("INSERT INTO host_agents VALUES ('agent-1', 'disabled'), ('a2', 'active')"))
    app.settings.prune.checker = "sql"
    app.settings.prune.sql_agents = "host_agents.agent_key.state"
    add_notes(app, _scoped(id="n1", content="x"), {"agent_id": "a2", "id": "n2", "content": "y"})
    _run(app, phases=["prune"])
    _run(app, Scope("a2"), phases=["prune"])
    rows = _rows(app)
    assert rows["n1"].comments is not None
    assert rows["n1"].comments.endswith("referenced agent is disabled")
    assert rows["n2"].status == "active"  # users/companies unconfigured: not checked


@pytest.mark.parametrize("spec", ["agents.id", "agents;drop.id.status", "a.b.c.d.e",
                                  'agents."id".status', "agents.id.status--"])
def test_sql_checker_rejects_unsafe_identifiers(sqlite_app: App, spec: str) -> None:
    """Table/column settings allow letters, digits and underscores only (no SQL injection)."""
    from worker.config import ConfigError

    sqlite_app.settings.prune.sql_agents = spec
    with pytest.raises(ConfigError, match="DREAM_PRUNE__SQL_AGENTS"):
        SqlReferenceChecker.from_settings(sqlite_app)


class KeepEverything:
    """A hand-written LLM fake: answers every prune/archive question with "keep"."""

    model = "keep-everything"

    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def complete_json(self, *, prompt_name: str, system: str, user: str,
                      schema: dict[str, Any]) -> Any:
        import json
        import re

        from worker.llm.base import LLMReply

        ids = re.findall(r'"id": "([^"]+)"', user)
        self.asked.append(ids)
        return LLMReply(data={"decisions": [{"id": i, "decision": "keep", "reason": "durable"}
                                            for i in ids]},
                        tokens_in=len(user) // 4, tokens_out=10, model=self.model,
                        raw=json.dumps(ids))


def test_dry_run_reports_but_archives_nothing(app: App) -> None:
    """A dry run counts the orphans it would archive and changes no note (not even last_checked_at)."""
    add_entities(app, {"kind": "agent", "id": "agent-1", "status": "disabled"}, *ALIVE[1:])
    add_notes(app, _scoped(id="n1", content="prefers tea"))
    run_id = service.create_run(app, SCOPE, force=True, clock=NOW, phases=["prune"], dry_run=True)
    assert run_id
    service.execute_run(app, run_id)
    row = _rows(app)["n1"]
    assert (row.status, row.last_checked_at, row.version) == ("active", None, 1)
    assert _prune_step(app, run_id)["output"]["notes_archived"] == 1


def test_sql_checker_reason_column_marks_erasure(app: App) -> None:
    """A host conversations table with a reason column: "erasure" is named in the comment."""
    from sqlalchemy import text

    with app.engine.begin() as conn:
        conn.execute(text("CREATE TABLE host_convs (cid VARCHAR(64), state VARCHAR(16), why TEXT)"))
        conn.execute(text("INSERT INTO host_convs VALUES ('c1', 'deleted', 'erasure')"))
    app.settings.prune.checker = "sql"
    app.settings.prune.sql_conversations = "host_convs.cid.state.why"
    add_notes(app, _scoped(id="n1", content="x", source_conversation_id="c1"))
    _run(app, phases=["prune"])
    comments = _rows(app)["n1"].comments
    assert comments is not None and comments.endswith("source conversation was erased")


@pytest.mark.parametrize("kind", ["conversation", "user"])
def test_a_deletion_stamped_after_the_run_clock_is_no_deletion_yet(app: App, kind: str) -> None:
    """A registry record whose only sign of deletion is a `deleted_at` still to come (a host
    scheduling the deletion, a wrong year) keeps its notes until that time, as a session
    stamped ahead of the gate's clock counts only once it has come; a run whose clock has
    passed it archives them. Before, any `deleted_at` archived them at once."""
    later = "2026-06-02T00:00:00Z"  # a day after the run clock NOW
    entities = [e for e in ALIVE if e["kind"] != kind]
    add_entities(app, *entities, {"kind": kind, "id": "user-1" if kind == "user" else "c1",
                                  "deleted_at": later})
    add_notes(app, _scoped(id="n1", content="prefers tea", source_conversation_id="c1"))
    run_id = _run(app, phases=["prune"])
    assert _rows(app)["n1"].status == "active"
    assert _prune_step(app, run_id)["output"]["notes_archived"] == 0
    late = service.create_run(app, SCOPE, force=True, clock=NOW + timedelta(days=2),
                              phases=["prune"])
    assert late
    service.execute_run(app, late)
    assert _rows(app)["n1"].status == "archived"
