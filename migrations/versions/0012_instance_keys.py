"""instance_keys: secrets of this database, made once at random

remember derived a note's id from sha256(scope key + normalised text), with no secret: anyone
holding an id (a host's records, the answer of an erasure) could confirm a guess at the text,
even after the note was erased. The ids are now keyed with ``note_ids``, made here.

Revision ID: 0012
Revises: 0011
"""
import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0012'
down_revision: str | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    keys = op.create_table(
        'instance_keys',
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('value', sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint('name'),
    )
    op.bulk_insert(keys, [{'name': 'note_ids', 'value': secrets.token_hex(32)}])


def downgrade() -> None:
    op.drop_table('instance_keys')
