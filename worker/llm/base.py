"""The LLMClient protocol every judge talks through, and the reply value it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from worker.errors import ModelFailure


@dataclass
class LLMReply:
    """One model answer: the parsed JSON object plus what it cost."""

    data: Any
    tokens_in: int = 0
    tokens_out: int = 0
    model: str = ""
    raw: str = field(default="", repr=False)


class LLMError(ModelFailure):
    """The model endpoint failed in a way retries did not fix (unreachable, 4xx, timeouts)."""


class LLMClient(Protocol):
    model: str

    def complete_json(
        self, *, prompt_name: str, system: str, user: str, schema: dict[str, Any]
    ) -> LLMReply:
        """Send one prompt, return the JSON object the model answered (not yet validated)."""
        ...
