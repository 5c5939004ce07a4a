"""dream_runs: the message that last started one of the run's Celery tasks, and its deliveries

A task whose worker dies on every delivery (a crash in finalize, a process killed each time)
was redelivered forever (acks_late, reject_on_worker_lost). Each delivery now counts itself on
the run; the next one backs off, and the run fails after DREAM_MAX_ATTEMPTS deaths in a row.

Revision ID: 0018
Revises: 0017
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0018'
down_revision: str | None = '0017'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('dream_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('delivery', sa.String(200), nullable=True))
        batch_op.add_column(sa.Column('deliveries', sa.Integer(), nullable=False,
                                      server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('dream_runs', schema=None) as batch_op:
        batch_op.drop_column('deliveries')
        batch_op.drop_column('delivery')
