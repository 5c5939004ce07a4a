"""notes.content_hash keeps the symbols that carry a value

The identity hash folded every symbol away, so "C#", "C++" and "C", "$100" and "100%", "-5" and
"5" hashed alike: `remember` answered NOOP for a new fact, an import skipped it as present, the
rule judge merged the two notes. The hash now keeps them (``worker.domain.types.VALUE_SYMBOLS``
and a minus sign before a number); this recomputes the stored hash of every note whose text
holds one, and of every note of symbols alone ("🙂", "!!!": they all hashed as the empty
text, so each imported after the first was "already present"; now its own text is its
identity), with the rule as it stood at this revision (a copy: a later change of the rule
needs a migration of its own). Other notes' hashes are unchanged.

Revision ID: 0015
Revises: 0014
"""
import hashlib
import re
import unicodedata
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0015'
down_revision: str | None = '0014'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SYMBOLS = "+#%‰$¢£¤¥€₹₽₩₺₪₫₴₦₱₡₲₵₸₼₾₿"
_PUNCT = re.compile(rf"(?!(?<!\w)[-\u2212]\d)[^\w\s{re.escape(_SYMBOLS)}]", re.UNICODE)
_OLD_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")
_BATCH = 1000

_notes = sa.table('notes', sa.column('id', sa.String), sa.column('content', sa.Text),
                  sa.column('content_hash', sa.String))


def _hash(text: str, punct: re.Pattern[str], symbols_alone: bool) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    folded = _SPACE.sub(" ", punct.sub(" ", text)).strip()
    if symbols_alone and not folded:  # a text of symbols alone is its own identity
        folded = _SPACE.sub(" ", text).strip()
    return hashlib.sha256(folded.encode("utf-8")).hexdigest()


def _rehash(punct: re.Pattern[str], symbols_alone: bool) -> None:
    conn = op.get_bind()
    changed = []
    # Streamed (a server-side cursor on PostgreSQL): a large store's texts are not held at once.
    rows = conn.execute(sa.select(_notes.c.id, _notes.c.content, _notes.c.content_hash)
                        .execution_options(stream_results=True, max_row_buffer=_BATCH))
    for note_id, content, stored in rows:
        if any(c in _SYMBOLS or c in "-\u2212" for c in content) or not _OLD_PUNCT.sub(
                "", unicodedata.normalize("NFKC", content)).strip():
            new = _hash(content, punct, symbols_alone)
            if new != stored:
                changed.append({"b_id": note_id, "b_hash": new})
    stmt = (_notes.update().where(_notes.c.id == sa.bindparam('b_id'))
            .values(content_hash=sa.bindparam('b_hash')))
    for start in range(0, len(changed), _BATCH):
        conn.execute(stmt, changed[start:start + _BATCH])


def upgrade() -> None:
    _rehash(_PUNCT, symbols_alone=True)


def downgrade() -> None:
    _rehash(_OLD_PUNCT, symbols_alone=False)
