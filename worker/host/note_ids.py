"""Remember's note ids: deterministic, so that identical concurrent writes collide on the
primary key, and keyed, so that an id confirms no guess at its note's text.

An id is HMAC(the database's ``note_ids`` key, the scope's salt + scope key + normalised text).
The salt (``instance_keys``, named by keyed hashes of the scope and its user) is made at random
on the scope's first remember and deleted by every erasure of notes of the scope, in the
erasure's transaction: a remember of an erased note's text derives an id unrelated to the id
the erasure named, as a fresh text's is. Without it the same text remembered again got the
erased note's id back, and anyone who may remember in the scope could test guesses at what an
erased note said. The salt is read in each write (never kept by a process), and checked again
in the write's transaction (``salt_held``): a write whose salt an erasure deleted meanwhile
decides again."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from worker.app import App
from worker.domain.types import Scope
from worker.host.remember_cache import cache_of
from worker.store.repositories.keys import NOTE_IDS


def derived_id(key: str, scope: Scope, normalised: str, attempt: int = 0, *,
               salt: str) -> str:
    """The id of text ``normalised`` in ``scope`` under the scope's ``salt``; ``attempt``: the
    counter suffix of a text remembered again after its note was retired."""
    raw = f"{salt}\n{scope.key}\n{normalised}" + (f"\n#{attempt}" if attempt else "")
    return hmac.new(key.encode("ascii"), raw.encode("utf-8"), hashlib.sha256).hexdigest()


def id_key(app: App) -> str:
    """The database's ``note_ids`` key: read on the first write of this App, then kept (made
    and committed first if the row is missing). It never changes; a scope's salt does."""
    cache = cache_of(app)
    if cache.id_key is None:
        with app.uow() as uow:
            cache.id_key = uow.keys.get(NOTE_IDS)
            uow.commit()
    return cache.id_key


def scope_salt(uow: Any, key: str, scope: Scope) -> str:
    """The scope's salt as stored now; made and committed first if it has none (a concurrent
    identical write reads the same one: the first maker's stands)."""
    salt: str | None = uow.keys.scope_salt(key, scope.key)
    if salt is None:
        salt = uow.keys.scope_salt(key, scope.key, make=True)
        uow.commit()
    assert salt is not None
    return salt


def salt_held(uow: Any, key: str, scope: Scope, salt: str) -> bool:
    """Whether ``salt`` is still the scope's, read in the write's transaction after its insert
    (SQLite's write lock, PostgreSQL's scope lock held: an erasure commits before or after the
    write whole)."""
    return bool(uow.keys.scope_salt(key, scope.key) == salt)
