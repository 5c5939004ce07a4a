"""notes.write_seq: the order notes were recorded in, for notes stated at one same time

A corpus that dates only its sessions gives every note of a session one ``created_at``: a value
corrected in the same session then ties with the value it corrects, and the contradictions
policy could only flag the pair. The store now records the order it writes notes in (an
import in its lines' order), and the policy reads it where the timestamps tie. Notes written
before this revision have none (NULL): a tie between them stays a tie.

Revision ID: 0016
Revises: 0015
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0016'
down_revision: str | None = '0015'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('notes', sa.Column('write_seq', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column('notes', 'write_seq')
