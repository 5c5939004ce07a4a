"""remember covering index without id (keeps SQLite on the hash index for hash look-ups)

Revision ID: 0003
Revises: 0002
"""
from collections.abc import Sequence

from alembic import op

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('notes', schema=None) as batch_op:
        batch_op.drop_index('ix_notes_scope_status_type')
        batch_op.create_index('ix_notes_scope_status_type_hash',
                              ['scope_key', 'status', 'type', 'content_hash'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('notes', schema=None) as batch_op:
        batch_op.drop_index('ix_notes_scope_status_type_hash')
        batch_op.create_index('ix_notes_scope_status_type',
                              ['scope_key', 'status', 'type', 'id', 'content_hash'], unique=False)
