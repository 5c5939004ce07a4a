"""Error messages without note text (R21).

An exception raised inside a phase can quote note text (a database error echoing a row, a model
client quoting the prompt, a bug formatting a note into a message). Before such a message is
logged or stored on a step, every word it shares with a note of the scope is masked, and the
traceback is logged as frames (file, line, function) only, never with the message.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable
from typing import Any

import structlog

from worker.errors import DreamError

log = structlog.get_logger(__name__)

_WORD = re.compile(r"\w+", re.UNICODE)
MASK = "[note text]"
MAX_MESSAGE = 200


def _maskable(word: str) -> bool:
    # Words of one or two letters say nothing about a note; numbers always may.
    return len(word) >= 3 or any(ch.isdigit() for ch in word)


def scrub(message: str, texts: Iterable[str]) -> str:
    """``message`` with each word that also occurs in one of ``texts`` masked (runs collapse)."""
    words = {m.group(0).casefold() for m in _WORD.finditer(message) if _maskable(m.group(0))}
    found: set[str] = set()
    for text in texts:
        if not words - found:
            break
        found |= words & {w.casefold() for w in _WORD.findall(text)}
    if not found:
        return message
    out: list[str] = []
    last = 0
    for m in _WORD.finditer(message):
        if m.group(0).casefold() not in found:
            continue
        gap = message[last : m.start()]
        if out and out[-1] == MASK and not gap.strip():
            last = m.end()  # "[note text] [note text]" reads as one
            continue
        out.extend([gap, MASK])
        last = m.end()
    out.append(message[last:])
    return "".join(out)


def safe_error_message(app: Any, scope: Any, exc: BaseException) -> str:
    """The first line of ``str(exc)``, scrubbed of the scope's note text, at most 200 chars;
    word for word for an error whose class says its messages carry none (a misconfigured or
    unreachable endpoint's remedy, e.g. "check DREAM_EMBEDDING_BASE_URL and ...").

    If the scope's text cannot be read (the database is the problem), the message is withheld.
    """
    text = str(exc)
    if not text:
        return ""
    first = text.splitlines()[0]
    if isinstance(exc, DreamError) and exc.says_no_note_text:
        return first[:MAX_MESSAGE]
    try:
        with app.uow() as uow:
            return scrub(first, uow.notes.contents(scope))[:MAX_MESSAGE]
    except Exception:  # noqa: BLE001 — the failure path must not fail; say less instead
        return "(message withheld: note text could not be checked)"


def stack(exc: BaseException, limit: int = 12) -> list[str]:
    """The innermost ``limit`` frames of the traceback as "file:line in function" (no message)."""
    frames = traceback.extract_tb(exc.__traceback__)[-limit:]
    return [f"{f.filename.rsplit('/worker/', 1)[-1]}:{f.lineno} in {f.name}" for f in frames]
