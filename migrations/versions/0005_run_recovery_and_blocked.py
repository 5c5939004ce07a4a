"""dream_runs: status reason, allowed retirements, enqueue time and requeues; interrupted runs own their scope

Revision ID: 0005
Revises: 0004
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import worker.store.types

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = 'uq_dream_runs_one_active_per_scope'
OLD_WHERE = "status IN ('queued', 'running')"
NEW_WHERE = "status IN ('queued', 'running', 'interrupted')"


def upgrade() -> None:
    with op.batch_alter_table('dream_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('status_reason', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('allow_retire', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('enqueued_at', worker.store.types.UTCDateTime(),
                                      nullable=True))
        batch_op.add_column(sa.Column('requeues', sa.Integer(), nullable=False,
                                      server_default='0'))
    # Before the index covers interrupted runs, a scope may hold an interrupted run next to a
    # newer queued/running one (or several interrupted ones): keep the newest, give up the rest.
    op.execute(sa.text(
        "UPDATE dream_runs SET status = 'failed', "
        "error = 'superseded by a newer run of the scope (migration 0005)' "
        "WHERE status = 'interrupted' AND EXISTS ("
        " SELECT 1 FROM dream_runs AS other WHERE other.scope_key = dream_runs.scope_key"
        " AND other.id <> dream_runs.id AND ("
        "  other.status IN ('queued', 'running')"
        "  OR (other.status = 'interrupted' AND (other.created_at > dream_runs.created_at"
        "      OR (other.created_at = dream_runs.created_at AND other.id > dream_runs.id)))))"
    ))
    op.drop_index(INDEX, table_name='dream_runs')
    op.create_index(INDEX, 'dream_runs', ['scope_key'], unique=True,
                    sqlite_where=sa.text(NEW_WHERE), postgresql_where=sa.text(NEW_WHERE))


def downgrade() -> None:
    op.drop_index(INDEX, table_name='dream_runs')
    op.create_index(INDEX, 'dream_runs', ['scope_key'], unique=True,
                    sqlite_where=sa.text(OLD_WHERE), postgresql_where=sa.text(OLD_WHERE))
    with op.batch_alter_table('dream_runs', schema=None) as batch_op:
        batch_op.drop_column('requeues')
        batch_op.drop_column('enqueued_at')
        batch_op.drop_column('allow_retire')
        batch_op.drop_column('status_reason')
