"""Per-field checks for one import line: ids, scope, text, choices, timestamps, numbers;
each refusal is an InputError naming the line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from worker.clock import parse_timestamp
from worker.domain.limits import (
    BIGINT_MAX,
    ident_problem,
    scope_problem,
    visible_problem,
)
from worker.domain.types import Scope
from worker.ingest.jsonl import InputError


def unknown_fields(obj: dict[str, Any], allowed: set[str], number: int) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise InputError(f"line {number}: unknown field {unknown[0]!r}; allowed: "
                         f"{', '.join(sorted(allowed))}")


def opt_str(obj: dict[str, Any], key: str, number: int) -> str | None:
    """An id: a non-empty string (or a whole number, taken as its digits) that fits the column."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise InputError(f"line {number}: {key} must be a non-empty string")
    text = str(value)
    if problem := ident_problem(text):
        raise InputError(f"line {number}: {key} {problem}")
    return text


def opt_text(obj: dict[str, Any], key: str, number: int, max_chars: int) -> str | None:
    """Optional text someone reads (a name, a reason): absent or null, or something visible."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"line {number}: {key} must be a string")
    if problem := visible_problem(value):
        raise InputError(f"line {number}: {key} {problem}; leave it out (or null) when there "
                         "is none")
    if len(value) > max_chars:
        raise InputError(f"line {number}: {key} has {len(value)} characters; the limit is {max_chars}")
    return value


def choice(obj: dict[str, Any], key: str, choices: Iterable[str], default: str,
            number: int) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"line {number}: {key} must be one of {', '.join(sorted(choices))}")
    return value


def parse_scope(obj: dict[str, Any], number: int) -> Scope:
    agent_id = opt_str(obj, "agent_id", number)
    if agent_id is None:
        raise InputError(f"line {number}: agent_id is required")
    scope = Scope(agent_id, opt_str(obj, "user_id", number), opt_str(obj, "company_id", number))
    if problem := scope_problem(scope):
        raise InputError(f"line {number}: {problem}")
    return scope


def opt_time(obj: dict[str, Any], key: str, number: int) -> datetime | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"line {number}: {key} must be an ISO-8601 string")
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise InputError(f"line {number}: {key}: {exc}") from None


def opt_number(obj: dict[str, Any], key: str, number: int, default: float,
                lo: float | None = None, hi: float | None = None) -> float:
    value = obj.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"line {number}: {key} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"line {number}: {key} must be a finite number")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise InputError(f"line {number}: {key} must be between {lo} and {hi}")
    return value


def seq_value(value: object, number: int, where: str = "", hint: str = "") -> int | None:
    """A recorded order (``notes.write_seq``, as an export writes it): null, or a whole number
    the column holds; ``where`` prefixes the field's name in the error, ``hint`` ends it."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= BIGINT_MAX:
        raise InputError(f"line {number}: {where}write_seq must be a whole number from 0 to "
                         f"{BIGINT_MAX}, or left out{hint}")
    return value
