"""JSON as prompts show it (``json.dumps(value, ensure_ascii=False, indent=1)``), written faster.

With ``indent`` the standard library formats in pure Python, one generator frame per value; a
prompt puts every note of a cluster or topic through it. This writes the same text, byte for
byte, with the C string encoder for every key and string; any value it does not know (a key that
is not a string, an object the encoder would reject or convert) goes to ``json.dumps`` whole.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring  # the C encoder where there is one
from typing import Any

_INFINITY = float("inf")


class _Unusual(Exception):
    """A value this module leaves to json.dumps."""


def dumps_indented(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, indent=1)``."""
    parts: list[str] = []
    try:
        _write(value, parts, "\n")
    except _Unusual:
        return json.dumps(value, ensure_ascii=False, indent=1)
    return "".join(parts)


def _write(value: Any, out: list[str], newline: str) -> None:
    """``newline``: a line break and the indentation of the line ``value`` is on."""
    if isinstance(value, str):
        out.append(encode_basestring(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, dict):
        _write_dict(value, out, newline)
    elif isinstance(value, list | tuple):
        _write_list(value, out, newline)
    else:
        raise _Unusual


def _write_dict(value: dict[Any, Any], out: list[str], newline: str) -> None:
    if not value:
        out.append("{}")
        return
    inner = newline + " "
    out.append("{" + inner)
    first = True
    for key, item in value.items():
        if not isinstance(key, str):
            raise _Unusual  # json.dumps turns numbers and None into strings: its own rules
        if not first:
            out.append("," + inner)
        first = False
        out.append(encode_basestring(key))
        out.append(": ")
        _write(item, out, inner)
    out.append(newline + "}")


def _write_list(value: list[Any] | tuple[Any, ...], out: list[str], newline: str) -> None:
    if not value:
        out.append("[]")
        return
    inner = newline + " "
    out.append("[" + inner)
    for i, item in enumerate(value):
        if i:
            out.append("," + inner)
        _write(item, out, inner)
    out.append(newline + "]")


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value == _INFINITY:
        return "Infinity"
    if value == -_INFINITY:
        return "-Infinity"
    return float.__repr__(value)
