"""The scope load, every phase's one read, is compiled once per process and then taken from
SQLAlchemy's statement cache (SQLite and PostgreSQL). A column element without a cache key
(the retired-into probe once had none) makes SQLAlchemy compile the whole statement on every
load: ≈ 10 % of consolidation's time on the bench, and no test noticed."""

from __future__ import annotations

import pytest
from sqlalchemy.engine.interfaces import CacheStats

from worker.app import App
from worker.store.repositories.note_load import _LOADS


@pytest.mark.parametrize("vectors", [True, False])
def test_the_scope_load_is_compiled_once(app: App, vectors: bool) -> None:
    params = {"scope_key": "nobody", "statuses": ["active"]}
    with app.uow() as uow:
        conn = uow.session.connection()
        conn.execute(_LOADS[vectors], params).all()
        again = conn.execute(_LOADS[vectors], params)
        again.all()
    assert again.context.cache_hit == CacheStats.CACHE_HIT
