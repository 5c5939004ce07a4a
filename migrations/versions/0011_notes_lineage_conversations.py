"""notes.lineage_conversation_ids: a fused note's source conversations, for prune

A note fused from others has no source conversation of its own, so prune never saw that a
conversation its sources came from was deleted. The fused note now carries the source
conversations of every note it was written from (transitively), set when it is inserted: prune
looks them up with the note's other references, in the statement it makes anyway. Filled here
for the fused notes that exist, from the lineage (``consolidated``, ``fused``, ``updated``).

Revision ID: 0011
Revises: 0010
"""
from collections import defaultdict
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import worker.store.types

revision: str = '0011'
down_revision: str | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DERIVED = ('consolidated', 'fused', 'updated')
_NOTES = sa.table('notes', sa.column('id', sa.String()),
                  sa.column('source_conversation_id', sa.String()),
                  sa.column('lineage_conversation_ids', worker.store.types.JSONType()))
_LINEAGE = sa.table('note_lineage', sa.column('parent_id', sa.String()),
                    sa.column('child_id', sa.String()), sa.column('relation', sa.String()))


def upgrade() -> None:
    op.add_column('notes', sa.Column('lineage_conversation_ids', worker.store.types.JSONType(),
                                     nullable=True))
    _backfill(op.get_bind())


def _backfill(bind: sa.engine.Connection) -> None:
    parents: dict[str, set[str]] = defaultdict(set)
    for child, parent in bind.execute(sa.select(_LINEAGE.c.child_id, _LINEAGE.c.parent_id)
                                      .where(_LINEAGE.c.relation.in_(_DERIVED))):
        parents[child].add(parent)
    if not parents:
        return
    wanted = sorted({p for ps in parents.values() for p in ps})
    own: dict[str, str] = {}
    for start in range(0, len(wanted), 500):
        own.update((r[0], r[1]) for r in bind.execute(
            sa.select(_NOTES.c.id, _NOTES.c.source_conversation_id)
            .where(_NOTES.c.id.in_(wanted[start:start + 500]),
                   _NOTES.c.source_conversation_id.is_not(None))))
    found: dict[str, frozenset[str]] = {}
    for child in parents:
        _lineage(child, parents, own, found)
    rows = [{'b_id': child, 'v': sorted(found[child])} for child in sorted(parents)
            if found[child]]
    if rows:
        bind.execute(_NOTES.update().where(_NOTES.c.id == sa.bindparam('b_id'))
                     .values(lineage_conversation_ids=sa.bindparam('v')), rows)


def _lineage(note: str, parents: dict[str, set[str]], own: dict[str, str],
             found: dict[str, frozenset[str]]) -> frozenset[str]:
    """The conversations of every note ``note`` was written from: its parents' own and theirs,
    each note worked out once, after its parents (a cycle, which no write makes, ends where it
    closes)."""
    visiting: set[str] = set()
    stack = [(note, False)]
    while stack:
        n, ready = stack.pop()
        if n in found:
            continue
        if ready:
            found[n] = frozenset(c for p in parents.get(n, ()) for c in (
                {own[p]} if p in own else set()) | found.get(p, frozenset()))
            continue
        if n in visiting:
            continue
        visiting.add(n)
        stack.append((n, True))
        stack.extend((p, False) for p in parents.get(n, ()) if p not in found)
    return found[note]


def downgrade() -> None:
    # SQLite drops a column in place since 3.35 (a batch copy of notes would rebuild the table
    # and its indexes); PostgreSQL always has.
    op.drop_column('notes', 'lineage_conversation_ids')
