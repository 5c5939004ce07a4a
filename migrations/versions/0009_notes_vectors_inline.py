"""keep a note's vector in its row on PostgreSQL: toast_tuple_target 8160 on notes

A 512-dimension pgvector value (2,056 bytes) pushed every notes row past PostgreSQL's default
toast threshold (2,032 bytes), so each vector lived in the TOAST table and every scope load
fetched each note's vector through the TOAST index. With the target at its maximum a row stays
whole up to 8,160 bytes (1,536 dimensions and a toasted content fit); a larger vector still
moves out. Rows written before keep their TOAST pointer until rewritten (VACUUM FULL). SQLite
keeps its own overflow pages; nothing to do there.

Revision ID: 0009
Revises: 0008
"""
from collections.abc import Sequence

from alembic import op

revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('ALTER TABLE notes SET (toast_tuple_target = 8160)')


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('ALTER TABLE notes RESET (toast_tuple_target)')
