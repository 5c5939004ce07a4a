"""UTCDateTime on SQLite: its one-step bind processor stores exactly what the chained
TypeDecorator + SQLite DATETIME processors stored, and round-trips through a real database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Column, Integer, MetaData, Table, create_engine, insert, select, text
from sqlalchemy.dialects import sqlite
from sqlalchemy.types import TypeDecorator

from worker.store.types import UTCDateTime

DIALECT = sqlite.dialect()
ZONES = st.one_of(
    st.none(), st.just(UTC),
    st.builds(timezone, st.integers(-14 * 60, 14 * 60).map(lambda m: timedelta(minutes=m))),
)
# hypothesis's overloads of datetimes() omit naive bounds with a zone-or-None strategy, which
# it accepts at run time (its implementation's signature).
MOMENTS = st.datetimes(min_value=datetime(1900, 1, 2), max_value=datetime(2200, 1, 1),
                       timezones=ZONES)  # type: ignore[arg-type]


def _chained_bind(value: datetime | None) -> object:
    """What SQLAlchemy's generic chaining wrote: process_bind_param, then SQLite's DATETIME."""
    impl = UTCDateTime().dialect_impl(DIALECT)
    assert isinstance(impl, UTCDateTime)
    process = TypeDecorator.bind_processor(impl, DIALECT)
    assert process is not None
    return process(value)


@pytest.mark.unit
@given(MOMENTS)
def test_sqlite_bind_writes_the_text_the_chained_processors_wrote(moment: datetime) -> None:
    """Naive (taken as UTC), UTC and offset moments are stored as the same naive UTC text."""
    process = UTCDateTime().dialect_impl(DIALECT).bind_processor(DIALECT)
    assert process is not None
    assert process(moment) == _chained_bind(moment)


@pytest.mark.unit
@given(st.lists(st.sampled_from(range(4)), min_size=1, max_size=30),
       st.lists(MOMENTS, min_size=4, max_size=4))
def test_one_processor_binding_moments_in_any_order_writes_each_ones_text(
        picks: list[int], moments: list[datetime]) -> None:
    """The processor remembers the last moment it bound (a write's rows share one): moments
    bound again, after others, or equal to another but in another zone each get their own text."""
    process = UTCDateTime().dialect_impl(DIALECT).bind_processor(DIALECT)
    assert process is not None
    assert [process(moments[k]) for k in picks] == [_chained_bind(moments[k]) for k in picks]


@pytest.mark.unit
def test_none_stays_none() -> None:
    """A NULL column binds as None."""
    bind = UTCDateTime().dialect_impl(DIALECT).bind_processor(DIALECT)
    assert bind is not None and bind(None) is None


def test_round_trip_through_sqlite() -> None:
    """The column holds SQLite's DATETIME text (microseconds always written) and reads back
    the same instant as aware UTC."""
    table = Table("t", MetaData(), Column("id", Integer, primary_key=True),
                  Column("at", UTCDateTime()))
    engine = create_engine("sqlite://")
    table.metadata.create_all(engine)
    plus_two = timezone(timedelta(hours=2))
    moments = [datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC), datetime(2026, 3, 4, 7, 6, 7, 89,
                                                                  tzinfo=plus_two),
               datetime(2026, 3, 4, 5, 6, 7)]
    with engine.begin() as conn:
        conn.execute(insert(table), [{"id": k, "at": m} for k, m in enumerate(moments)])
        stored = conn.execute(text("SELECT at FROM t ORDER BY id")).scalars().all()
        read = conn.execute(select(table.c.at).order_by(table.c.id)).scalars().all()
    assert stored == ["2026-03-04 05:06:07.000000", "2026-03-04 05:06:07.000089",
                      "2026-03-04 05:06:07.000000"]
    assert read == [datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC),
                    datetime(2026, 3, 4, 5, 6, 7, 89, tzinfo=UTC),
                    datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)]
    assert all(m.tzinfo is UTC for m in read)
