"""Engine and session factory, created once per process by whichever shell starts."""

from __future__ import annotations

import os
import sqlite3
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError, SAWarning
from sqlalchemy.orm import Session, sessionmaker

from worker.config import ConfigError

if TYPE_CHECKING:
    from worker.config import Settings

SQLITE_BUSY_SECONDS = 30
# A pooled PostgreSQL connection idle for longer than this is pinged before it is handed out (a
# dead one is replaced); one back within it is not: a run's short transactions follow each other
# within milliseconds, and a ping before each was a round trip per transaction.
PING_AFTER_IDLE_SECONDS = 5.0


def make_engine(url: str, *, create: bool = True, waits: Waits | None = None,
                **kwargs: Any) -> Engine:
    """An engine for a sqlite:// or postgresql:// URL. With ``create`` False a missing SQLite
    file is refused instead of created (read-only commands must not leave empty files).
    ``waits``: PostgreSQL's bounds on each connection's lock waits and statements (none: the
    server's own settings)."""
    try:
        parsed = make_url(url)
        backend = parsed.get_backend_name()
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        raise ConfigError("DREAM_DATABASE_URL is not a database URL; use sqlite:///PATH or "
                          "postgresql://USER@HOST/DB") from None
    if backend not in ("sqlite", "postgresql", "postgres"):
        raise ConfigError(f"DREAM_DATABASE_URL uses {backend!r}, which dream-worker does not "
                          "support; use sqlite:///PATH or postgresql://USER@HOST/DB")
    if backend == "sqlite":
        database = parsed.database
        if database and database != ":memory:" and not database.startswith("file:"):
            check_sqlite_file(Path(database).expanduser(), create)
        engine = _create(url, connect_args={"timeout": SQLITE_BUSY_SECONDS}, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("postgresql") and "connect_timeout" not in url:
        # An unreachable host fails in seconds with one line, instead of hanging the command.
        kwargs.setdefault("connect_args", {}).setdefault("connect_timeout", 10)
    engine = _create(url, **kwargs)
    _session_settings(engine, waits or Waits())
    _ping_when_idle(engine)
    _note_writes(engine)
    return engine


@dataclass(frozen=True)
class Waits:
    """How long a PostgreSQL statement may wait for a lock, and run at all, in seconds, before
    the server cancels it (SQLSTATE 55P03, 57014: the transaction rolls back and the caller is
    told the database was busy); 0 leaves the server's own setting (none by default)."""

    lock_timeout: float = 0.0
    statement_timeout: float = 0.0

    @classmethod
    def of(cls, settings: Settings) -> Waits:
        return cls(settings.db_lock_timeout_seconds, settings.db_statement_timeout_seconds)

    def statements(self) -> list[str]:
        """The SETs a new connection runs: custom plans (``CUSTOM_PLANS``), then the bounds
        (milliseconds, at least 1 for any bound)."""
        return [CUSTOM_PLANS, *(f"SET {name} = {max(1, round(seconds * 1000))}"
                                for name, seconds in (("lock_timeout", self.lock_timeout),
                                                      ("statement_timeout", self.statement_timeout))
                                if seconds > 0)]


# Plan every statement for its own values. psycopg prepares a statement once its text has run
# five times on a connection; the server then may switch it to one generic plan. For a look-up
# of ``IN_CHUNK`` ids or hashes (every chunk but the last has the same text) that plan took
# 0.3-0.5 s a statement against ~10 ms planned for its values, growing with the table:
# re-importing 100,000 notes took 382 s instead of ~18. A custom plan keeps the prepared
# statement's saved parse and costs a plan per execution, not measurable in the run bench.
CUSTOM_PLANS = "SET plan_cache_mode = force_custom_plan"


def _session_settings(engine: Engine, waits: Waits) -> None:
    """Each new connection's session plans statements for their values (``CUSTOM_PLANS``) and
    bounds its lock waits and statements: a statement waiting on a lock a stuck session holds
    (or one that runs away) otherwise waited for ever, its run holding the scope's lease all
    the while. Set once per connection, outside any transaction (the pool keeps the connection
    and its settings); a migration lifts the statement bound for its own transaction
    (``worker.store.migrate``)."""
    sets = "; ".join(waits.statements())

    @event.listens_for(engine, "connect")
    def _connected(dbapi_conn: Any, _record: Any) -> None:
        autocommit = dbapi_conn.autocommit
        dbapi_conn.autocommit = True  # a SET in a transaction is undone by its rollback
        try:
            with dbapi_conn.cursor() as cur:
                cur.execute(sets)
        finally:
            dbapi_conn.autocommit = autocommit


def _create(url: str, **kwargs: Any) -> Engine:
    """create_engine, refusing a driver the URL names that is not installed
    (``postgresql+psycopg2://``, ``sqlite+pysqlcipher://``) as a setting, not a traceback."""
    # A database error's message lists the statement's parameters: a note's text, in an error
    # that a Celery task's log, a trace's exception event or a 500 would carry (R21).
    kwargs.setdefault("hide_parameters", True)
    try:
        with warnings.catch_warnings():
            # pysqlite only warns about a query option it does not take, and ignores it: the
            # option the user wrote would silently do nothing.
            warnings.filterwarnings("error", message="Query string argument", category=SAWarning)
            return create_engine(url, **kwargs)
    except SAWarning as exc:
        names = str(exc).split(" are not accepted")[0].removeprefix("Query string argument(s) ")
        raise ConfigError(f"DREAM_DATABASE_URL: an option after `?` is not usable ({names}: "
                          "the SQLite driver does not take it); fix or drop it") from None
    except ImportError as exc:
        raise ConfigError(f"DREAM_DATABASE_URL names the driver {make_url(url).drivername!r}, "
                          f"whose module {exc.name or 'it needs'} is not installed; use "
                          "sqlite:///PATH or postgresql://USER@HOST/DB (psycopg)") from None
    except (ValueError, TypeError) as exc:  # an option after `?` the driver cannot read
        raise ConfigError(f"DREAM_DATABASE_URL: an option after `?` is not usable ({exc}); fix "
                          "or drop it") from None


_WROTE = "dream_wrote"  # connection info: the open transaction ran a statement other than SELECT


def _note_writes(engine: Engine) -> None:
    """Mark the transaction of any statement but a plain SELECT (a WITH counts as a write)."""

    @event.listens_for(engine, "begin")
    def _began(conn: Any) -> None:
        conn.info[_WROTE] = False

    @event.listens_for(engine, "before_cursor_execute")
    def _executing(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip()[:6].upper() != "SELECT":
            conn.info[_WROTE] = True


def only_read(conn: Any) -> bool:
    """Whether ``conn``'s open transaction (PostgreSQL) ran nothing but SELECTs so far: ending
    it with COMMIT is then the same as ROLLBACK, and keeps psycopg's prepared statements, which
    it deallocates on every ROLLBACK."""
    return conn.info.get(_WROTE) is False


def read_one_snapshot(session: Session) -> None:
    """Make every statement of ``session``'s transaction read the same committed state, so a
    document assembled from several queries (an export: its notes, then their lineage and
    keep-apart sets; a run's row, then its steps) is never half before and half after another
    process's commit. Call it before the session's first statement. PostgreSQL: REPEATABLE
    READ, READ ONLY (each statement of READ COMMITTED sees its own snapshot). SQLite: a
    deferred BEGIN (pysqlite opens no transaction for reads, so each SELECT saw the file as it
    was then); WAL keeps writers going meanwhile."""
    if session.get_bind().dialect.name == "sqlite":
        session.connection().exec_driver_sql("BEGIN")
    else:
        session.connection(execution_options={"isolation_level": "REPEATABLE READ",
                                              "postgresql_readonly": True})


def _ping_when_idle(engine: Engine) -> None:
    """SQLAlchemy's pessimistic disconnect handling, for connections that sat in the pool: a
    failed ping raises DisconnectionError, and the pool retries with a new connection."""

    @event.listens_for(engine, "checkin")
    def _returned(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _handed_out(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_SECONDS:
            return  # new, or back from a transaction a moment ago
        try:
            alive = engine.dialect.do_ping(dbapi_conn)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(f"a pooled connection is gone: {type(exc).__name__}") from exc
        if not alive:
            raise DisconnectionError("a pooled connection is gone")


def check_sqlite_file(path: Path, create: bool) -> None:
    """Refuse, with what to do, a path that is not an SQLite database or cannot become one."""
    if path.is_dir():
        raise ConfigError(f"DREAM_DATABASE_URL points at the directory {path}; name a file in it")
    if path.exists() and not path.is_file():
        # Opening a pipe to read its header waited for a writer for ever; a device such as
        # /dev/null reads as an empty file, which SQLite cannot keep a journal beside.
        raise ConfigError(f"DREAM_DATABASE_URL points at {path}, which is not a regular file (a "
                          "device or a pipe); name an SQLite file")
    if path.exists():
        if not os.access(path, os.R_OK):
            raise ConfigError(f"cannot read the database {path}: permission denied; give this "
                              "user read and write access to it, or point DREAM_DATABASE_URL "
                              "elsewhere")
        if not is_sqlite_file(path):
            raise ConfigError(f"{path} is not an SQLite database; point DREAM_DATABASE_URL at a "
                              "dream-worker database or at a new path")
        return
    if not create:
        raise ConfigError(f"no database at {path}; run `dream db upgrade` to create it (or point "
                          "DREAM_DATABASE_URL at an existing one)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"cannot create the database {path}: part of {path.parent} is a file, "
                          "not a directory; choose another path") from None
    except OSError as exc:
        raise ConfigError(f"cannot create the database directory {path.parent}: "
                          f"{exc.strerror or type(exc).__name__}") from None


def is_sqlite_file(path: Path) -> bool:
    """Whether the existing file at ``path`` is an SQLite database (an empty file is one),
    read through SQLite itself. Never with a descriptor of our own: closing any descriptor of a
    file drops every POSIX lock the process holds on it, its SQLite connections' included
    (sqlite.org/howtocorrupt.html, 2.2). A process that built a second engine for a store it
    had open then held no lock, the last other process to close the store removed its log and
    index, and this process's connections read a malformed database. SQLite's own open and
    close keep the locks of the process's other connections."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        conn.execute("PRAGMA schema_version").fetchone()  # reads the header page
    except sqlite3.DatabaseError as exc:
        return "not a database" not in str(exc)  # anything else is the store's own trouble
    finally:
        conn.close()
    return True


# Pages the write-ahead log may grow to before a commit folds it into the main file (SQLite's
# default is 1,000, about 4 MB). A run rewrites the same pages in each phase's commit (the run
# row, its steps' last pages, the indexes of the notes it changed): a checkpoint writes a page
# once however often it was rewritten since the last one, so a longer log writes far less.
# 100k notes in 1,000 scopes: 3.0-4.2 system CPU seconds with the default, 2.3-3.3 with this.
# The log file keeps its largest size (~40 MB) while a connection is open: SQLite removes it
# when the last one closes, `dream erase` truncates it (R28).
WAL_CHECKPOINT_PAGES = 10_000


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets the host keep reading and writing while a run applies its short transactions.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
    cur.execute("PRAGMA foreign_keys=ON")
    # Deleted content is overwritten, not left in free pages (R28): erasure must leave no copy
    # in the file, whatever the SQLite build's default.
    cur.execute("PRAGMA secure_delete=ON")
    cur.close()


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=False)
