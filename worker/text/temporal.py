"""Relative time in note text: expressions a stored note must not keep ("yesterday", "last week",
"3 days ago", a bare weekday), and the dates a source's relative time may resolve to."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from datetime import timedelta

from worker.domain.types import Note

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_PERIODS = ("week|weekend|month|year|night|morning|afternoon|evening|quarter|spring|summer|"
            "autumn|fall|winter|" + "|".join(_WEEKDAYS))
_AMOUNT = (r"\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|few|"
           r"several|a couple of|couple of|some")
_UNIT = r"(?:second|minute|hour|day|week|month|year)s?"

# Each alternative is relative to when the text was written, so it changes meaning once the
# text is stored under a new date (a fused note is created today).
_RELATIVE = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|recently|lately|nowadays|the other day)\b"
    rf"|\b(?:last|next|this|coming|past|previous)\s+(?:{_PERIODS})\b"
    rf"|\b(?:{_AMOUNT})\s+{_UNIT}\s+(?:ago|from now)\b"
    rf"|\bin\s+(?:{_AMOUNT})\s+{_UNIT}\b"
    r"|\b\w+\s+ago\b",
    re.IGNORECASE,
)
# A weekday names a date only next to one ("Friday 2026-05-08", "Friday, May 8"); after "every"
# or "each", or as a plural ("on Mondays"), it is a recurring schedule, not a relative date.
_DAY_NAMES = "|".join(_WEEKDAYS)
_MONTH_NAMES = "|".join(_MONTHS)
_WEEKDAY = re.compile(rf"\b(?<!every )(?<!each )(?:{_DAY_NAMES})\b", re.IGNORECASE)
_DATE_NEAR = re.compile(
    rf"\d{{4}}-\d{{2}}-\d{{2}}|\b(?:{_MONTH_NAMES})\s+\d{{1,2}}\b"
    rf"|\b\d{{1,2}}\s+(?:{_MONTH_NAMES})\b", re.IGNORECASE)

# Anything that hints at time relative to the note's own date, for allowed_dates (broad on
# purpose: it only widens what a fusion may write, to dates near the source's creation).
_HINT = re.compile(
    r"\b(yesterday|today|tomorrow|tonight|recently|last|next|this|ago|weeks?|months?|"
    rf"days?|earlier|lately|previous|{_DAY_NAMES})\b", re.IGNORECASE)


# A word one of the patterns above must contain (every weekday ends in "day"): an ASCII text
# holding none of them has no relative time, which spares most texts both searches.
_NEEDED = ("day", "tonight", "tomorrow", "recently", "lately", "ago", "last", "next", "this",
           "coming", "past", "previous", "second", "minute", "hour", "week", "month", "year")


def relative_time_expressions(text: str) -> list[str]:
    """Relative time expressions in ``text`` (casefolded, in order); empty: all time is absolute."""
    if text.isascii():  # (a non-ASCII letter may match an ASCII one when case is ignored)
        low = text.lower()
        if not any(word in low for word in _NEEDED):
            return []
    found = [m.group(0).casefold() for m in _RELATIVE.finditer(text)]
    for m in _WEEKDAY.finditer(text):
        window = text[max(0, m.start() - 25): m.end() + 25]
        if not _DATE_NEAR.search(window):
            found.append(m.group(0).casefold())
    return list(dict.fromkeys(found))


def allowed_dates(sources: Sequence[Note]) -> set[str]:
    """Date parts a fusion may add: what a source's relative time ("last week") can resolve to."""
    out: set[str] = set()
    for n in sources:
        if n.created_at is None or not _HINT.search(n.content):
            continue
        for back in range(-7, 32):
            d = (n.created_at - timedelta(days=back)).date()
            out.update({d.isoformat(), str(d.year), str(d.day), f"{d.day:02d}", f"{d.month:02d}",
                        f"{d.year}-{d.month:02d}", _MONTHS[d.month - 1], _WEEKDAYS[d.weekday()]})
    return out


def allowed_dates_lazily(sources: Sequence[Note]) -> Iterator[str]:
    """``allowed_dates``, worked out only when a check iterates it: ``check_fusion`` does so
    only for a fusion with a word no source holds, and most have none."""
    yield from allowed_dates(sources)
