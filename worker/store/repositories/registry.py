"""All SQL touching sessions and the reference registry (agents, users, companies, conversations)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Row,
    and_,
    bindparam,
    case,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from worker.clock import SKEW, utcnow
from worker.domain.types import Scope
from worker.store.chunks import chunked, records_by_id
from worker.store.models import (
    AgentRow,
    CompanyRow,
    ConversationRow,
    DreamRunRow,
    NoteRow,
    ReviewItemRow,
    SessionRow,
    UserRow,
)
from worker.store.repositories.run_history import gate_dreams

ENTITY_MODELS: dict[str, Any] = {
    "agent": AgentRow,
    "user": UserRow,
    "company": CompanyRow,
    "conversation": ConversationRow,
}
# Built once: a run asks for its agent's record once per run or phase.
_AGENT = select(AgentRow.__table__).where(AgentRow.__table__.c.id == bindparam("id"))
# A run's read of it says too whether the scope has open review items (one row always: the
# agent's columns are NULL when the registry lacks it), so a run in auto mode settles the
# items its writes make stale at no statement of its own when there are none.
_ONE = select(literal(1).label("one")).subquery()
_RUN_AGENT = select(
    AgentRow.__table__,
    exists().where(ReviewItemRow.scope_key == bindparam("scope"),
                   ReviewItemRow.status == "open").label("open_items"),
).select_from(_ONE.outerjoin(AgentRow.__table__, AgentRow.__table__.c.id == bindparam("id")))


class SessionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add_many(self, rows: list[dict[str, Any]]) -> None:
        """Insert sessions, each stamped with the time this store recorded it (the gate): the
        row's ``recorded_at`` (an export's, the store it came from) while no dream of this
        store has begun since, else now. Kept past one, the session would count as seen by a
        dream that never saw it, and a host's late upload starved its scope again."""
        if not rows:
            return
        at = utcnow()
        given = sorted({r["scope_key"] for r in rows if r.get("recorded_at") is not None})
        last: dict[str, datetime | None] = {}
        for chunk in chunked(given):
            dreams = gate_dreams(chunk, DreamRunRow.started_at)
            last.update((key, _aware(when)) for key, when in self.session.execute(select(dreams)))
        stamped = []
        for r in rows:
            recorded, dream = r.get("recorded_at"), last.get(r["scope_key"])
            if recorded is None or (dream is not None and recorded <= dream):
                recorded = at
            stamped.append({**r, "recorded_at": recorded})
        self.session.execute(insert(SessionRow), stamped)

    def records(self, ids: Iterable[str], fields: Sequence[str]) -> dict[str, dict[str, Any]]:
        """id → ``fields`` of the stored ones: what an import compares a line of a stored id
        against (``worker.ingest.same_record``)."""
        return records_by_id(self.session, SessionRow, fields, ids)

    def ends(self, ids: Iterable[str]) -> dict[str, datetime | None]:
        """id → ended_at (None: still going on) for the ids that exist."""
        found = records_by_id(self.session, SessionRow, ("ended_at",), ids)
        return {i: _aware(r["ended_at"]) for i, r in found.items()}

    def set_ended(self, ended: dict[str, datetime]) -> None:
        """Record the end of sessions stored without one (``ended_at`` still NULL)."""
        if ended:  # one executemany, not a statement per session
            self.session.connection().execute(
                update(SessionRow).where(SessionRow.id == bindparam("sid"),
                                         SessionRow.ended_at.is_(None))
                .values(ended_at=bindparam("at")),
                [{"sid": i, "at": at} for i, at in ended.items()])

    def scope_known(self, scope: Scope) -> bool:
        """Whether the scope has a note (any status), a session or a run: one statement of
        three EXISTS, each stopping at its first row (an index on ``scope_key`` each). Before,
        every session of the scope was loaded to answer it."""
        return bool(self.session.scalar(select(or_(
            *(exists().where(model.scope_key == scope.key)
              for model in (NoteRow, SessionRow, DreamRunRow))))))

    def activity_since_last_success(
        self, scope_keys: list[str], now: datetime, clock: datetime | None = None
    ) -> dict[str, tuple[int, datetime | None, datetime | None]]:
        """Per scope, aggregated in the database in one query (the session history only grows):
        (sessions started, or recorded, after its last dream (``gate_dreams``) began, and
        started by ``now``; latest session start or end at any time; earliest start of those
        sessions). A session
        stamped past ``now`` has not happened yet: counted, it would start after every dream
        and make the scope due forever. ``clock``: a `--now` given, the last dream begun by
        then (``gate_dreams``)."""
        if not scope_keys:
            return {}
        last = gate_dreams(scope_keys, DreamRunRow.started_at, clock)
        # A session counts for the first dream begun after it both started and was recorded:
        # one imported after a dream, dated before it, counts once, for the next (before, it
        # never did, and a host that uploads sessions late starved its scopes).
        pending = and_(SessionRow.started_at <= now,
                       or_(last.c.at.is_(None), SessionRow.started_at > last.c.at,
                           SessionRow.recorded_at > last.c.at))
        # A stamp a little ahead (clock skew) is activity now (the idle wait holds); one
        # further ahead (a host's wrong year, 2099) has not happened, and counted it held the
        # scope in its idle wait until then.
        horizon = now + SKEW
        rows = self.session.execute(
            select(SessionRow.scope_key, func.count(case((pending, 1))),
                   func.max(case((SessionRow.started_at <= horizon, SessionRow.started_at))),
                   func.max(case((SessionRow.ended_at <= horizon, SessionRow.ended_at))),
                   func.min(case((pending, SessionRow.started_at))))
            .outerjoin(last, last.c.scope_key == SessionRow.scope_key)
            .where(SessionRow.scope_key.in_(scope_keys))
            .group_by(SessionRow.scope_key)
        ).all()
        out: dict[str, tuple[int, datetime | None, datetime | None]] = {}
        for key, count, started, ended, earliest in rows:
            stamps = [aware for t in (started, ended) if (aware := _aware(t)) is not None]
            out[key] = (int(count), max(stamps) if stamps else None, _aware(earliest))
        return out

    def scopes(self) -> list[Scope]:
        keys = self.session.scalars(select(SessionRow.scope_key).distinct())
        return sorted(Scope.from_key(k) for k in keys)

    def any_scope_matches(self, agent_id: str | None, user_id: str | None,
                          company_id: str | None) -> bool:
        """Whether a note (of any status), a session or a run has the given scope parts (None:
        any value): a filter that names a scope this store knows."""
        for model in (NoteRow, SessionRow, DreamRunRow):
            stmt = select(model.id)
            for column, value in (("agent_id", agent_id), ("user_id", user_id),
                                  ("company_id", company_id)):
                if value is not None:
                    stmt = stmt.where(getattr(model, column) == value)
            if self.session.scalars(stmt.limit(1)).first() is not None:
                return True
        return False

    def count(self) -> int:
        return int(self.session.scalar(select(func.count()).select_from(SessionRow)) or 0)


class EntityRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def upsert(self, kind: str, rows: list[dict[str, Any]]) -> None:
        model = ENTITY_MODELS[kind]
        if not rows:
            return
        dialect = self.session.get_bind().dialect.name
        ins = pg_insert(model) if dialect == "postgresql" else sqlite_insert(model)
        cols = {k for r in rows for k in r} - {"id"}
        stmt = ins.values(rows)
        if cols:
            stmt = stmt.on_conflict_do_update(
                index_elements=["id"], set_={c: getattr(stmt.excluded, c) for c in cols}
            )
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=["id"])
        self.session.execute(stmt)

    def fetch(self, kind: str, ids: Iterable[str]) -> dict[str, Any]:
        """The rows of these ids of one entity type, a query per ``IN_CHUNK`` ids; missing ids
        are absent from the result."""
        model = ENTITY_MODELS[kind]
        return {r.id: r for chunk in chunked(sorted(set(ids)))
                for r in self.session.scalars(select(model).where(model.id.in_(chunk)))}

    def agent(self, agent_id: str) -> Row[Any] | None:
        """The agent's registry record, read-only (its columns as attributes), or None. A plain
        row, not a mapped object: a run reads it once and never writes through it."""
        return self.session.execute(_AGENT, {"id": agent_id}).first()

    def run_agent(self, scope: Scope) -> tuple[Row[Any] | None, bool]:
        """The scope's agent record (``agent``) and whether the scope has open review items,
        in one statement."""
        row = self.session.execute(_RUN_AGENT, {"id": scope.agent_id, "scope": scope.key}).one()
        return (row if row.id is not None else None), bool(row.open_items)


def _aware(value: Any) -> datetime | None:
    """An aggregate over a CASE loses the column type on some backends: parse and mark UTC."""
    if value is None or isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value
    return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)
