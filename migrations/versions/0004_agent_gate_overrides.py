"""agents: per-agent gate overrides (hours, sessions, notes, idle wait, maximum staleness)

Revision ID: 0004
Revises: 0003
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ('gate_hours', sa.Float()),
    ('gate_sessions', sa.Integer()),
    ('gate_notes', sa.Integer()),
    ('gate_idle_minutes', sa.Float()),
    ('gate_max_stale_hours', sa.Float()),
)


def upgrade() -> None:
    with op.batch_alter_table('agents', schema=None) as batch_op:
        for name, kind in COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('agents', schema=None) as batch_op:
        for name, _ in reversed(COLUMNS):
            batch_op.drop_column(name)
