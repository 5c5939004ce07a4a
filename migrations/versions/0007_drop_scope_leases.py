"""drop scope_leases: never written; runs fence on dream_runs.lease_epoch

Revision ID: 0007
Revises: 0006
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import worker.store.types

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_table('scope_leases')


def downgrade() -> None:
    op.create_table('scope_leases',
    sa.Column('scope_key', sa.String(length=400), nullable=False),
    sa.Column('run_id', sa.String(length=64), nullable=False),
    sa.Column('epoch', sa.Integer(), nullable=False),
    sa.Column('expires_at', worker.store.types.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('scope_key')
    )
