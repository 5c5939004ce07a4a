"""The LLMClient protocol every judge talks through, and the reply value it returns."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
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
    # The model declined to answer (the API's ``refusal``, no content): a refusal is no
    # malformed reply, and asking again gets the same one.
    refused: bool = False
    # The endpoint sent no ``usage`` (some servers count nothing): the tokens above are 0, so
    # the budget charges the call's reserved estimate instead, or a run's cap would not hold.
    unmetered: bool = False


# Set by ``ask`` around one call (``worker.llm.spending.HeldCall.lost_attempt``): a client calls
# it after each attempt the provider may have billed though no usage came back (a request past
# its deadline, an HTTP 200 body cut short), before it retries. It charges that attempt's
# estimate and holds another for the retry; False: the budget has no room, do not retry.
LOST_ATTEMPT: ContextVar[Callable[[], bool] | None] = ContextVar("dream_llm_lost_attempt",
                                                                 default=None)


# What a question the model refused ends with (never the refusal's text, which may quote notes).
REFUSED = ("the model refused to answer (a refusal, not a verdict); not asked again this run "
           "(nor for DREAM_LLM_UNANSWERED_HOURS), nothing applied")


class LLMError(ModelFailure):
    """The model endpoint failed in a way retries did not fix (unreachable, 4xx, timeouts)."""

    says_no_note_text = True  # status codes, exception class names, prompt names


# What ``PromptTooLong`` says (``worker.runs.outcome`` reads it: the remedy is another model,
# not another endpoint).
CONTEXT_EXCEEDED = "longer than the model's context window"
# The code a batch line refused for its length is recorded under (OpenAI's own).
TOO_LONG_CODE = "context_length_exceeded"
# How servers word a prompt longer than the model's context window (OpenAI and vLLM: "maximum
# context length", llama.cpp: "exceeds the available context size", LiteLLM: its
# ContextWindowExceededError, others: "prompt is too long", "too many tokens"; OpenAI's
# embeddings: "max 300000 tokens per request").
_TOO_LONG = re.compile(r"context[ _-]?(length|window|size)|prompt is too long|input is too long|"
                       r"too many (input )?tokens|tokens[ _]per[ _]request", re.IGNORECASE)


def says_too_long(status: object, *said: object) -> bool:
    """An endpoint's error answer refuses the request as longer than the model takes: a 413,
    or a 400 (a 422, a 500 from some proxies) whose error code, type or message says the
    context is exceeded. Sent again, in JSON mode, after a back-off or by the next run, the
    same prompt fails the same way."""
    if status == 413:
        return True
    return status in (400, 422, 500) and bool(
        _TOO_LONG.search(" ".join(str(part) for part in said if part)))


class PromptTooLong(LLMError):
    """The endpoint refused the prompt as longer than the model's context window (a 400
    ``context_length_exceeded``, a 413): the same prompt fails the same way every time, so the
    question is neither retried nor re-sent in JSON mode, and is remembered as unanswered
    (``worker.llm.unanswered``) until its notes, the model or the prompt change."""

    @classmethod
    def of(cls, prompt_name: str, exc: Exception) -> PromptTooLong:
        """The one line it becomes (never the server's message, which may quote the prompt)."""
        return cls(f"model endpoint refused the {prompt_name} prompt as {CONTEXT_EXCEEDED} (HTTP "
                   f"{getattr(exc, 'status_code', None)}); use a DREAM_LLM_MODEL with a larger "
                   "context, or shorter notes; the question is not asked again for "
                   "DREAM_LLM_UNANSWERED_HOURS unless its notes or the model change")


def too_long(exc: Exception) -> bool:
    """An HTTP error the client raised (``openai.APIStatusError``) refuses the request as
    longer than the model takes (``says_too_long``)."""
    return isinstance(getattr(exc, "status_code", None), int) and says_too_long(
        getattr(exc, "status_code", None), getattr(exc, "code", None),
        getattr(exc, "type", None), getattr(exc, "message", None))


class SubmissionUnknown(LLMError):
    """A batch create's answer was lost and looking it up failed too: whether the provider made
    the batch is unknown, so its submission stays open on the ledger for a later look."""


class LLMClient(Protocol):
    model: str

    def complete_json(
        self, *, prompt_name: str, system: str, user: str, schema: dict[str, Any]
    ) -> LLMReply:
        """Send one prompt, return the JSON object the model answered (not yet validated)."""
        ...


@dataclass(frozen=True)
class BatchItem:
    """One question of a provider batch; ``custom_id`` names it without carrying its text."""

    custom_id: str
    prompt_name: str
    system: str
    user: str
    schema: dict[str, Any]


# The provider's terminal batch statuses: nothing more will be answered.
BATCH_FINISHED = frozenset({"completed", "expired", "failed", "cancelled"})


@dataclass
class BatchState:
    """A provider batch as it stands: its status, the replies so far and the requests it
    failed (by ``custom_id``, with a reason that carries no prompt text)."""

    batch_id: str
    status: str
    replies: dict[str, LLMReply] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    # The provider could not be asked: "failed" for this attempt only, the batch maybe working.
    unchecked: bool = False
    # A failed batch's first error code, as the provider gave it (never its message).
    problem: str | None = None
    # Tokens billed for replies that answer nothing (a request answered twice: both billed).
    unused_in: int = 0
    unused_out: int = 0

    @property
    def finished(self) -> bool:
        return self.status in BATCH_FINISHED


@dataclass
class BatchRelease:
    """What stopping a provider batch for good did (its run no longer wants its answers): the
    status found, whether it was cancelled, the files deleted and those the provider still
    holds, and ``problem``, one line without note text, when part of it failed."""

    batch_id: str
    status: str = "unknown"
    cancelled: bool = False
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    problem: str | None = None
    # What the provider billed for the replies in its output file, which nobody reads: the
    # usage of each line (no text), so the run's budget is charged what the provider bills.
    billed_in: int = 0
    billed_out: int = 0

    @property
    def complete(self) -> bool:
        """Nothing is left at the provider (nothing running, no file)."""
        return self.problem is None and not self.kept

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SubmissionLookup:
    """What looking up a submission whose create answer was lost found at the provider (by its
    key, ``batch_lookup``): the batch made with it (None: none among the most recent), the
    files uploaded under its name deleted and kept, and ``problem``, one line without note
    text, when the look failed (what the provider holds is then unknown)."""

    submission: str
    batch_id: str | None = None
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class BatchLLM(LLMClient, Protocol):
    """A client that can also send questions as one provider batch (files + batches API)."""

    supports_batch: bool

    def submit_batch(self, items: Sequence[BatchItem], submission: str) -> str:
        """Upload the requests and start the batch, sent with the ``submission`` key; its id
        (the one made with that key, adopted, when the create's answer was lost)."""
        ...

    def find_submission(self, submission: str) -> SubmissionLookup:
        """The batch made with ``submission`` (a create whose answer never came back), or,
        without one, the files uploaded under its name deleted; never raises for the provider."""
        ...

    def batch_state(self, batch_id: str, items: Sequence[BatchItem]) -> BatchState:
        """The batch's status and, once finished, its replies; ``items`` are the questions
        its replies may answer (the boundary restores their placeholders)."""
        ...

    def release_batch(self, batch_id: str) -> BatchRelease:
        """Cancel the batch if it still works and delete its files; never raises for the
        provider's errors (they are the release's ``problem``)."""
        ...


def reply_cap(llm: Any) -> int:
    """The client's cap on a reply's tokens (``max_output_tokens``, sent as ``max_tokens``), 0
    without one: what the budget reserves for a reply beside its prompt."""
    return int(getattr(llm, "max_output_tokens", None) or 0)
