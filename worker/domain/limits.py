"""What every shell accepts as text, ids and numbers, so SQLite and PostgreSQL store the same thing.

SQLite stores a NUL character, an over-long id or a lone surrogate that PostgreSQL refuses (or that
no UTF-8 encoder can write); the CLI, the importers and the API check against these limits first.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from worker.domain.types import ERASED_USER, Scope
from worker.text.words import has_invisible, is_blank

ID_MAX = 64  # String(64) columns: note, run, session, entity and scope-part ids
SCOPE_KEY_MAX = 400  # String(400): the JSON scope key, with non-ASCII escaped as \uXXXX
INT_MAX = 2**31 - 1  # Integer columns are 32-bit on PostgreSQL
BIGINT_MAX = 2**63 - 1  # BigInteger ones (``notes.write_seq``) 64-bit
MAX_NESTING = 64  # JSON deeper than this is not a note, a session or an entity
# An imported note's text. Far above what one fact takes and what any judge's prompt holds
# (a cluster's texts are capped at a few thousand characters), far below what a runaway file
# would cost: a 4 MB note took 450 MB of memory to import. A host's remember has its own,
# smaller limit (DREAM_HOST__MAX_NOTE_CHARS).
NOTE_CHARS_MAX = 100_000
# A reason a person gives (a decline, a cancel): one line every run list and dashboard row shows.
REASON_MAX = 500


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text on both backends, or None."""
    if "\x00" in value:
        return "contains a NUL character"
    if value.isascii():
        return None
    try:
        value.encode("utf-8")  # C speed; fails exactly on lone surrogates
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate, e.g. from invalid UTF-8 or a broken \\ud800 escape)"
    return None


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def json_text_problem(value: Any) -> str | None:
    """Which string of a decoded JSON value (a key or a value, at any depth) cannot be stored
    as text, and why (``text_problem``), or None: ``content is not valid Unicode (...)``,
    ``scope.user_id contains a NUL character``, ``a key of source_versions ...``. What an API
    body and a model's reply are checked with, so the one line names the field to fix (a
    ``"\\ud800"`` escape decodes to a lone surrogate, which no UTF-8 encoder writes). A key
    that is no plain name (it may be anything the sender wrote) is shown as ``<key>``."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            if problem := text_problem(item):
                return f"{at or 'the value'} {problem}"
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                if isinstance(key, str) and (problem := text_problem(key)):
                    return f"a key{' of ' + at if at else ''} {problem}"
                shown_key = key if isinstance(key, str) and _PLAIN_KEY.fullmatch(key) else "<key>"
                children.append((child, f"{at}.{shown_key}" if at else shown_key))
            stack.extend(reversed(children))  # the first field named first, as it was sent
        elif isinstance(item, list):
            stack.extend(reversed([(child, f"{at}.{i}" if at else str(i))
                                   for i, child in enumerate(item)]))
    return None


# What a field with nothing to read is told (a note's content, an example's input, a reason,
# a name, an id): it would show as nothing to whoever reads it, a person or a model.
NOTHING_VISIBLE = ("has no visible text (only whitespace or invisible characters such as "
                   "zero-width spaces)")


def visible_problem(value: str) -> str | None:
    """Why ``value`` cannot be text someone reads (nothing visible in it, or not storable)."""
    if is_blank(value):
        return NOTHING_VISIBLE
    return text_problem(value)


# What breaks a line or steers a terminal: C0 and C1 controls (a tab, a line feed, an escape
# sequence's ESC, NEL) and the Unicode line and paragraph separators (str.splitlines breaks there).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _has_control(value: str) -> bool:
    # (printable ASCII holds none of them: the common value skips the scan)
    return not (value.isascii() and value.isprintable()) and _CONTROL.search(value) is not None


# Bidi embeddings, overrides and isolates: each reorders what follows it on the line, the
# listing's columns after a reason included ("\u202e" prints "deliver" as "reviled").
_REORDER = re.compile("[\u202a-\u202e\u2066-\u2069]")


def line_problem(value: str) -> str | None:
    """Why ``value`` cannot be one line of a listing (a decline's or a cancel's reason, shown on
    one line by `dream review list`, the dashboards and every run row), or None: a line break
    or another control character would print lines that are not there."""
    if _has_control(value):
        return "has a line break or control character; give it on one line"
    return reorder_problem(value)


def reorder_problem(value: str) -> str | None:
    """Why ``value`` would print its line out of order (a bidi override), or None."""
    if not value.isascii() and _REORDER.search(value):
        return ("has a bidi override or isolate (U+202A–U+202E, U+2066–U+2069), which "
                "reorders the rest of the line; give it without")
    return None


_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def shown(value: str) -> str:
    """``value`` as one line of a terminal listing, as it is but for what would not show as
    written: line breaks, control characters (an escape sequence's ESC) and bidi overrides,
    each written as its escape (``\\n``, ``\\x1b``, ``\\u202e``). Note text and a model's reasons
    reach `dream review show` and `dream runs show`: a line break there printed a line that is
    not there ("note n9 v1 active: ..."), an escape sequence could rewrite the screen."""
    if value.isascii() and value.isprintable():
        return value
    return _UNSHOWN.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), value)


def json_syntax_problem(exc: json.JSONDecodeError) -> str:
    """``Expecting value at column 7``: the decoder's message with its column. Some messages
    already end in "at" ("Invalid control character at"), which must not be doubled. Python's
    advice for a byte-order mark ("decode using utf-8-sig") is for programmers."""
    if exc.msg.startswith("Unexpected UTF-8 BOM"):
        return "a byte-order mark (U+FEFF) before the JSON; save the file as UTF-8 without BOM"
    return f"{exc.msg.removesuffix(' at')} at column {exc.colno}"


class DuplicateKey(Exception):
    """A JSON object names one key twice (``unique_keys``); the argument is the key."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A ``json.loads`` object hook refusing a key given twice: json keeps the last value
    silently, so `{"agent_id": "a", ..., "agent_id": "b"}` would import a note into the second
    scope, and a token listed twice in DREAM_API_TOKENS would get whichever grant came last."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return obj


def ident_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id or a scope part, or None."""
    return stored_ident_problem(value) or _lookalike_problem(value)


def stored_ident_problem(value: str) -> str | None:
    """Why ``value`` cannot name an id as stored, or None: ``ident_problem`` without the
    look-alike rule, for erasure, which must reach an id stored before that rule existed."""
    if not value.strip():
        return "must be a non-empty string"
    # (printable ASCII with a non-space character shows: the common id skips the scan)
    if not (value.isascii() and value.isprintable()) and is_blank(value):
        return "has no visible character (only invisible ones such as zero-width spaces)"
    if len(value) > ID_MAX:
        return f"has {len(value)} characters; ids are at most {ID_MAX}"
    if problem := text_problem(value):  # (a NUL is named as such)
        return problem
    if _has_control(value):
        # Every list, log line and dashboard row prints ids: a line feed or an escape sequence
        # in one would show lines or colours that are not there (a forged "approved" line).
        return "has a line break or control character (tab, escape, …); an id is one line"
    return None


def _lookalike_problem(value: str) -> str | None:
    # An id that prints like another is another scope, note or user all the same: "alice " or
    # "alice\u200b" would be a second tenant that every listing shows as alice, and a bidi
    # override ("\u202e") prints the id reversed.
    if value != value.strip():
        return "starts or ends with whitespace; give the id without it"
    if has_invisible(value):
        return ("has an invisible character (zero-width, bidi override, filler, …) that would "
                "print it like another id; give the id without it")
    if not value.isascii() and not unicodedata.is_normalized("NFC", value):
        # "José" typed on one system and "Jose\u0301" sent by another: two tenants, one name.
        return ("is not in Unicode normal form C (a letter and a combining accent where one "
                "accented letter prints the same); send it NFC-normalised")
    return None


def user_problem(value: str, ident: Callable[[str], str | None] = ident_problem) -> str | None:
    """Why ``value`` cannot be a user id, or None: an id (by ``ident``), and not the placeholder
    the runs of erased users are kept under (a user of that name would share their scope: its
    gate would read their dreams, its token their runs)."""
    if value == ERASED_USER:
        return f"{ERASED_USER} is reserved for the runs kept of erased users"
    return ident(value)


def scope_problem(scope: Scope) -> str | None:
    """Why ``scope`` cannot be stored (each part an id, the whole key within its column), or None."""
    for name, part, check in (("agent_id", scope.agent_id, ident_problem),
                              ("user_id", scope.user_id, user_problem),
                              ("company_id", scope.company_id, ident_problem)):
        if part is not None and (problem := check(part)):
            return f"{name} {problem}"
    if len(scope.key) > SCOPE_KEY_MAX:
        return (f"the scope key is {len(scope.key)} characters once encoded; the limit is "
                f"{SCOPE_KEY_MAX} (non-ASCII characters count six each)")
    return None


def nesting_depth(value: Any, limit: int = MAX_NESTING) -> int:
    """Depth of nested lists/objects, counted only up to ``limit + 1`` (iterative: no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return deepest
