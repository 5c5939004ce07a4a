"""``execute_many`` writes what ``Connection.execute(stmt, rows)`` writes, on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, bindparam, insert, select, update

from worker.app import App
from worker.store import many
from worker.store.models import NoteRow
from worker.store.repositories.writes import NEW_JUDGEMENTS

_NOTES = cast(Table, NoteRow.__table__)
T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _note(i: str, scope: str, **extra: Any) -> dict[str, Any]:
    row = {"id": i, "scope_key": scope, "agent_id": "a", "user_id": None, "company_id": None,
           "content": f"note {i[-1]} — ünïcode 100% ok", "content_hash": f"h{i[-1]}", "type": "fact",
           "protection": "standard", "is_auto_generated": True, "importance": 0.5,
           "access_count": 0, "version": 1, "status": "active", "created_at": T0,
           "updated_at": T0, "consolidation_generation": 0, "flags": ["x", {"k": 1}],
           "comments": None, "write_seq": 7}
    row.update(extra)
    return row


def _read(app: App, scope: str) -> list[tuple[Any, ...]]:
    """Every column as read back, plus whether each JSON column holds SQL NULL (None written
    through the JSON type is JSON null, which reads back as None too)."""
    json_nulls = [_NOTES.c[c].is_(None).label(f"{c}_is_sql_null") for c in ("flags", "metadata")]
    with app.uow() as uow:
        rows = uow.session.execute(
            select(_NOTES, *json_nulls).where(_NOTES.c.scope_key == scope)
            .order_by(_NOTES.c.id)).all()
    # Everything but the ids' scope prefix, which differs by design between the two scopes.
    return [tuple(v for k, v in r._mapping.items() if k not in ("id", "scope_key")) for r in rows]


def test_inserts_and_guarded_updates_match_sqlalchemys_own(app: App) -> None:
    """The same rows through both paths read back equal, JSON and UTC datetimes included, and
    a guarded UPDATE reports as many rows as it really changed (a stale version is left)."""
    insert_stmt = insert(_NOTES)
    guarded = (update(_NOTES)
               .where(_NOTES.c.id == bindparam("b_id"), _NOTES.c.version == bindparam("b_version"),
                      _NOTES.c.status == "active")
               .values(status=bindparam("v_status"), version=bindparam("v_version"),
                       updated_at=bindparam("v_updated_at"), flags=bindparam("v_flags")))
    later = T0 + timedelta(hours=5)
    counts = {}
    for scope, fast in (("s:fast", True), ("s:slow", False)):
        rows = [_note(f"{scope}-{k}", scope, importance=k / 10) for k in range(5)]
        changes = [{"b_id": f"{scope}-{k}", "b_version": 1 if k != 3 else 7,  # k=3 stale
                    "v_status": "archived", "v_version": 2, "v_updated_at": later,
                    "v_flags": None if k == 0 else ["y"]} for k in range(5)]
        with app.uow() as uow:
            conn = uow.session.connection()
            if fast:
                assert many.execute_many(conn, insert_stmt, rows) == 5
                counts[scope] = many.execute_many(conn, guarded, changes)
            else:
                conn.execute(insert_stmt, rows)
                counts[scope] = conn.execute(guarded, changes).rowcount
            uow.commit()
    assert counts == {"s:fast": 4, "s:slow": 4}
    assert _read(app, "s:fast") == _read(app, "s:slow")
    assert len(_read(app, "s:fast")) == 5


def test_a_statement_with_defaults_to_fill_goes_through_sqlalchemy(app: App) -> None:
    """Rows without a column that has a Python-side default still get the default (the plan
    refuses such a statement and SQLAlchemy fills it), and ON CONFLICT DO NOTHING keeps the first."""
    with app.uow() as uow:
        conn = uow.session.connection()
        bare = [_note(f"d{k}", "s:defaults") for k in range(3)]
        for row in bare:
            del row["type"], row["version"]
        many.execute_many(conn, insert(_NOTES), bare)  # rowcount: SQLAlchemy's (-1 on psycopg)
        verdict = {"scope_key": "s", "kind": "pair", "fingerprint": "f",
                   "note_ids": ["a", "b"], "verdict": "distinct", "reason": "first",
                   "created_at": T0}
        postgres = conn.dialect.name == "postgresql"
        many.execute_many(conn, NEW_JUDGEMENTS[postgres], [verdict])
        many.execute_many(conn, NEW_JUDGEMENTS[postgres],
                          [{**verdict, "reason": "second"}])
        uow.commit()
    with app.uow() as uow:
        filled = uow.session.execute(select(_NOTES.c.type, _NOTES.c.version).where(
            _NOTES.c.scope_key == "s:defaults")).all()
        reasons = uow.session.execute(select(NEW_JUDGEMENTS[False].table.c.reason)).scalars().all()
    assert [tuple(r) for r in filled] == [("Context", 1)] * 3
    assert reasons == ["first"]
