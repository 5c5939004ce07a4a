"""Whether an audit record names an erased note's id or quotes its text, and the record with
that taken out (what erasure scrubs; worker.store.repositories.safety)."""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(r"[\w-]+")


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _quoted(text: str, blob: str) -> bool:
    """``text`` occurs in ``blob`` not glued to a longer word: an erased note "tea" is quoted
    by "likes tea." but not by "steady" or "team" (which erasure must leave alone). Before a
    JSON escape (``\\n``, ``\\t``) a word may start."""
    start = blob.find(text)
    while start != -1:
        end = start + len(text)
        before = start == 0 or not _word(text[0]) or not _word(blob[start - 1]) \
            or blob[max(0, start - 2):start] in ("\\n", "\\t", "\\r")
        after = end == len(blob) or not _word(text[-1]) or not _word(blob[end])
        if before and after:
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
        self.needles = sorted({form for t in texts if t
                               for form in (t, json.dumps(t, ensure_ascii=False)[1:-1])})

    def mentions(self, value: Any) -> bool:
        if value is None:
            return False
        blob = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return (not self.token_ids.isdisjoint(_TOKEN.findall(blob))
                or any(i in blob for i in self.odd_ids)
                or any(_quoted(t, blob) for t in self.needles))

    def scrub(self, value: Any) -> Any:
        """``value`` with what names or quotes an erased note taken out: a field that is an
        erased id becomes None (a pointer at nothing), a string naming one has it replaced,
        one quoting its text becomes "[erased]"; dicts and lists field by field."""
        if not self.mentions(value):
            return value
        if isinstance(value, dict):
            out: Any = {k: self.scrub(v) for k, v in value.items()}
        elif isinstance(value, list):
            out = [self.scrub(v) for v in value]
        elif isinstance(value, str):
            if value in self.token_ids or value in self.odd_ids:
                return None
            out = self.unname(value)
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
