"""One lock per scope, held to the end of a transaction (PostgreSQL; SQLite has one writer).

Every transaction that writes a scope's notes in more than one statement takes its scopes' locks
first, in key order: a phase's guarded write (``worker.phases.kit.write``), an undo, an erasure.
Each then waits for the other to commit instead of holding some notes while it waits for others,
whatever order its own statements touch notes, review items, judgements and run rows in: two
such orders could form a cycle that PostgreSQL breaks by failing one side ("deadlock detected").
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import text
from sqlalchemy.orm import Session

# The first key of the two-key advisory lock: the worker's scope locks, apart from any other
# advisory locks of the same database (the second key is the scope key's hash; two scopes with
# the same hash only wait for each other).
_SCOPE_LOCKS = 0x64726D  # "drm"
_LOCK = text("SELECT pg_advisory_xact_lock(:space, hashtext(:key))")


def lock_scopes(session: Session, scope_keys: Iterable[str]) -> None:
    """Take each scope's lock for the rest of ``session``'s transaction, in key order (a no-op
    on SQLite, whose write lock is the transaction's own)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    for key in sorted(set(scope_keys)):
        session.execute(_LOCK, {"space": _SCOPE_LOCKS, "key": key})
