"""notes.consolidated_into_id without its self-referencing foreign key

The pointer from a retired note to the note it was merged or superseded into referenced
notes.id. On SQLite a self-referencing child key counts as a possible parent-key change: every
UPDATE that sets the pointer (each merge, each supersede) deleted and re-inserted the whole row
and rewrote all six of its index entries, where the same UPDATE without the reference touches
only the changed columns' indexes; on 16 revoked notes per scope that cost about three times
the CPU (most of it in the kernel, writing the extra dirty pages). On PostgreSQL the reference
ran a per-row trigger query and took a share lock on the fused note.

The worker writes the pointer only in the transaction that inserts or re-checks its target
(``PhaseWrite``, host fuse), and the erase path clears every pointer at an erased note before
deleting it (what ON DELETE SET NULL did). The lineage table keeps its foreign keys.

SQLite: the table's stored definition is edited in place (the procedure SQLite documents for
removing a FOREIGN KEY constraint: the file format does not change, so no table copy, instant at
any size). PostgreSQL: the constraint is dropped.

Revision ID: 0010
Revises: 0009
"""
import re
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0010'
down_revision: str | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CLAUSE = 'FOREIGN KEY(consolidated_into_id) REFERENCES notes (id) ON DELETE SET NULL'
_SQLITE_CLAUSE = re.compile(
    r',\s*FOREIGN KEY\s*\(\s*"?consolidated_into_id"?\s*\)\s*REFERENCES\s+"?notes"?\s*'
    r'\(\s*"?id"?\s*\)(\s+ON\s+(DELETE|UPDATE)\s+(SET\s+NULL|CASCADE|RESTRICT|NO\s+ACTION))*',
    re.IGNORECASE)


def _pointer_fks(bind: sa.engine.Connection) -> list[str | None]:
    return [fk.get('name') for fk in sa.inspect(bind).get_foreign_keys('notes')
            if fk['constrained_columns'] == ['consolidated_into_id']]


def _edit_sqlite_definition(bind: sa.engine.Connection, edit: Callable[[str], str]) -> None:
    """Replace the stored CREATE TABLE of notes by ``edit(old)``, as SQLite documents for
    dropping a constraint: writable_schema on, the one row updated, schema_version bumped."""
    old = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'notes'").scalar_one()
    new = edit(old)
    if new == old:
        return
    version = bind.exec_driver_sql('PRAGMA schema_version').scalar_one()
    bind.exec_driver_sql('PRAGMA writable_schema = ON')
    try:
        bind.exec_driver_sql(
            "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'notes'", (new,))
        bind.exec_driver_sql(f'PRAGMA schema_version = {int(version) + 1}')
    finally:
        bind.exec_driver_sql('PRAGMA writable_schema = OFF')
    problems = bind.exec_driver_sql('PRAGMA quick_check').scalars().all()
    if problems != ['ok']:
        raise RuntimeError(f'notes definition edit left the database inconsistent: {problems[:3]}')


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == 'sqlite':
        _edit_sqlite_definition(bind, lambda sql: _SQLITE_CLAUSE.sub('', sql, count=1))
        if _pointer_fks(bind):
            raise RuntimeError(
                'could not drop the foreign key of notes.consolidated_into_id: this SQLite '
                'refuses schema edits (defensive mode); run the upgrade with a default build')
        return
    for name in _pointer_fks(bind):
        if name:
            op.drop_constraint(name, 'notes', type_='foreignkey')


def _clear_dangling() -> None:
    op.execute('UPDATE notes SET consolidated_into_id = NULL WHERE consolidated_into_id IS NOT '
               'NULL AND consolidated_into_id NOT IN (SELECT id FROM notes)')


def downgrade() -> None:
    bind = op.get_bind()
    if _pointer_fks(bind):
        return
    _clear_dangling()
    if bind.dialect.name == 'sqlite':
        def add(sql: str) -> str:
            head, _, tail = sql.rpartition(')')
            return f'{head.rstrip()}, \n\t{_CLAUSE}\n){tail}'
        _edit_sqlite_definition(bind, add)
        return
    op.create_foreign_key('notes_consolidated_into_id_fkey', 'notes', 'notes',
                          ['consolidated_into_id'], ['id'], ondelete='SET NULL')
