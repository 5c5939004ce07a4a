"""partial index of the provider batch steps, by age

The gate check retries, on every beat, the releases of provider batches left incomplete
(``worker.runs.batches.retry_incomplete_releases``); this index holds only the batch steps
(``name LIKE 'llm batch %'``), so that check never reads the whole run_steps table.

Revision ID: 0014
Revises: 0013
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0014'
down_revision: str | None = '0013'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WHERE = sa.text("name LIKE 'llm batch %'")


def upgrade() -> None:
    op.create_index('ix_run_steps_batch', 'run_steps', ['started_at'],
                    postgresql_where=_WHERE, sqlite_where=_WHERE)


def downgrade() -> None:
    op.drop_index('ix_run_steps_batch', table_name='run_steps')
