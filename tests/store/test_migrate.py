"""Migrations: one head, clean upgrade on SQLite and PostgreSQL+pgvector, models match (alembic check)."""

from __future__ import annotations

import json

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine.interfaces import ReflectedForeignKeyConstraint

from worker.app import App
from worker.domain.types import Note, Scope, fingerprint_notes
from worker.ingest import import_notes
from worker.store.migrate import MIGRATIONS_DIR, alembic_config, check


def test_single_head(sqlite_app: App) -> None:
    """Exactly one Alembic head, so `dream db upgrade` is never ambiguous."""
    script = ScriptDirectory.from_config(alembic_config(sqlite_app.engine))
    assert len(script.get_heads()) == 1
    assert MIGRATIONS_DIR.is_dir()


def test_models_match_migrations(app: App) -> None:
    """`alembic check` passes: a model change without a migration fails this test."""
    check(app.engine)


def test_one_active_run_index_exists(app: App) -> None:
    """The partial unique index behind R1 is created by the migration on both backends."""
    names = {ix["name"] for ix in inspect(app.engine).get_indexes("dream_runs")}
    assert "uq_dream_runs_one_active_per_scope" in names



@pytest.mark.postgres
def test_a_notes_vector_stays_in_its_row_on_postgres(pg_app: App) -> None:
    """Migration 0009: a 512-dimension vector (2,056 bytes, past PostgreSQL's default toast
    threshold of 2,032) is stored in the notes row, not in the TOAST table that every scope
    load would look it up in; without the migration each vector lands there."""
    import_notes(pg_app, [json.dumps({"agent_id": "a1", "id": f"n{i}",
                                      "content": f"fact {i} about tea"}) for i in range(3)])
    with pg_app.engine.connect() as conn:
        options, vectors, toast_bytes = conn.execute(text(
            "SELECT c.reloptions, (SELECT count(embedding) FROM notes),"
            " pg_relation_size(c.reltoastrelid)"
            " FROM pg_class c WHERE c.oid = 'notes'::regclass")).one()
    assert "toast_tuple_target=8160" in options
    assert vectors == 3 and toast_bytes == 0


def _pointer_keys(app: App) -> list[ReflectedForeignKeyConstraint]:
    return [fk for fk in inspect(app.engine).get_foreign_keys("notes")
            if fk["constrained_columns"] == ["consolidated_into_id"]]


def _migrate(app: App, action: str, revision: str) -> None:
    from alembic import command

    with app.engine.begin() as conn:
        cfg = alembic_config(app.engine)
        cfg.attributes["connection"] = conn
        getattr(command, action)(cfg, revision)


def test_a_retired_notes_pointer_has_no_foreign_key(app: App) -> None:
    """Migration 0010: notes.consolidated_into_id references nothing at the database (on SQLite
    a self-referencing key made each UPDATE setting it rewrite the row and every index entry);
    the lineage table keeps both of its keys to notes."""
    assert _pointer_keys(app) == []
    lineage = {tuple(fk["constrained_columns"]): fk["referred_table"]
               for fk in inspect(app.engine).get_foreign_keys("note_lineage")}
    assert lineage == {("parent_id",): "notes", ("child_id",): "notes"}


def test_downgrade_from_0010_restores_the_key_without_dangling_pointers(app: App) -> None:
    """Down to 0009 the key comes back (a pointer at a note that is gone is cleared first, or
    the key could not be valid); up again it is dropped, the notes untouched."""
    import_notes(app, [json.dumps({"agent_id": "a1", "id": i, "content": f"fact {i}"})
                       for i in ("n1", "n2", "n3")])
    with app.engine.begin() as conn:
        conn.execute(text("UPDATE notes SET status = 'revoked', consolidated_into_id = :to"
                          " WHERE id = :id"), [{"id": "n1", "to": "n2"},
                                               {"id": "n3", "to": "gone"}])
    _migrate(app, "downgrade", "0009")
    assert len(_pointer_keys(app)) == 1
    with app.engine.connect() as conn:
        pointers: dict[str, str | None] = dict(conn.execute(text("SELECT id, consolidated_into_id FROM notes")).all())
    assert pointers == {"n1": "n2", "n2": None, "n3": None}
    _migrate(app, "upgrade", "head")
    assert _pointer_keys(app) == []
    check(app.engine)
    with app.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM notes")).scalar_one() == 3


def test_upgrade_to_0011_gives_existing_fused_notes_their_sources_conversations(
        app: App) -> None:
    """Migration 0011 fills ``lineage_conversation_ids`` of the fused notes that exist from the
    lineage, transitively (f2 was fused from f1 and n3, f1 from n1 and n2); a contradiction
    edge is no provenance, and a note written on its own gets none."""
    notes = {"n1": "c1", "n2": "c2", "n3": "c3", "f1": None, "f2": None, "w": "c9"}
    import_notes(app, [json.dumps({"agent_id": "a1", "id": i, "content": f"fact {i}",
                                   **({"source_conversation_id": c} if c else {})})
                       for i, c in notes.items()])
    _migrate(app, "downgrade", "0010")
    with app.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO note_lineage (scope_key, parent_id, child_id, relation, created_at)"
            " VALUES ('[\"a1\",null,null]', :p, :c, :r, '2026-06-01 00:00:00')"),
            [{"p": "n1", "c": "f1", "r": "consolidated"}, {"p": "n2", "c": "f1", "r": "fused"},
             {"p": "f1", "c": "f2", "r": "consolidated"}, {"p": "n3", "c": "f2", "r": "updated"},
             {"p": "w", "c": "f2", "r": "superseded"}])
    _migrate(app, "upgrade", "head")
    check(app.engine)
    with app.engine.connect() as conn:
        rows: dict[str, object] = dict(conn.execute(text("SELECT id, lineage_conversation_ids FROM notes")).all())
    parsed = {i: json.loads(v) if isinstance(v, str) else v for i, v in rows.items()}
    assert parsed == {"n1": None, "n2": None, "n3": None, "w": None, "f1": ["c1", "c2"],
                      "f2": ["c1", "c2", "c3"]}


def test_upgrade_to_0013_keeps_apart_the_notes_of_items_declined_before(app: App) -> None:
    """Migration 0013 records the reviewer's "no" of the merges, revocations and flags declined
    before it (at the versions each item named, in its scope), so no phase retires one of
    their notes into another; an archive declined, an item an undo withdrew and an open item
    keep nothing apart."""
    _migrate(app, "downgrade", "0012")
    items = [("merge", "declined", "cli:ana", {"a": 1, "b": 2}),
             ("flag", "declined", "cli:bo", {"c": 1, "d": 1}),
             ("revoke", "declined", "undo", {"e": 1, "f": 1}),
             ("archive", "declined", "cli:ana", {"g": 1, "h": 1}),
             ("revoke", "open", None, {"i": 1, "j": 1})]
    with app.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO review_items (scope_key, phase, kind, status, versions, fingerprint,"
            " created_at, decided_by) VALUES ('[\"a1\",null,null]', 'consolidate', :k, :s, :v,"
            " 'fp', '2026-06-01 00:00:00', :by)"),
            [{"k": k, "s": s, "v": json.dumps(v), "by": by} for k, s, by, v in items])
    _migrate(app, "upgrade", "head")
    check(app.engine)
    with app.engine.connect() as conn:
        rows = conn.execute(text("SELECT scope_key, fingerprint, note_ids FROM judgements"
                                 " WHERE kind = 'declined_apart'")).all()
    found = {r.fingerprint: json.loads(r.note_ids) if isinstance(r.note_ids, str)
             else r.note_ids for r in rows}
    a, b, c, d = (Note(id=i, scope=Scope("a1"), content="", version=v)
                  for i, v in (("a", 1), ("b", 2), ("c", 1), ("d", 1)))
    assert found == {fingerprint_notes([a, b]): ["a", "b"], fingerprint_notes([c, d]): ["c", "d"]}
    assert {r.scope_key for r in rows} == {Scope("a1").key}
