"""Optional redaction of e-mail addresses, phone numbers and card numbers before text leaves."""

from __future__ import annotations

import re

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_CARD = re.compile(r"\b\d(?:[ -]?\d){12,18}\b")
_PHONE = re.compile(r"(?<!\w)\+?\d[\d ().-]{7,}\d(?!\w)")
# Dates and times look like phone numbers to _PHONE; they are facts the notes need, not PII.
_DATE_LIKE = re.compile(r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?|\d{1,2}[./]\d{1,2}[./]\d{2,4}")


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _mask_card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    return "[CARD]" if 13 <= len(digits) <= 19 and _luhn_ok(digits) else match.group(0)


def redact(text: str) -> str:
    text = _EMAIL.sub("[EMAIL]", text)
    text = _CARD.sub(_mask_card, text)
    return _PHONE.sub(_mask_phone, text)


def _mask_phone(match: re.Match[str]) -> str:
    value = match.group(0)
    return value if _DATE_LIKE.fullmatch(value.strip()) else "[PHONE]"


def outbound_text(text: str, *, redact_pii: bool) -> str:
    """Note text as it may leave the process (prompt or embedding request).

    Invisible/control characters are always stripped (R14); e-mail, phone and card numbers are
    masked when ``settings.privacy.redact`` is on. Phases call this on every note they send out.
    """
    from worker.safety.injection import strip_invisible

    text = strip_invisible(text)
    return redact(text) if redact_pii else text
