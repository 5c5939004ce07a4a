"""drop ix_notes_scope_status: (scope_key, status) is the prefix of
ix_notes_scope_status_type_hash, which serves the same look-ups; every note insert and every
status change (a retirement is never a HOT update on PostgreSQL) maintained both

Revision ID: 0008
Revises: 0007
"""
from collections.abc import Sequence

from alembic import op

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index('ix_notes_scope_status', table_name='notes')


def downgrade() -> None:
    op.create_index('ix_notes_scope_status', 'notes', ['scope_key', 'status'], unique=False)
