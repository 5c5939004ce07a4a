"""Reading a JSONL import: strict UTF-8 and JSON, finite numbers, bounded nesting, no NUL or
lone surrogate; the shared error and result types.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from worker.domain.limits import (
    MAX_NESTING,
    DuplicateKey,
    json_syntax_problem,
    nesting_depth,
    text_problem,
    unique_keys,
)
from worker.errors import InvalidInput


class InputError(InvalidInput):
    """Bad user input; the message is one line naming what and where."""


@dataclass
class ImportResult:
    read: int = 0
    inserted: int = 0
    duplicates: int = 0
    # Stored notes an already-present line said again later: dated at it (``note_again``).
    restated: int = 0
    # Stored sessions without an end whose end a line gave: recorded (``import_sessions``).
    ended: int = 0
    # Lines imported as given whose values do nothing as the settings stand, one line each.
    warnings: list[str] = dataclasses.field(default_factory=list)


class _NotFinite(Exception):
    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal


# What a line that is not an object holds, in JSON's words (not Python's NoneType, list, str).
_JSON_KINDS: dict[type, str] = {list: "an array", str: "a string", int: "a number",
                                float: "a number", bool: "a boolean", type(None): "null"}


def _refuse_constant(literal: str) -> float:
    raise _NotFinite(literal)  # NaN, Infinity, -Infinity: valid to Python's json, not to JSON


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e400 parses as inf
        raise _NotFinite(literal)
    return value


def _decoded(lines: Iterable[str | bytes]) -> Iterator[tuple[int, str]]:
    """Number each line and decode bytes as strict UTF-8, naming the line that is not; a
    byte-order mark that starts the input (Windows editors write one) is not part of it."""
    number = 0
    iterator = iter(lines)
    while True:
        number += 1
        try:
            line = next(iterator)
        except StopIteration:
            return
        except UnicodeDecodeError:  # a text stream (stdin) decoding as it reads
            raise InputError(f"line {number}: not valid UTF-8; save the file as UTF-8") from None
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"line {number}: not valid UTF-8; save the file as UTF-8") from None
        yield number, (line.removeprefix("\ufeff") if number == 1 else line)


def read_jsonl(lines: Iterable[str | bytes]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object); refuse what either backend could not store the same way."""
    for number, line in _decoded(lines):
        if not line.strip():
            continue
        try:  # without its line break, or an unfinished object's error points at "column 1"
            obj = json.loads(line.rstrip("\r\n"), parse_constant=_refuse_constant,
                             parse_float=_finite_float, object_pairs_hook=unique_keys)
        except json.JSONDecodeError as exc:
            raise InputError(f"line {number}: not valid JSON ({json_syntax_problem(exc)})") from None
        except DuplicateKey as exc:
            raise InputError(f"line {number}: key {str(exc)[:64]!r} appears twice in one object; "
                             "keep one") from None
        except _NotFinite as exc:
            raise InputError(f"line {number}: {exc.literal[:20]} is not a finite number") from None
        except RecursionError:
            raise InputError(f"line {number}: nested more than {MAX_NESTING} levels deep") from None
        except ValueError:  # an integer literal longer than Python's 4300-digit limit
            raise InputError(f"line {number}: a number is too large") from None
        if not isinstance(obj, dict):
            raise InputError(f"line {number}: expected a JSON object {{...}}, got "
                             f"{_JSON_KINDS.get(type(obj), type(obj).__name__)}")
        if nesting_depth(obj) > MAX_NESTING:
            raise InputError(f"line {number}: nested more than {MAX_NESTING} levels deep")
        _check_text(obj, number)
        yield number, obj


def _check_text(obj: dict[str, Any], number: int) -> None:
    """Every key and string value, at any depth: no NUL (PostgreSQL refuses it), no lone
    surrogate (no UTF-8 encoder can write it). Named by top-level field, never quoted."""
    for field, value in obj.items():
        if problem := text_problem(field):
            raise InputError(f"line {number}: a field name {problem}")
        stack: list[Any] = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                if problem := text_problem(item):
                    raise InputError(f"line {number}: {field} {problem}")
            elif isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
