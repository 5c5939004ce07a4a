"""The prompts' JSON writer says exactly what json.dumps(ensure_ascii=False, indent=1) says."""

from __future__ import annotations

import json
import math
from enum import IntEnum, StrEnum
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.text.json_text import dumps_indented

pytestmark = pytest.mark.unit

_SCALARS = (st.none() | st.booleans() | st.integers() | st.text()
            | st.floats(allow_nan=True, allow_infinity=True))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30)


@given(_VALUES)
def test_the_same_text_as_json_dumps(value: Any) -> None:
    assert dumps_indented(value) == json.dumps(value, ensure_ascii=False, indent=1)


class Kind(StrEnum):
    FACT = "fact"


class Level(IntEnum):
    HIGH = 3


@pytest.mark.parametrize("value", [
    [{"alias": "n1", "content": "Prefers \u00e9t\u00e9 \"quoted\"\n\u2028tab\t", "score": 0.25}],
    {"kind": Kind.FACT, "level": Level.HIGH, "nested": {"empty": {}, "none": [], "x": -0.0}},
    {1: "a number key", None: "a null key"},  # json's own key rules: left to json.dumps
    {"when": math.inf, "what": -math.inf, "why": math.nan},
    ["a set is not JSON", {1, 2}],  # json.dumps raises: so does this
])
def test_notes_enums_odd_keys_and_refusals(value: Any) -> None:
    try:
        expected = json.dumps(value, ensure_ascii=False, indent=1)
    except TypeError:
        with pytest.raises(TypeError):
            dumps_indented(value)
        return
    assert dumps_indented(value) == expected
