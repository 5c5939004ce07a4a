"""One lock per scope, held to the end of a transaction (PostgreSQL; SQLite has one writer).

Every transaction that writes a scope's notes in more than one statement takes its scopes' locks
first, in the locks' own order: a phase's guarded write (``worker.phases.kit.write``), an undo,
an erasure.
Each then waits for the other to commit instead of holding some notes while it waits for others,
whatever order its own statements touch notes, review items, judgements and run rows in: two
such orders could form a cycle that PostgreSQL breaks by failing one side ("deadlock detected").
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import (
    ColumnElement,
    bindparam,
    exists,
    false,
    func,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session

from worker.store.models import NoteRow

# The first key of the two-key advisory lock: the worker's scope locks, apart from any other
# advisory locks of the same database (the second key is the scope key's hash; two scopes with
# the same hash only wait for each other).
_SCOPE_LOCKS = 0x64726D  # "drm"
_LOCK = text("SELECT pg_advisory_xact_lock(:space, hashtext(:key))")
# Every key's lock in the order of the locks themselves (their hashes), each once: a volatile
# output expression is evaluated after the ORDER BY sort (PostgreSQL ≥ 9.6). Not the keys'
# order: two keys of one hash share a lock, so with hash(c) = hash(a), [a, b] taken as a then b
# and [b, c] as b then c (a's lock) could each hold the lock the other waits for.
_LOCK_ALL = text("SELECT pg_advisory_xact_lock(:space, t.h) FROM (SELECT DISTINCT hashtext(k) "
                 "AS h FROM unnest(CAST(:keys AS text[])) AS k) AS t ORDER BY t.h")
LOCK_KEY = "l_scope"  # the parameter ``lock_term`` binds the scope key as


def lock_term() -> ColumnElement[bool]:
    """A WHERE term (always true) that takes the scope's lock within a statement of its own
    (PostgreSQL): an uncorrelated EXISTS is evaluated once, as the plan's one-time filter,
    before the statement reads or locks any row, so a write's first UPDATE takes the lock
    first without a statement for it. The scope key binds as ``LOCK_KEY`` (an executemany
    takes it again per row: the lock is re-entrant within its transaction)."""
    taken = func.pg_advisory_xact_lock(literal_column(str(_SCOPE_LOCKS)),
                                       func.hashtext(bindparam(LOCK_KEY)))
    return exists(select(literal_column("1")).select_from(taken))


def lock_scopes(session: Session, scope_keys: Iterable[str]) -> None:
    """Take each scope's lock for the rest of ``session``'s transaction, in the locks' order
    (a no-op on SQLite, whose write lock is the transaction's own)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    keys = sorted(set(scope_keys))
    if len(keys) == 1:
        session.execute(_LOCK, {"space": _SCOPE_LOCKS, "key": keys[0]})
    elif keys:  # one statement, not one per scope (an import or an erasure over many)
        session.execute(_LOCK_ALL, {"space": _SCOPE_LOCKS, "keys": keys}).all()


def hold_scopes(session: Session, scope_keys: Iterable[str]) -> None:
    """Hold these scopes for writing until the commit, before reading what they store, so two
    writers that look first (an import of one file twice at once) never both find a row
    absent: the scope locks on PostgreSQL; on SQLite, whose reads open no transaction, an
    UPDATE of no row takes the database's write lock."""
    lock_scopes(session, scope_keys)
    if session.get_bind().dialect.name == "sqlite":
        session.execute(update(NoteRow).where(false()).values(version=NoteRow.version))
