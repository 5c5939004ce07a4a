"""The one outbound boundary (R29): every text sent to a model or an embedding endpoint passes here.

``App`` wraps whatever model client and embedder it is given in ``OutboundLLM`` /
``OutboundEmbedder`` (see worker/app.py), so a new phase or host path cannot forget to redact:
there is no other way out. With ``DREAM_PRIVACY__REDACT=true`` e-mail addresses, phone numbers
and Luhn-valid card numbers are masked; control/invisible characters never reach a model (R14).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from worker.config import Settings
from worker.llm.base import BatchItem, BatchRelease, BatchState, SubmissionLookup


class HasSettings(Protocol):
    """Whoever owns the client (the App): settings are read at call time, never copied."""

    settings: Settings

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_CARD = re.compile(r"\b\d(?:[ -]?\d){12,18}\b")
_PHONE = re.compile(r"(?<!\w)\+?\d[\d ().-]{7,}\d(?!\w)")
# Dates and times look like phone numbers to _PHONE; they are facts the notes need, not PII.
_DATE_LIKE = re.compile(r"\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?|\d{1,2}[./]\d{1,2}[./]\d{2,4}")

# (kind, original text) → what goes out instead.
Mask = Callable[[str, str], str]


def _plain_mask(kind: str, _value: str) -> str:
    return f"[{kind}]"


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


def redact(text: str, mask: Mask = _plain_mask) -> str:
    """``text`` with e-mail addresses, card numbers (Luhn-checked) and phone numbers masked."""

    def card(match: re.Match[str]) -> str:
        digits = re.sub(r"\D", "", match.group(0))
        ok = 13 <= len(digits) <= 19 and _luhn_ok(digits)
        return mask("CARD", match.group(0)) if ok else match.group(0)

    def phone(match: re.Match[str]) -> str:
        value = match.group(0)
        return value if _DATE_LIKE.fullmatch(value.strip()) else mask("PHONE", value)

    text = _EMAIL.sub(lambda m: mask("EMAIL", m.group(0)), text)
    text = _CARD.sub(card, text)
    return _PHONE.sub(phone, text)


class Placeholders:
    """Numbered masks for one model call, so the reply's ``[EMAIL_1]`` can be put back.

    The model never sees the value, yet a fused note keeps the address its sources had (the
    grounding check then compares real text with real text). One table per call: a placeholder
    cannot carry a value from another prompt, cluster or scope.
    """

    def __init__(self) -> None:
        self.by_value: dict[tuple[str, str], str] = {}
        self.values: dict[str, str] = {}

    def mask(self, kind: str, value: str) -> str:
        key = (kind, value)
        if key not in self.by_value:
            count = sum(1 for k, _ in self.by_value if k == kind) + 1
            self.by_value[key] = f"[{kind}_{count}]"
            self.values[self.by_value[key]] = value
        return self.by_value[key]

    def restore(self, data: Any) -> Any:
        """``data`` (a parsed JSON reply) with every placeholder string replaced by its value."""
        if not self.values:
            return data
        if isinstance(data, str):
            return _PLACEHOLDER.sub(lambda m: self.values.get(m.group(0), m.group(0)), data)
        if isinstance(data, list):
            return [self.restore(v) for v in data]
        if isinstance(data, dict):
            return {k: self.restore(v) for k, v in data.items()}
        return data


_PLACEHOLDER = re.compile(r"\[(?:EMAIL|PHONE|CARD)_\d+\]")


def outbound_text(text: str, *, redact_pii: bool, mask: Mask = _plain_mask) -> str:
    """Text as it may leave the process: invisible characters stripped, PII masked if asked."""
    from worker.safety.injection import strip_invisible

    text = strip_invisible(text)
    return redact(text, mask) if redact_pii else text


class OutboundLLM:
    """An LLMClient that sends only outbound text; replies get their placeholders back."""

    def __init__(self, inner: Any, owner: HasSettings) -> None:
        self.inner = inner
        self.owner = owner

    def __getattr__(self, name: str) -> Any:
        # ``model`` and anything a test or a client-specific caller reads on the real client.
        if name == "inner":  # not set yet (copy/unpickle): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.inner, name)

    def complete_json(self, *, prompt_name: str, system: str, user: str,
                      schema: dict[str, Any]) -> Any:
        table = Placeholders()
        reply = self.inner.complete_json(
            prompt_name=prompt_name, schema=schema, system=self._out(system, table),
            user=self._out(user, table))
        reply.data = table.restore(reply.data)
        return reply

    def _out(self, text: str, table: Placeholders) -> str:
        return outbound_text(text, redact_pii=self.owner.settings.privacy.redact, mask=table.mask)

    # A provider batch leaves through here too. Its placeholders are put back when the replies
    # are read, maybe by another process: masking the same text again numbers them the same.
    @property
    def supports_batch(self) -> bool:
        return bool(getattr(self.inner, "supports_batch", False))

    def _outbound_items(self, items: Sequence[BatchItem]) -> tuple[list[BatchItem], dict[str, Placeholders]]:
        out, tables = [], {}
        for item in items:
            table = tables[item.custom_id] = Placeholders()
            out.append(replace(item, system=self._out(item.system, table),
                               user=self._out(item.user, table)))
        return out, tables

    def submit_batch(self, items: Sequence[BatchItem], submission: str) -> str:
        return str(self.inner.submit_batch(self._outbound_items(items)[0], submission))

    def find_submission(self, submission: str) -> SubmissionLookup:
        lookup: SubmissionLookup = self.inner.find_submission(submission)  # ids only, no text
        return lookup

    def release_batch(self, batch_id: str) -> BatchRelease:
        release: BatchRelease = self.inner.release_batch(batch_id)  # ids only, no text
        return release

    def batch_state(self, batch_id: str, items: Sequence[BatchItem]) -> BatchState:
        out, tables = self._outbound_items(items)
        state: BatchState = self.inner.batch_state(batch_id, out)
        for custom_id, reply in state.replies.items():
            if custom_id in tables:
                reply.data = tables[custom_id].restore(reply.data)
        return state


class OutboundEmbedder:
    """An Embedder that embeds the redacted text when redaction is on (vectors carry no PII)."""

    def __init__(self, inner: Any, owner: HasSettings) -> None:
        self.inner = inner
        self.owner = owner

    def __getattr__(self, name: str) -> Any:
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def model_name(self) -> str:
        return str(self.inner.model_name)

    @property
    def dimensions(self) -> int:
        return int(self.inner.dimensions)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.owner.settings.privacy.redact:
            texts = [redact(t) for t in texts]
        return self.inner.embed(texts)  # type: ignore[no-any-return]


def outbound(client: Any, owner: HasSettings, wrapper: type[Any]) -> Any:
    """``client`` behind the boundary (once; None stays None: the rule judge)."""
    if client is None or isinstance(client, (OutboundLLM, OutboundEmbedder)):
        return client
    return wrapper(client, owner)
