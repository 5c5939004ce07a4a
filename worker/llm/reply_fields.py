"""What a chat completion's reply says around its content, checked: its token counts, whether
it has any, and the model it names (``worker.llm.openai_compat.chat_reply``)."""

from __future__ import annotations

import re
from typing import Any

from worker.llm.base import LLMError


def unmetered(usage: Any, content: str | None = None) -> bool:
    """The reply came without token counts the budget can be charged: no ``usage``, a prompt
    counted 0 or not at all (every prompt carries the system message and the schema), or no
    completion count, or 0 for a reply with text. Before, only a ``usage`` without either
    count was: a server sending zeros (or the completion alone) had its calls charged 0 and
    no token cap held."""
    if usage is None:
        return True
    prompt, completion = (getattr(usage, f, None) for f in ("prompt_tokens", "completion_tokens"))
    return not prompt or completion is None or (completion == 0 and bool(content))


# Far above any model's context window (a reply never uses more), far below what the steps'
# 32-bit token columns overflow at when a phase sums its replies.
MAX_REPLY_TOKENS = 10_000_000


def token_count(usage: Any, field: str) -> int:
    """One of a reply's token counts, which the run's budget is charged (R15). A server that
    counts nothing sends none (0); anything but a whole number up to ``MAX_REPLY_TOKENS`` is
    an endpoint answering garbage, and the item is deferred: a negative count gave the budget
    back, a huge one failed the phase's write, a string or an object failed the phase."""
    value = getattr(usage, field, None) if usage is not None else None
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPLY_TOKENS:
        raise LLMError(f"model endpoint answered a usage.{field} that is no token count (a whole "
                       f"number from 0 to {MAX_REPLY_TOKENS:,}); check the server; the item is "
                       "deferred to the next run")
    return value


_MODEL_NAME = re.compile(r"[\x21-\x7e]{1,200}")


def model_name(value: Any, default_model: str) -> str:
    """The model a reply names, as steps, spans and listings record it; the configured model
    when the endpoint sends no name, or something no model is called (not a string, control
    characters, pages of text), which would be copied onto every step of the run."""
    return value if isinstance(value, str) and _MODEL_NAME.fullmatch(value) else default_model
