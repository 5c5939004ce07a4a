"""notes.content_hash keeps every mark that carries a value

The identity fold still took away a decimal point (".5 mg" was "5 mg"), comparison signs and
other symbols ("< $1500" was "> $1500", "❌" was "✅"), a sign that ends a token ("O-" was
"O"), an en dash typed as a minus ("–18 °C" was "18 °C") and told "ß" from "ss" no more
("Maßen" was "Massen"): `remember` answered NOOP for the new fact, an import skipped its line
as present. The fold now keeps them (``worker.domain.types.normalise_text``); this recomputes
the stored hash of every note, in batches of ids, with the rule as it stands at this revision
(a copy: a later change of the rule needs a migration of its own). The downgrade restores the
hashes of revision 0015's rule.

Revision ID: 0017
Revises: 0016
"""
import hashlib
import re
import unicodedata
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0017'
down_revision: str | None = '0016'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 1000
_SYMBOLS = "+#%‰$¢£¤¥€₹₽₩₺₪₫₴₦₱₡₲₵₸₼₾₿"
_KEPT_PUNCT = _SYMBOLS + "&@§¶†‡′″‴‱"
_DASHES = str.maketrans(dict.fromkeys(
    "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63", "-"))
_NOT_WORD = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")
_OLD_PUNCT = re.compile(rf"(?!(?<!\w)[-\u2212]\d)[^\w\s{re.escape(_SYMBOLS)}]", re.UNICODE)

_notes = sa.table('notes', sa.column('id', sa.String), sa.column('content', sa.Text),
                  sa.column('content_hash', sa.String))


def _is_letter(c: str) -> bool:
    return c.isalpha() or unicodedata.category(c).startswith("M")


def _mark(match: re.Match[str]) -> str:
    c, text, at = match.group(), match.string, match.start()
    before = text[at - 1] if at else " "
    after = text[at + 1] if at + 1 < len(text) else " "
    kind = unicodedata.category(c)
    if kind == "Cf" or c in "\ufe0e\ufe0f":
        return ""
    if (kind[0] in "SM" and c not in "`´") or c in _KEPT_PUNCT:
        return c
    if before.isdigit() and after.isdigit():
        return c
    if c in ".-" and after.isdigit() and not _is_letter(before):
        return c
    if c == "-" and (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
        return c
    return " "


def _fold_case(text: str) -> str:
    return "ß".join(part.casefold() for part in text.replace("ẞ", "ß").split("ß"))


def _new(text: str) -> str:
    text = _fold_case(unicodedata.normalize("NFKC", text)).translate(_DASHES)
    return _SPACE.sub(" ", _NOT_WORD.sub(_mark, text)).strip() or _SPACE.sub(" ", text).strip()


def _old(text: str) -> str:  # revision 0015's rule
    text = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE.sub(" ", _OLD_PUNCT.sub(" ", text)).strip() or _SPACE.sub(" ", text).strip()


def _rehash(fold: Callable[[str], str]) -> None:
    """Every note, a batch of ids at a time (keyset order: no cursor held across updates)."""
    conn = op.get_bind()
    stmt = (_notes.update().where(_notes.c.id == sa.bindparam('b_id'))
            .values(content_hash=sa.bindparam('b_hash')))
    last = ""
    while True:
        rows = conn.execute(sa.select(_notes.c.id, _notes.c.content, _notes.c.content_hash)
                            .where(_notes.c.id > last).order_by(_notes.c.id)
                            .limit(_BATCH)).all()
        if not rows:
            return
        changed = []
        for note_id, content, stored in rows:
            new = hashlib.sha256(fold(content).encode("utf-8")).hexdigest()
            if new != stored:
                changed.append({"b_id": note_id, "b_hash": new})
        if changed:
            conn.execute(stmt, changed)
        last = rows[-1][0]


def upgrade() -> None:
    _rehash(_new)


def downgrade() -> None:
    _rehash(_old)
