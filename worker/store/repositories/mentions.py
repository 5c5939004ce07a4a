"""Whether an audit record names an erased note's id or quotes its text, and the record with
that taken out (what erasure scrubs; worker.store.repositories.safety)."""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(r"[\w-]+")
_WORDS = re.compile(r"\w+")
# A text of fewer words than this ("tea", "dark mode") is words that unrelated records share:
# it is quoted only where it stands alone (``_alone``). A longer text that recurs word for word
# is a quote wherever it stands.
SHORT_WORDS = 3
# What may stand right before / after a quoted text: quotation marks, brackets, a line break or
# tab (also as JSON writes them, ``\\n``), the JSON string's own quotes; punctuation that ends
# a sentence may come between the text and its closing mark ("tea." in quotes).
_OPENING = frozenset("\"'“‘«`([{\n\t")
_CLOSING = frozenset("\"'”’»`)]}\n\t")
_ENDING = frozenset(".,;:!?")
_ESCAPES = ("\\n", "\\t", "\\r")


def _short(text: str) -> bool:
    """Quoted only where it stands alone: fewer than ``SHORT_WORDS`` words, no digit or @, and
    not a name. A short text holding a digit or @ is an identifier (a phone number, an address,
    a code); one of two or more words each written capitalised ("John Smith", "Acme Corp") is a
    name. No unrelated record shares either, and no record may keep one once it is erased."""
    words = _WORDS.findall(text)
    if len(words) >= SHORT_WORDS or any(ch.isdigit() or ch == "@" for ch in text):
        return False
    return len(words) < 2 or not all(w[:1].isupper() for w in words)


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _as_words(text: str, blob: str, start: int) -> bool:
    """The occurrence at ``start`` is not glued to a longer word: an erased note "likes tea"
    is quoted by "he likes tea." but not by "unlikes teal". Before a JSON escape (``\\n``,
    ``\\t``) a word may start."""
    end = start + len(text)
    before = start == 0 or not _word(text[0]) or not _word(blob[start - 1]) \
        or blob[max(0, start - 2):start] in _ESCAPES
    after = end == len(blob) or not _word(text[-1]) or not _word(blob[end])
    return before and after


def _closes(blob: str, end: int) -> bool:
    # ``\\"``: a quotation mark inside a JSON string ('said "tea"' as JSON).
    return end == len(blob) or blob[end] in _CLOSING or blob[end:end + 2] in (*_ESCAPES, '\\"')


def _alone(text: str, blob: str, start: int) -> bool:
    """The occurrence at ``start`` is the whole of a value, or set off by quotation marks,
    brackets or line breaks: "tea" is quoted by ``{"content": "tea"}`` and by ``said "tea".``,
    not by "likes tea" nor "tea and coffee", which only share the word."""
    end = start + len(text)
    before = start == 0 or blob[start - 1] in _OPENING or blob[max(0, start - 2):start] in _ESCAPES
    after = _closes(blob, end) or (end < len(blob) and blob[end] in _ENDING
                                   and _closes(blob, end + 1))
    return before and after


def _quoted(text: str, blob: str, short: bool) -> bool:
    """``text`` occurs in ``blob`` as a quote of it: standing alone if ``short``, else as
    words (an erased note "tea" is never quoted by "steady" or "team")."""
    start = blob.find(text)
    while start != -1:
        if _alone(text, blob, start) if short else _as_words(text, blob, start):
            return True
        start = blob.find(text, start + 1)
    return False


class Mentions:
    """Whether a record names an erased note's id or quotes its text, and the id taken out."""

    def __init__(self, id_list: list[str], texts: list[str]) -> None:
        # An id counts as named only as a whole token: a short id ("n1") must not match inside
        # another id ("n12") or a word, which would scrub or mangle unrelated records. A token
        # set keeps this linear in the record's length however many notes are erased.
        self.token_ids = {i for i in id_list if _TOKEN.fullmatch(i)}
        self.odd_ids = [i for i in id_list if i not in self.token_ids]  # other characters
        # Records are compared as JSON text, where a quote or a newline in a note is escaped:
        # look for each text both as written and as JSON writes it.
        self.needles = sorted({(form, _short(t)) for t in texts if t
                               for form in (t, json.dumps(t, ensure_ascii=False)[1:-1])})

    def mentions(self, value: Any) -> bool:
        if value is None:
            return False
        blob = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return (not self.token_ids.isdisjoint(_TOKEN.findall(blob))
                or any(i in blob for i in self.odd_ids)
                or any(_quoted(t, blob, short) for t, short in self.needles))

    def scrub(self, value: Any) -> Any:
        """``value`` with what names or quotes an erased note taken out: a field that is an
        erased id becomes None (a pointer at nothing), a string naming one is cut after the
        name (``unsay``), one quoting its text becomes "[erased]"; dicts and lists field by
        field."""
        if not self.mentions(value):
            return value
        if isinstance(value, dict):
            out: Any = {k: self.scrub(v) for k, v in value.items()}
        elif isinstance(value, list):
            out = [self.scrub(v) for v in value]
        elif isinstance(value, str):
            if value in self.token_ids or value in self.odd_ids:
                return None
            out = self.unsay(value)
        else:
            out = None
        if self.mentions(out):  # still quoted after the ids came out: the whole value goes
            return "[erased]" if isinstance(out, str) else {"erased": True}
        return out

    def unname(self, value: str) -> str:
        value = _TOKEN.sub(lambda m: "[erased note]" if m.group(0) in self.token_ids
                           else m.group(0), value)
        for i in self.odd_ids:
            value = value.replace(i, "[erased note]")
        return value

    def unsay(self, value: str) -> str:
        """``value`` with every line that names an erased note cut right after the name. What
        follows the name is why ("superseded by X. <the judge's reason>", "Consolidated into
        X: <reason>"): it speaks of that note and may retell its text in other words, which
        no quote test catches. A line opened with a bracket keeps its closing one."""
        return "\n".join(self._unsay_line(line) for line in value.split("\n"))

    def _unsay_line(self, line: str) -> str:
        ends = [m.end() for m in _TOKEN.finditer(line) if m.group(0) in self.token_ids]
        ends += [at + len(i) for i in self.odd_ids if (at := line.find(i)) != -1]
        if not ends:
            return line
        kept = self.unname(line[:min(ends)])
        return kept + "]" if kept.lstrip().startswith("[") else kept
