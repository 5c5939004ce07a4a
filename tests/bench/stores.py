"""Bench databases: one loaded template per (backend, corpus), copied for every measured run.

SQLite templates are files under ``WORKDIR``; PostgreSQL ones are databases on the embedded
server of ``tests/support/services.py`` (or ``DREAM_TEST_DATABASE_URL``), copied with
``CREATE DATABASE … TEMPLATE``. A template's name carries the schema head, so one built before a
migration is never reused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import make_url, text

from tests.bench import corpus
from worker.app import build_app
from worker.config import Settings
from worker.store.db import make_engine
from worker.store.migrate import upgrade

WORKDIR = Path(os.environ.get("DREAM_BENCH_DIR")
               or Path(tempfile.gettempdir()) / f"dream-bench-{os.getuid()}")
SEED = 7
# Run copies are named per process: two checkouts may bench side by side (before vs after).
RUN_TAG = f"p{os.getpid()}"


@dataclass(frozen=True)
class CorpusSpec:
    scopes: int
    notes_per_scope: int
    seed: int = SEED

    @property
    def notes(self) -> int:
        return self.scopes * self.notes_per_scope

    @property
    def tag(self) -> str:
        return f"s{self.scopes}_n{self.notes_per_scope}_r{self.seed}_{schema_head()}"


def schema_head() -> str:
    from alembic.script import ScriptDirectory

    from worker.store.migrate import MIGRATIONS_DIR

    return str(ScriptDirectory(str(MIGRATIONS_DIR)).get_current_head())


def settings(url: str, **overrides: Any) -> Settings:
    return Settings(database_url=url, llm_provider="none", **overrides)


def pg_base() -> str:
    from tests.support.services import postgres_url

    try:
        return postgres_url()
    except BaseException as exc:  # pytest.skip raises a BaseException outside pytest
        raise SystemExit(f"error: PostgreSQL unavailable for the bench: {exc}") from None


def pg_url(db: str) -> str:
    return make_url(pg_base()).set(database=db).render_as_string(hide_password=False)


def _pg_admin(sql: str) -> None:
    engine = make_engine(pg_base(), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(sql))
    engine.dispose()


def _pg_exists(db: str) -> bool:
    engine = make_engine(pg_base())
    with engine.connect() as conn:
        found = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :d"),
                             {"d": db}).first()
    engine.dispose()
    return found is not None


def template(backend: str, spec: CorpusSpec) -> tuple[str, float]:
    """Build (once) the loaded corpus; returns its locator (file or database) and load seconds."""
    WORKDIR.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if backend == "sqlite":
        path = WORKDIR / f"tpl_{spec.tag}.db"
        if path.exists():
            return str(path), 0.0
        tmp = WORKDIR / f"tpl_{spec.tag}.{RUN_TAG}.tmp"
        older = _older_template(backend, spec)
        if older:  # same corpus under an older schema: copy and migrate (a 1M load is minutes)
            shutil.copyfile(older, tmp)
            _upgrade(f"sqlite:///{tmp}")
        else:
            _load(f"sqlite:///{tmp}", spec)
        with make_engine(f"sqlite:///{tmp}").connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        tmp.rename(path)
        for leftover in WORKDIR.glob(tmp.name + "-*"):  # -wal / -shm of the checkpointed file
            leftover.unlink()
        return str(path), time.perf_counter() - started
    db = f"bench_tpl_{spec.tag}"
    if _pg_exists(db):
        return db, 0.0
    building = f"{db}_{RUN_TAG}"
    _pg_admin(f"DROP DATABASE IF EXISTS {building}")
    older = _older_template(backend, spec)
    if older:
        _pg_admin(f"CREATE DATABASE {building} TEMPLATE {older}")
        _upgrade(pg_url(building))
    else:
        _pg_admin(f"CREATE DATABASE {building}")
        _load(pg_url(building), spec)
    _pg_admin(f"ALTER DATABASE {building} RENAME TO {db}")
    return db, time.perf_counter() - started


def _older_template(backend: str, spec: CorpusSpec) -> str | None:
    """A template of the same corpus at a schema this checkout's migrations can upgrade from
    (an ancestor of its head); None if there is none."""
    from alembic.script import ScriptDirectory

    from worker.store.migrate import MIGRATIONS_DIR

    script = ScriptDirectory(str(MIGRATIONS_DIR))
    known = {rev.revision for rev in script.walk_revisions()} - {schema_head()}
    prefix = spec.tag.rsplit("_", 1)[0]
    if backend == "sqlite":
        candidates = {p.stem.rsplit("_", 1)[1]: str(p) for p in WORKDIR.glob(f"tpl_{prefix}_*.db")}
    else:
        engine = make_engine(pg_base())
        with engine.connect() as conn:
            names = conn.execute(text("SELECT datname FROM pg_database WHERE datname LIKE :p"),
                                 {"p": f"bench_tpl_{prefix}_%"}).scalars().all()
        engine.dispose()
        candidates = {n.rsplit("_", 1)[1]: n for n in names}
    usable = [rev for rev in candidates if rev in known]
    return candidates[max(usable)] if usable else None


def _upgrade(url: str) -> None:
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()


def _load(url: str, spec: CorpusSpec) -> None:
    app = build_app(settings(url))
    upgrade(app.engine)
    corpus.load(app, spec.seed, spec.scopes, spec.notes_per_scope)
    corpus.analyze(app)
    app.dispose()


def template_url(backend: str, tpl: str) -> str:
    return f"sqlite:///{tpl}" if backend == "sqlite" else pg_url(tpl)


def fresh_copy(backend: str, tpl: str, name: str) -> str:
    """A writable copy of the template; returns its database URL."""
    if backend == "sqlite":
        dst = WORKDIR / f"run_{name}_{RUN_TAG}.db"
        for p in WORKDIR.glob(dst.name + "*"):
            p.unlink()
        shutil.copyfile(tpl, dst)
        return f"sqlite:///{dst}"
    db = f"bench_run_{name}_{RUN_TAG}"
    _pg_admin(f"DROP DATABASE IF EXISTS {db}")
    _pg_admin(f"CREATE DATABASE {db} TEMPLATE {tpl}")
    return pg_url(db)


def drop_copy(url: str) -> None:
    """Free a run copy's disk (a 1M-note copy is several GB)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        for p in WORKDIR.glob(Path(str(parsed.database)).name + "*"):
            p.unlink()
    else:
        _pg_admin(f"DROP DATABASE IF EXISTS {parsed.database}")
