"""Error messages without note text (R21).

An exception raised inside a phase can quote note text (a database error echoing a row, a model
client quoting the prompt, a bug formatting a note into a message). Before such a message is
logged or stored on a step, whatever in it quotes a note of the scope is masked (``scrub``:
not each word a note merely shares), and the traceback is logged as frames (file, line,
function) only, never with the message.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable
from typing import Any

import structlog

from worker.errors import DreamError
from worker.text.words import NEGATORS, STOPWORDS

log = structlog.get_logger(__name__)

_WORD = re.compile(r"\w+", re.UNICODE)
MASK = "[note text]"
MAX_MESSAGE = 200
_FUNCTION_WORDS = STOPWORDS | NEGATORS


def _telling(word: str) -> bool:
    """A word that says something about a note: one holding a digit (a number, a code: any
    length), or one of three letters or more that is no function word ("the", "does", "not")."""
    if any(ch.isdigit() for ch in word):
        return True
    return len(word) >= 3 and word not in _FUNCTION_WORDS


def _name_like(message: str, match: re.Match[str]) -> bool:
    """A word written as a name is: capitalised inside a sentence ("district Alexanderplatz",
    not the "Connection" opening "Connection refused" nor an all-capitals "FATAL"), or holding
    a letter beyond ASCII ("Zoëlla"), of four letters or more. Alone it still says whom or where a
    note is about, where a common word does not."""
    word = match.group(0)
    if len(word) < 4 or word.isupper():
        return False
    if any(ord(ch) > 127 and ch.isalpha() for ch in word):
        return True
    before = message[: match.start()].rstrip()
    return word[0].isupper() and bool(before) and before[-1] not in ".:;!?"


def scrub(message: str, texts: Iterable[str]) -> str:
    """``message`` with what quotes one of ``texts`` masked (runs collapse).

    A quote is a run of the message's words standing in a note in the same order that holds a
    number, two telling words (``_telling``), a word written as a name (``_name_like``), or the
    whole of that note (if it says anything: a one-word note "Kreuzberg" is masked wherever it
    recurs). A common word a note merely shares is no quote: in a real store every common word
    is in some note, and masking each one mangled a driver's own message ("server closed [note
    text] connection unexpectedly"), as erasure once matched a one-word note inside unrelated
    records."""
    matches = list(_WORD.finditer(message))
    words = [m.group(0).casefold() for m in matches]
    names = {i for i, m in enumerate(matches) if _name_like(message, m)}
    wanted = {w for w in words if _telling(w)}
    hidden = [False] * len(words)
    for text in texts:
        note = [w.casefold() for w in _WORD.findall(text)]
        if not wanted.isdisjoint(note):
            _hide_quotes(words, note, hidden, names)
    if not any(hidden):
        return message
    out: list[str] = []
    last = 0
    for i, m in enumerate(_WORD.finditer(message)):
        if not hidden[i]:
            continue
        gap = message[last : m.start()]
        if out and out[-1] == MASK and not gap.strip():
            last = m.end()  # "[note text] [note text]" reads as one
            continue
        out.extend([gap, MASK])
        last = m.end()
    out.append(message[last:])
    return "".join(out)


def _hide_quotes(words: list[str], note: list[str], hidden: list[bool],
                 names: set[int]) -> None:
    """Mark in ``hidden`` each word of ``words`` inside a quote of ``note``: every maximal run
    of words the two share in order, kept when it is a quote (``scrub``; ``names``: the
    positions of the message's words written as names)."""
    at: dict[str, list[int]] = {}
    for j, w in enumerate(note):
        at.setdefault(w, []).append(j)
    for i, w in enumerate(words):
        for j in at.get(w, ()):
            if i and j and words[i - 1] == note[j - 1]:
                continue  # inside a run met from its start
            n = 1
            while i + n < len(words) and j + n < len(note) and words[i + n] == note[j + n]:
                n += 1
            run = words[i : i + n]
            telling = [x for x in run if _telling(x)]
            if (len(telling) >= 2 or any(ch.isdigit() for x in telling for ch in x)
                    or (telling and n == len(note)) or not names.isdisjoint(range(i, i + n))):
                hidden[i : i + n] = [True] * n


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
