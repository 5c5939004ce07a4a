"""Whole-token reading of note text: URLs, e-mails, numbers (spelled-out ones as digits), words
reduced by a light stemmer, function words and negators marked. Pure; shared by every check."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from operator import attrgetter


class Kind(StrEnum):
    URL = "url"
    EMAIL = "email"
    NUMBER = "number"
    WORD = "word"
    BREAK = "break"  # punctuation or a conjunction that ends a clause


@dataclass(frozen=True)
class Token:
    kind: Kind
    surface: str  # as written (casefolded); what a warning or a re-ask names
    key: str  # what matching compares: a stem, digits, a URL or an address
    content: bool = False  # states something: must be grounded, can be omitted
    negator: bool = False  # opens a negated scope up to the end of its clause


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Function words a fusion may add to join facts ("User prefers X and Y, at night too"). Kept
# small on purpose: quantifiers (all, every, each, some, always, only) and every noun, verb and
# adjective carry facts and must come from a source.
STOPWORDS = _words("""
a an the this that these those there here it its it's they them their theirs he him his she
her hers we us our you your i me my who whom whose which what when where how why
user users user's
is are was were be been being am do does did done has have had having
will would shall should can could may might must
and or but so yet if than as because although though while whereas unless whether
of in on at to for from by with about into onto over under between through during via per
since until till before after within across around toward towards upon up out off
also too very just both either any such own same other
now then still currently etc
""")

# A negator flips the polarity of what follows it in its clause. Polarity verbs (stop, avoid,
# dislike...) are facts too, so they must be grounded as well as scoped.
NEGATORS = _words("""
no not never none nobody nothing nowhere neither nor without cannot instead except
n't don't doesn't didn't isn't aren't wasn't weren't hasn't haven't hadn't won't wouldn't
can't couldn't shouldn't mustn't
""")
_POLARITY_VERBS = _words("stop quit avoid dislike hate refuse")

# Words that end a clause, and with it a negator's scope: "never drinks coffee and prefers tea"
# negates the coffee only. "or"/"nor" continue the scope ("no coffee or tea").
_CLAUSE_WORDS = _words("and but however although though while whereas yet")

_UNITS = {w: i for i, w in enumerate([
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen"])}
_TENS = {w: 10 * (i + 2) for i, w in enumerate(
    ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"])}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
_PHRASE_STARTS = frozenset(_UNITS) | frozenset(_TENS)

_LINK = (r"(?P<url>https?://[^\s)\"'<>\]]+|www\.[^\s)\"'<>\]]+)"
         r"|(?P<email>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)")
_PLAIN_TOKEN = (
    # 3.12, 2026-05-04, 2pm, 5kg, and a minus sign that starts one: -18 is not 18
    r"(?P<number>(?:(?<![\w.\-\u2212])[-\u2212])?\d+(?:[.,:/-]\d+)*(?:[^\W\d_]{1,3}\b)?)"
    r"|(?P<word>[^\W\d_]+(?:['’][^\W\d_]+)*)"
    r"|(?P<break>[.;:!?,()\[\]{}\n\"]|\s[-–—]\s)"
)
_TOKEN = re.compile(f"{_LINK}|{_PLAIN_TOKEN}", re.IGNORECASE)
# A text with no "@", "://" or "www." holds no URL or address: the same matches without trying
# those two at every word (a quarter of the matching).
_PLAIN = re.compile(_PLAIN_TOKEN, re.IGNORECASE)
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+")


# Words repeat far more than notes do: a bounded memo of the pure function (a word alone, never
# a note's text) saves most of the suffix tests. A dict whose misses compute the stem: a hit is
# one C-level lookup (``map(stem, words)`` never enters Python), where ``lru_cache``'s wrapper
# cost 330 ns a word, a third of a note's word reading.
STEMS_MAX = 1 << 16


class _Stems(dict[str, str]):
    def __missing__(self, word: str) -> str:
        if len(self) >= STEMS_MAX:  # emptied when full: a scope's words come back at once
            self.clear()
        found = self[word] = _stem(word)
        return found


stem: Callable[[str], str] = _Stems().__getitem__


def _stem(word: str) -> str:
    """A light suffix stripper, applied the same way to sources and fused text.

    Plurals, -ing, -ed, a possessive and a final -e are removed ("use", "uses", "using", "used"
    → "us"; "preferred" → "prefer"), so a fusion may change a word's form, never the word. A stem
    that would lose its last vowel is left whole ("thing", "shed").
    """
    w = word.casefold()
    if "'" in w or "’" in w:
        w = w.replace("’", "'")
        if w.endswith("'s"):
            w = w[:-2]
        w = w.replace("'", "")
    if not w or w[-1] not in "sdge":  # every suffix stripped ends so: most words stop here
        return w
    return _strip_suffixes(w)


def _strip_suffixes(w: str) -> str:
    """``stem`` of a case-folded word without apostrophes that ends in s, d, g or e."""
    if len(w) <= 3:
        return w[:-1] if len(w) == 3 and w.endswith("e") else w
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and not w.endswith("eed"):
            base = w[: -len(suffix)]
            if len(base) >= 2 and any(c in "aeiouy" for c in base):
                w = base
                if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":
                    w = w[:-1]  # preferred → prefer, running → run
                break
    if w.endswith("e") and len(w) > 2:
        w = w[:-1]
    return w


_POLARITY_KEYS = frozenset(stem(w) for w in _POLARITY_VERBS)


# Control and invisible format characters (zero-width, bidi overrides, BOM, tag characters) can
# hide instructions from a human reviewer while a model still reads them; \t and \n are kept.
# So can variation selectors: 256 of them, one per byte, smuggle any text behind one visible
# emoji. A model loses nothing without them (they pick a glyph's form, not its meaning).
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\ufe00-\ufe0f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f\U000e0100-\U000e01ef]"
)


def strip_invisible(text: str) -> str:
    """``text`` without control/invisible characters: what a model is allowed to see (R14)."""
    if text.isascii() and text.isprintable():  # most notes: nothing the pattern matches
        return text
    return _INVISIBLE.sub("", text)


# Where invisible characters carry a message rather than shape one: two or more variation
# selectors in a row (one picks a glyph; a run is bytes), a byte-valued selector (not the
# emoji/text pair FE0E/FE0F) on an ASCII character, or tag characters other than one
# subdivision flag's (the black flag, up to six tag letters or digits, the cancel tag).
_SELECTOR = "[\ufe00-\ufe0f\U000e0100-\U000e01ef]"
_HIDDEN = re.compile(
    f"{_SELECTOR}{{2,}}|[\x00-\x7f][\ufe00-\ufe0d\U000e0100-\U000e01ef]|[\U000e0000-\U000e007f]")
_FLAG_TAGS = re.compile("\U0001f3f4[\U000e0030-\U000e0039\U000e0061-\U000e007a]{1,6}\U000e007f")


def hides_text(text: str) -> bool:
    """Whether ``text`` carries a message in characters nobody sees ("tea👍" followed by a run
    of variation selectors or tag characters spelling out an instruction); the model never
    reads them (``strip_invisible``), the note is flagged for a human (R14)."""
    if text.isascii():
        return False
    return _HIDDEN.search(_FLAG_TAGS.sub("", text)) is not None


# What else shows nothing on its own, kept for the model: Unicode's other default-ignorable
# code points (the Hangul fillers, the grapheme joiner, Khmer inherent vowels, Mongolian
# selectors, format controls of musical and shorthand notation) and the blank braille cell.
_BLANK_ALONE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\uffa0"
    "\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0080-\U000e0fff]"
)


def has_invisible(text: str) -> bool:
    """Whether ``text`` holds a character that shows as nothing (zero-width, a bidi override,
    a Hangul filler, ...): "alice\u200b" and "alice" print alike, "x\u202eyz" prints reversed."""
    if text.isascii() and text.isprintable():
        return False
    return _INVISIBLE.search(text) is not None or _BLANK_ALONE.search(text) is not None


def is_blank(text: str) -> bool:
    """Nothing to read once invisible characters and whitespace are gone ("\u200b\u200b",
    "\u3164", "\u2800"): no note, however it arrives."""
    return not _BLANK_ALONE.sub("", strip_invisible(text)).strip()


def _normal(text: str) -> str:
    return unicodedata.normalize("NFKC", strip_invisible(text))


def tokens(text: str) -> list[Token]:
    """The text's tokens in order, spelled-out numbers folded into one digit token each."""
    return list(_tokens(text))


# A fusion's sources are read again on every re-ask, and the date parts a source's relative
# time allows (allowed_dates) on every check: a bounded memo of whole texts. Tokens are frozen
# and mostly shared through _word's memo; 2,048 texts hold about 2 MB.
@lru_cache(maxsize=1 << 11)
def _tokens(text: str) -> tuple[Token, ...]:
    raw = _raw_tokens(_normal(text))
    # Most texts spell out no number: no word starts a phrase, and every token stays as it is.
    if _PHRASE_STARTS.isdisjoint(map(_SURFACE, raw)):
        return tuple(raw)
    return tuple(_fold_number_words(raw))


_KINDS = {kind.value: kind for kind in Kind}
_SURFACE = attrgetter("surface")


def _raw_tokens(text: str) -> list[Token]:
    if not text.isascii():
        return list(_matched_tokens(text))
    # Most notes: casefolding is lowering, lowering first moves no match (the pattern ignores
    # case), and ``findall`` hands every match's groups over in one C call.
    low, word = text.lower(), _word
    if "@" in low or "://" in low or "www." in low:
        return [word(w) if w else _other_token(url, email, number, brk)
                for url, email, number, w, brk in _TOKEN.findall(low)]
    return [word(w) if w else _other_token("", "", number, brk)
            for number, w, brk in _PLAIN.findall(low)]


def _other_token(url: str, email: str, number: str, brk: str) -> Token:
    """The token of an ASCII match that is not a word (its text already lowered); exactly one
    of the groups is non-empty, as each alternative matches at least one character."""
    if url:
        value = url.rstrip(".,;:!?")
        return Token(Kind.URL, value, value.rstrip("/"), content=True)
    if email:
        return Token(Kind.EMAIL, email, email, content=True)
    if number:
        digits = number.replace(",", "") if _THOUSANDS.fullmatch(number) else number
        return Token(Kind.NUMBER, number, digits, content=True)
    return Token(Kind.BREAK, brk.strip(), "")


def _matched_tokens(text: str) -> Iterator[Token]:
    word = _word
    for m in _TOKEN.finditer(text):
        group = m.lastgroup
        if group == "word":  # most tokens: tested first
            yield word(m.group(0).casefold())
            continue
        kind = _KINDS[group or "break"]
        value = m.group(0)
        if kind is Kind.URL:
            value = value.rstrip(".,;:!?").casefold()
            yield Token(kind, value, value.rstrip("/"), content=True)
        elif kind is Kind.EMAIL:
            value = value.casefold()
            yield Token(kind, value, value, content=True)
        elif kind is Kind.NUMBER:
            value = value.casefold().replace("\u2212", "-")
            digits = value.replace(",", "") if _THOUSANDS.fullmatch(value) else value
            yield Token(kind, value, digits, content=True)
        else:
            yield Token(kind, value.strip(), "")


# Words repeat across notes and checks: a bounded memo (a word's token is frozen).
@lru_cache(maxsize=1 << 14)
def _word(word: str) -> Token:
    plain = word.replace("’", "'")
    if plain in _CLAUSE_WORDS:
        return Token(Kind.BREAK, plain, "")
    key = stem(plain)
    if key in _POLARITY_KEYS:  # "stopped" is a fact to ground and a negator to scope
        return Token(Kind.WORD, plain, key, content=True, negator=True)
    if plain in NEGATORS or plain.endswith("n't"):
        return Token(Kind.WORD, plain, key, negator=True)
    return Token(Kind.WORD, plain, key, content=plain not in STOPWORDS)


def _fold_number_words(raw: list[Token]) -> Iterator[Token]:
    """"twenty five" / "three hundred" become one number token (25, 300) with its words."""
    k = 0
    while k < len(raw):
        if raw[k].kind is not Kind.WORD or raw[k].surface not in _PHRASE_STARTS:
            yield raw[k]  # the common case, and no phrase: one starts with a unit or a ten
            k += 1
            continue
        j, value = _number_phrase(raw, k)
        if j == k:
            yield raw[k]
            k += 1
            continue
        surface = " ".join(t.surface for t in raw[k:j])
        yield Token(Kind.NUMBER, surface, str(value), content=True)
        k = j


def _number_phrase(raw: list[Token], start: int) -> tuple[int, int]:
    """End index and value of the spelled-out number starting at ``start`` (end == start: none)."""
    total, group, k = 0, -1, start  # group: the part below a thousand; -1 before any word
    while k < len(raw) and raw[k].kind is Kind.WORD:
        w = raw[k].surface
        unit, tens = _UNITS.get(w), _TENS.get(w)
        value = unit if unit is not None else tens
        if group < 0 and value is not None:
            group = value
        elif group >= 20 and group % 10 == 0 and unit is not None and 0 < unit < 10:
            group += unit  # twenty five, three hundred twenty five
        elif group >= 100 and group % 100 == 0 and value:
            group += value  # three hundred twenty
        elif 0 < group < 100 and w == "hundred":
            group *= 100
        elif group > 0 and w in _SCALES and w != "hundred":
            total, group = total + group * _SCALES[w], -1
        else:
            break
        k += 1
    return (k, total + max(group, 0)) if k > start else (start, 0)
