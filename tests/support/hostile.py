"""Hypothesis strategies for hostile input (R31), shared by the CLI and the API fuzz tests.

Values a careless user or an attacker sends: NaN/Infinity/1e400, huge integers, lone surrogates,
NUL characters, ids one character too long, non-ASCII that overflows the escaped scope key,
timestamps that overflow once converted to UTC, deep nesting, invalid UTF-8 bytes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

HOSTILE_TEXT = [
    "", " ", "\x00", "a\x00b", "\ud800", "caf\udce9", "\udfff", "a" * 64, "a" * 65, "é" * 64,
    "NaN", "nan", "inf", "-inf", "Infinity", "1e400", "1e30", "-1", "0", "9" * 40, "1.5",
    "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2026-01-31T09:00:00Z",
    "31/02/2026", "-", "--", "--help-me", "a", "u", "n1", "n2", '["a",null,null]', '["a"]',
    "null", "\n", "line\nbreak", "x" * 5000, "'; DROP TABLE notes; --", "%s%n{0}", "\u202e",
    "../../../../etc/passwd", "🦜" * 20,
]

# Known ids of the seeded store, so some examples reach past "unknown id" into real work.
SEEDED_IDS = ["n1", "n2", "n3", "a", "u"]


def text_values() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(HOSTILE_TEXT), st.sampled_from(SEEDED_IDS),
                     st.text(max_size=30))


_ZONES = [None, UTC, *(timezone(timedelta(hours=h)) for h in (-14, -1, 1, 14))]


def timestamp_texts() -> st.SearchStrategy[str]:
    """ISO-8601 across Python's whole range, with offsets that push the ends past year 1 or
    9999 once converted to UTC, and the edge values spelled out."""
    return st.one_of(
        st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59),
                     timezones=st.sampled_from(_ZONES)).map(lambda d: d.isoformat()),
        st.sampled_from(["0001-01-01T00:00:00+01:00", "0001-01-01", "9999-12-31T23:59:59-01:00",
                         "9999-12-31", "1899-12-31T23:59:59Z", "1900-01-01T00:00:00Z",
                         "9998-12-31T23:59:59Z", "2026-02-30", "2026-01-01T25:00:00Z", "now"]),
        text_values(),
    )


def number_texts() -> st.SearchStrategy[str]:
    """Numbers as a user types them into an option: finite, not, huge, not a number at all."""
    return st.one_of(
        st.integers(min_value=-(10**40), max_value=10**40).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.sampled_from(["nan", "inf", "-inf", "1e400", "1e30", "0", "1", "0.5", "-0.0", "1_000"]),
        text_values(),
    )


def _json_scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(), st.booleans(),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.sampled_from([2**31, 2**31 - 1, 2**63, -(2**63) - 1, 10**20, 36_501]),
        st.floats(allow_nan=True, allow_infinity=True),
        text_values(), timestamp_texts(),
    )


def json_values() -> st.SearchStrategy[Any]:
    return st.recursive(_json_scalars(),
                        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                st.dictionaries(text_values(), inner, max_size=4)),
                        max_leaves=12)


def dumps(value: Any) -> str:
    """JSON as Python writes it, keeping NaN/Infinity (lone surrogates come out escaped)."""
    return json.dumps(value, allow_nan=True)


# Raw values Python's json reads but JSON forbids, or that no encoder can write back.
RAW_VALUES = ["NaN", "-Infinity", "1e400", "9" * 5000, '"\\ud800"', '"x\\udc00y"',
              "[" * 3000 + "]" * 3000, "[1e39, -1e400]", '"a\\u0000b"']


# The values that broke an importer or could: a short list, so each is tried often.
HOSTILE_JSON: list[Any] = [
    None, True, 0, -1, 2**31, 2**63, 10**30, 1e308, -0.0, float("nan"), float("inf"),
    "", "\x00", "x\udc00y", "\ud800", "a" * 65, "é" * 64, "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00", "x" * 5000, [], [None], {}, {"k": "\x00"}, ["\ud800"],
]


def hostile_json() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(HOSTILE_JSON), st.sampled_from(HOSTILE_JSON), json_values())


def mutated_lines(valid: dict[str, Any], fields: list[str]) -> st.SearchStrategy[str]:
    """A valid record with one field set to a hostile value (its own fields as often as all the
    others together; an unknown field now and then), or one value replaced in place by a raw
    literal (NaN, 1e400, a lone surrogate escape): the shapes that get past the first checks
    and reach the database."""
    field = st.one_of(st.sampled_from(list(valid)), st.sampled_from(fields))
    one = st.builds(lambda k, v: dumps({**valid, k: v}), field | text_values(), hostile_json())
    raw = st.builds(lambda k, literal: dumps({**valid, k: None}).replace(
        f"{dumps(k)}: null", f"{dumps(k)}: {literal}", 1), field, st.sampled_from(RAW_VALUES))
    return st.one_of(one, one, raw)


def jsonl_bodies(valid: dict[str, Any], fields: list[str]) -> st.SearchStrategy[bytes]:
    """A JSONL document: valid lines around one or two hostile ones (a mutated record, a JSON
    value that is not an object, a line that is not JSON), or bytes that are not UTF-8."""
    good = st.just(dumps(valid))
    bad = st.one_of(
        mutated_lines(valid, fields), mutated_lines(valid, fields), mutated_lines(valid, fields),
        json_values().map(dumps),
        st.sampled_from(["[" * 100_000, "{not json", "", "   ", "\ufeff{}", dumps(valid) * 2]),
    )
    # Valid lines around one hostile line: the hostile one is what the import must refuse.
    text = st.tuples(st.lists(good, max_size=2), bad, st.lists(st.one_of(good, bad), max_size=2)).map(
        lambda t: ("\n".join([*t[0], t[1], *t[2]]) + "\n").encode("utf-8", "surrogatepass"))
    raw = st.one_of(st.binary(max_size=64),
                    st.sampled_from([b"\xff\xfe{}\n", b'{"agent_id": "a", "content": "\xc3"}\n']))
    return st.one_of(text, text, raw)


def store_digest(app: Any) -> str:
    """Every row of every table, hashed: equal digests mean no row changed. (Vectors hashed as
    raw bytes: numpy's repr made a text dump the slowest part of a fuzz example.)"""
    import hashlib

    import numpy as np

    from worker.store.models import Base

    digest = hashlib.sha256()
    with app.engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            digest.update(table.name.encode())
            for row in conn.execute(table.select().order_by(*table.primary_key.columns)):
                for value in row:
                    raw = value.tobytes() if isinstance(value, np.ndarray) else repr(value).encode(
                        "utf-8", "backslashreplace")
                    digest.update(len(raw).to_bytes(8, "big") + raw)
    return digest.hexdigest()


def smuggled(message: str) -> str:
    """``message`` as invisible variation selectors, one per byte (the "emoji smuggling"
    encoding: bytes 0-15 → U+FE00-FE0F, 16-255 → U+E0100-E01EF); put it behind visible text."""
    return "".join(chr(0xFE00 + b) if b < 16 else chr(0xE0100 + b - 16)
                   for b in message.encode())
