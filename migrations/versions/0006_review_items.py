"""review_items: changes a run proposed instead of applying (apply mode); agents.apply_mode

Revision ID: 0006
Revises: 0005
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import worker.store.types

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'review_items',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('scope_key', sa.String(length=400), nullable=False),
        sa.Column('run_id', sa.String(length=64), nullable=True),
        sa.Column('phase', sa.String(length=32), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('versions', worker.store.types.JSONType(), nullable=False),
        sa.Column('fingerprint', sa.String(length=64), nullable=False),
        sa.Column('content', sa.Text(), nullable=True),
        sa.Column('source_ids', worker.store.types.JSONType(), nullable=True),
        sa.Column('relation', sa.String(length=32), nullable=True),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('confidence', sa.Float(), nullable=True),
        sa.Column('payload', worker.store.types.JSONType(), nullable=True),
        sa.Column('created_at', worker.store.types.UTCDateTime(), nullable=False),
        sa.Column('decided_at', worker.store.types.UTCDateTime(), nullable=True),
        sa.Column('decided_by', sa.String(length=200), nullable=True),
        sa.Column('applied_run_id', sa.String(length=64), nullable=True),
        sa.Column('outcome', sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('review_items', schema=None) as batch_op:
        batch_op.create_index('ix_review_items_scope_status', ['scope_key', 'status'],
                              unique=False)
        batch_op.create_index('ix_review_items_run', ['run_id'], unique=False)
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.add_column(sa.Column('apply_mode', sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('agents', schema=None) as batch_op:
        batch_op.drop_column('apply_mode')
    with op.batch_alter_table('review_items', schema=None) as batch_op:
        batch_op.drop_index('ix_review_items_run')
        batch_op.drop_index('ix_review_items_scope_status')
    op.drop_table('review_items')
