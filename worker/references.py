"""Reference checkers: does the agent, user, company or conversation a note points at still exist?

Look-ups are batched (one query per entity type per batch) and cached on the checker, which lives
for one run: the same entity is never looked up twice in a run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import structlog
from sqlalchemy.exc import OperationalError, ProgrammingError

from worker.config import ConfigError
from worker.phases.prune.core import ABSENT
from worker.store.repositories.references import EntityRecord, HostTable, ReferenceRepository

log = structlog.get_logger(__name__)

KINDS = ("agent", "user", "company", "conversation")


class ReferenceChecker(Protocol):
    lookups: Counter[str]

    def records(self, kind: str, ids: Iterable[str]) -> dict[str, EntityRecord | None]:
        """The record of every id (None when missing), from the cache or one batched look-up."""
        ...


class _CachingChecker:
    """Cache and count look-ups; subclasses implement ``_fetch`` (one query per kind per call)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lookups: Counter[str] = Counter()
        self._cache: dict[str, dict[str, EntityRecord | None]] = {k: {} for k in KINDS}

    def records(self, kind: str, ids: Iterable[str]) -> dict[str, EntityRecord | None]:
        cache = self._cache[kind]
        wanted = {i for i in ids if i is not None}
        missing = sorted(wanted - cache.keys())
        if missing:
            self.lookups[kind] += 1
            with self.app.uow() as uow:
                found = self._fetch(uow.references, kind, missing)
            for entity_id in missing:
                cache[entity_id] = found.get(entity_id)
        return {i: cache[i] for i in wanted}

    def records_many(self, wanted: Mapping[str, Iterable[str]]) -> dict[str, dict[str, EntityRecord | None]]:
        """``records`` of several kinds, the ids not cached yet looked up on one transaction
        (``_fetch_many``: one statement for the built-in registry)."""
        missing = {kind: sorted({i for i in ids if i is not None} - self._cache[kind].keys())
                   for kind, ids in wanted.items()}
        missing = {kind: ids for kind, ids in missing.items() if ids}
        if missing:
            with self.app.uow() as uow:
                found = self._fetch_many(uow.references, missing)
            for kind, ids in missing.items():
                self.lookups[kind] += 1
                for entity_id in ids:
                    self._cache[kind][entity_id] = found.get(kind, {}).get(entity_id)
        return {kind: self.records(kind, ids) for kind, ids in wanted.items()}

    def _fetch(self, repo: ReferenceRepository, kind: str, ids: list[str]) -> Mapping[str, EntityRecord]:
        raise NotImplementedError

    def _fetch_many(self, repo: ReferenceRepository,
                    missing: dict[str, list[str]]) -> Mapping[str, Mapping[str, EntityRecord]]:
        return {kind: self._fetch(repo, kind, ids) for kind, ids in missing.items()}


def records_of(checker: ReferenceChecker, wanted: Mapping[str, Iterable[str]],
               ) -> dict[str, dict[str, EntityRecord | None]]:
    """Every kind's records in as few look-ups as the checker allows (a host's own checker is
    asked one kind at a time)."""
    if isinstance(checker, _CachingChecker):
        return checker.records_many(wanted)
    return {kind: checker.records(kind, ids) for kind, ids in wanted.items()}


class RegistryReferenceChecker(_CachingChecker):
    """The worker's own agents/users/companies/conversations tables (`dream entities import`)."""

    def _fetch(self, repo: ReferenceRepository, kind: str, ids: list[str]) -> Mapping[str, EntityRecord]:
        return repo.registry(kind, ids)

    def _fetch_many(self, repo: ReferenceRepository,
                    missing: dict[str, list[str]]) -> Mapping[str, Mapping[str, EntityRecord]]:
        return repo.registry_many(missing)


class SqlReferenceChecker(_CachingChecker):
    """A host's own tables in the same database, named by settings.prune.sql_<kind>s; read-only.

    Entity types without a configured table are not checked (every id counts as present). An
    id a configured table lacks is unknown, unless the host declared that absence means deleted
    (``absence_means_deleted``): then it is ``ABSENT``, which prune treats as dead.
    """

    def __init__(self, app: Any, tables: Mapping[str, HostTable],
                 absence_means_deleted: bool = False) -> None:
        super().__init__(app)
        self.tables = dict(tables)
        self.absence_means_deleted = absence_means_deleted

    @classmethod
    def from_settings(cls, app: Any) -> SqlReferenceChecker:
        prune = app.settings.prune
        specs = {"agent": prune.sql_agents, "user": prune.sql_users,
                 "company": prune.sql_companies, "conversation": prune.sql_conversations}
        try:
            tables = {kind: HostTable.parse(spec, _setting(kind))
                      for kind, spec in specs.items() if spec}
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        checker = cls(app, tables, absence_means_deleted=prune.absence_means_deleted)
        checker.check_tables()
        return checker

    def check_tables(self) -> None:
        """Read each configured table once, for no row: a table or column the database lacks
        is a ConfigError naming the setting, before prune looks anything up (the driver's "no
        such table: agents" mid-phase named neither the setting nor the remedy)."""
        with self.app.uow() as uow:
            for kind, where in self.tables.items():
                try:
                    uow.references.probe_host(where)
                except (OperationalError, ProgrammingError) as exc:
                    reason = str(exc.orig or exc).splitlines()[0] if exc.orig else str(exc)
                    if not any(m in reason for m in _MISSING):
                        raise  # the database itself failed: not this setting's fault
                    raise ConfigError(
                        f"{_setting(kind)} names a table or column the database lacks "
                        f"({reason[:80]}); create it or fix the setting") from None

    def records(self, kind: str, ids: Iterable[str]) -> dict[str, EntityRecord | None]:
        if kind not in self.tables:
            return {i: EntityRecord(status="active", deleted=False) for i in ids if i is not None}
        return super().records(kind, ids)

    def records_many(self, wanted: Mapping[str, Iterable[str]]) -> dict[str, dict[str, EntityRecord | None]]:
        out = super().records_many({k: v for k, v in wanted.items() if k in self.tables})
        out.update({k: self.records(k, v) for k, v in wanted.items() if k not in self.tables})
        return out

    def _fetch(self, repo: ReferenceRepository, kind: str, ids: list[str]) -> Mapping[str, EntityRecord]:
        found = repo.host(self.tables[kind], ids)
        if self.absence_means_deleted:
            return {i: found.get(i, ABSENT) for i in ids}
        return found


def _setting(kind: str) -> str:
    return f"DREAM_PRUNE__SQL_{kind.upper()}S"


# How SQLite and PostgreSQL say a table or column is not there.
_MISSING = ("no such table", "no such column", "does not exist")


def make_reference_checker(app: Any) -> ReferenceChecker:
    """A fresh checker for one run: the host's ``app.reference_checker``, else the configured
    built-in."""
    if app.reference_checker is not None:
        checker: ReferenceChecker = app.reference_checker(app)
        return checker
    if app.settings.prune.checker == "sql":
        return SqlReferenceChecker.from_settings(app)
    return RegistryReferenceChecker(app)
