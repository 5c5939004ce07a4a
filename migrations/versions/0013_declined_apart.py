"""judgements of kind declined_apart for the review items already declined

A reviewer's "no" to a merge, a revocation or a flag now also keeps its notes apart in every
phase (consolidation no longer merges two of them, contradictions no longer revokes one into
another) until one of them changes. A decline records that memory as it is made; this fills
it in for the items declined before (not those an undo withdrew), at the versions each item
named: a note changed since no longer matches, exactly as for a new decline. Data only.

Revision ID: 0013
Revises: 0012
"""
import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

import worker.store.types

revision: str = '0013'
down_revision: str | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KIND = 'declined_apart'  # worker.phases.kit.snapshot.DECLINED_APART
_ITEMS = sa.table('review_items', sa.column('scope_key', sa.String()),
                  sa.column('kind', sa.String()), sa.column('status', sa.String()),
                  sa.column('versions', worker.store.types.JSONType()),
                  sa.column('decided_at', worker.store.types.UTCDateTime()),
                  sa.column('decided_by', sa.String()), sa.column('outcome', sa.Text()))
_JUDGEMENTS = sa.table('judgements', sa.column('scope_key', sa.String()),
                       sa.column('kind', sa.String()), sa.column('fingerprint', sa.String()),
                       sa.column('note_ids', worker.store.types.JSONType()),
                       sa.column('verdict', sa.String()), sa.column('reason', sa.Text()),
                       sa.column('run_id', sa.String()),
                       sa.column('created_at', worker.store.types.UTCDateTime()))


def _fingerprint(versions: dict[str, int]) -> str:
    """``worker.domain.types.fingerprint_notes`` of the item's notes at its versions."""
    parts = sorted(f"{i}:{int(v)}" for i, v in versions.items())
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def upgrade() -> None:
    bind = op.get_bind()
    have = {(r[0], r[1]) for r in bind.execute(
        sa.select(_JUDGEMENTS.c.scope_key, _JUDGEMENTS.c.fingerprint)
        .where(_JUDGEMENTS.c.kind == _KIND))}
    rows = []
    for scope_key, versions, decided_at, outcome in bind.execute(
            sa.select(_ITEMS.c.scope_key, _ITEMS.c.versions, _ITEMS.c.decided_at,
                      _ITEMS.c.outcome)
            .where(_ITEMS.c.status == 'declined', _ITEMS.c.kind.in_(('merge', 'revoke', 'flag')),
                   sa.or_(_ITEMS.c.decided_by.is_(None), _ITEMS.c.decided_by != 'undo'))):
        versions = json.loads(versions) if isinstance(versions, str) else dict(versions or {})
        if len(versions) < 2:
            continue
        fingerprint = _fingerprint(versions)
        if (scope_key, fingerprint) in have:
            continue
        have.add((scope_key, fingerprint))
        reason = f"declined in review: {outcome}" if outcome and outcome != 'declined' else \
            "declined in review"
        rows.append({'scope_key': scope_key, 'kind': _KIND, 'fingerprint': fingerprint,
                     'note_ids': sorted(versions), 'verdict': _KIND, 'reason': reason,
                     'run_id': None, 'created_at': decided_at or datetime.now(UTC)})
    if rows:
        bind.execute(_JUDGEMENTS.insert(), rows)


def downgrade() -> None:
    op.execute(_JUDGEMENTS.delete().where(_JUDGEMENTS.c.kind == _KIND))
