"""sessions.recorded_at: when the store recorded a session

The gate counted a session by its start only: one recorded after a dream but dated before it
(a host uploading its sessions late) never counted toward the next dream, and the scope could
starve. A session now counts for the first dream begun after it both started and was recorded.
Sessions recorded before this revision keep NULL: counted by their start, as before.

Revision ID: 0019
Revises: 0018
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import worker.store.types

revision: str = '0019'
down_revision: str | None = '0018'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('recorded_at', worker.store.types.UTCDateTime(),
                                      nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sessions', schema=None) as batch_op:
        batch_op.drop_column('recorded_at')
