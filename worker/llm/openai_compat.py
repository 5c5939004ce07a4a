"""An LLMClient for any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, LiteLLM).

Retries are ours, not the client's: 429 and 5xx are retried a bounded number of times,
honouring Retry-After; each request has a whole-request deadline and the whole question a
wall-time cap, so an endpoint that trickles its reply cannot hold a run.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import threading
import time
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import certifi
import openai
import structlog

from worker.config_checks import model_call_seconds
from worker.errors import ConfigError
from worker.llm.base import (
    CONTEXT_EXCEEDED,
    LOST_ATTEMPT,
    BatchItem,
    BatchRelease,
    BatchState,
    LLMError,
    LLMReply,
    PromptTooLong,
    SubmissionLookup,
    too_long,
)
from worker.llm.reply_fields import model_name, token_count, unmetered
from worker.text.plural import counted

log = structlog.get_logger(__name__)

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)
MAX_BACKOFF = 8.0
T = TypeVar("T")


class RequestDeadlineExceeded(Exception):
    """One request ran past its whole-request deadline (headers and body included)."""


class UndecodableBody(Exception):
    """An HTTP 200 whose body says it is JSON and is not (a proxy cut the reply short)."""


# What the client raises on such a body (``response.json()``): no OpenAIError, so before it
# failed the phase with a traceback instead of deferring the item.
UNDECODABLE = (json.JSONDecodeError, UnicodeDecodeError)


def run_with_deadline(coro: Coroutine[Any, Any, T], seconds: float) -> T:
    """Run ``coro`` to completion or cancel it after ``seconds`` in total.

    httpx's timeouts are per network operation, so a server sending one byte every few seconds
    never trips them (encode/httpx#1450); cancelling the task closes the connection instead.
    Runs on a fresh event loop, in a helper thread when this thread already runs one.
    """

    async def bounded() -> T:
        try:
            return await asyncio.wait_for(coro, timeout=seconds)
        except TimeoutError:
            raise RequestDeadlineExceeded(f"no complete reply within {seconds:.0f}s") from None

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded())
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, bounded()).result()


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def parse_content(content: str | None) -> Any:
    """The JSON object in a reply, or None when the text is not JSON (ask() then re-asks)."""
    if not content:
        return None
    match = _FENCE.match(content)
    text = match.group(1) if match else content
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # nested past the parser's depth: garbage as well
        return None


class OpenAICompatibleLLM:
    """Chat completions with a JSON-schema reply, falling back to JSON mode where unsupported."""

    provider_name = "openai"  # gen_ai.provider.name: the API spoken, whoever serves it

    def __init__(
        self, *, base_url: str | None, model: str, api_key: str | None, timeout: float = 30.0,
        max_retries: int = 2, max_wall_seconds: float | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        self.model = model
        self.max_output_tokens = max_output_tokens  # sent as max_tokens when set
        self.base_url = base_url
        self.timeout = timeout  # the whole-request deadline of one attempt
        self.max_retries = max_retries
        # One question may wait for every attempt plus short back-offs, never longer.
        self.max_wall_seconds = max_wall_seconds or timeout * (max_retries + 1) + 10.0
        self._api_key = api_key or "unused"
        # Loading the CA bundle costs ~30 ms; every per-request client shares this context.
        self._ssl = ssl.create_default_context(cafile=certifi.where())
        self._json_schema_supported = True
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Any) -> OpenAICompatibleLLM:
        # Neither an endpoint nor a key: every call would go to api.openai.com with no key
        # (the notes' text to a third party, for a 401), each run blocked "model unavailable".
        if not (settings.llm_base_url or settings.llm_api_key):
            raise ConfigError("DREAM_LLM_PROVIDER=openai needs DREAM_LLM_BASE_URL (an "
                              "OpenAI-compatible server, e.g. http://localhost:11434/v1) or "
                              "DREAM_LLM_API_KEY (api.openai.com); set one, or "
                              "DREAM_LLM_PROVIDER=none for the rule-based judge")
        return cls(
            base_url=settings.llm_base_url, model=settings.llm_model,
            api_key=settings.llm_api_key, timeout=settings.llm_timeout,
            max_retries=settings.llm_max_retries, max_wall_seconds=model_call_seconds(settings),
            max_output_tokens=settings.llm_max_output_tokens,
        )

    def _response_format(self, prompt_name: str, schema: dict[str, Any]) -> dict[str, Any]:
        if self._json_schema_supported:
            return {"type": "json_schema",
                    "json_schema": {"name": re.sub(r"\W", "_", prompt_name)[:64] or "reply",
                                    "schema": schema, "strict": False}}
        return {"type": "json_object"}

    def chat_messages(self, system: str, user: str, schema: dict[str, Any]) -> list[dict[str, str]]:
        # The schema also goes into the system message: JSON mode needs the word JSON and a shape.
        system_full = (
            system.rstrip()
            + "\n\nReply with one JSON object that follows this JSON schema:\n"
            + json.dumps(schema, separators=(",", ":"))
        )
        return [{"role": "system", "content": system_full}, {"role": "user", "content": user}]

    def chat_body(self, prompt_name: str, system: str, user: str,
                  schema: dict[str, Any]) -> dict[str, Any]:
        """The body of one chat completion request, as a batch line carries it."""
        return {"model": self.model, "messages": self.chat_messages(system, user, schema),
                "response_format": self._response_format(prompt_name, schema), "temperature": 0,
                **self._cap()}

    def _cap(self) -> dict[str, int]:
        return {} if self.max_output_tokens is None else {"max_tokens": self.max_output_tokens}

    def complete_json(
        self, *, prompt_name: str, system: str, user: str, schema: dict[str, Any]
    ) -> LLMReply:
        messages = self.chat_messages(system, user, schema)
        deadline = time.monotonic() + self.max_wall_seconds
        attempt = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LLMError(f"model call {prompt_name} exceeded {self.max_wall_seconds:.0f}s "
                               "wall time; check DREAM_LLM_BASE_URL or raise DREAM_LLM_TIMEOUT")
            fmt = self._response_format(prompt_name, schema)
            try:
                resp = self._create(prompt_name, messages, fmt, min(self.timeout, remaining))
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                if too_long(exc):
                    raise PromptTooLong.of(prompt_name, exc) from None
                if fmt["type"] != "json_schema":
                    raise LLMError(f"model endpoint rejected the request ({exc.status_code}); "
                                   "check DREAM_LLM_MODEL and the server's logs") from None
                with self._lock:
                    self._json_schema_supported = False
                log.info("llm.json_schema_unsupported", prompt=prompt_name, status=exc.status_code)
                continue  # retry at once in JSON mode; not counted as a retry
            except (openai.RateLimitError, openai.InternalServerError, openai.APIStatusError,
                    openai.APITimeoutError, openai.APIConnectionError,
                    RequestDeadlineExceeded, UndecodableBody) as exc:
                if too_long(exc):
                    raise PromptTooLong.of(prompt_name, exc) from None
                if _maybe_billed(exc):
                    _lost_attempt(prompt_name, exc)
                wait = self._retry_wait(exc, attempt, deadline)
                log.info("llm.retry", prompt=prompt_name, attempt=attempt + 1,
                         error=_describe(exc), wait_s=round(wait, 2))
                time.sleep(wait)
                attempt += 1
                continue
            except openai.OpenAIError as exc:
                raise client_error(exc) from None
            if _cut(resp):
                # Counted as a malformed reply where it does not parse; the cap is the cause.
                log.warning("llm.reply_cut", prompt=prompt_name,
                            max_output_tokens=self.max_output_tokens)
            return chat_reply(resp, self.model)

    def _retry_wait(self, exc: Exception, attempt: int, deadline: float) -> float:
        """Seconds to wait before retrying ``exc``, or LLMError when it is not retried."""
        status = getattr(exc, "status_code", None)
        if isinstance(exc, openai.APIStatusError) and not (
            status == 429 or (status is not None and status >= 500)
        ):
            raise client_error(exc) from None
        if attempt >= self.max_retries:
            raise LLMError(f"model endpoint failed after {counted(attempt + 1, 'attempt')} "
                           f"({_describe(exc)}); the item is deferred to the next run") from None
        wait = parse_retry_after(exc.response.headers) if isinstance(
            exc, openai.APIStatusError) else None
        if wait is None:
            wait = min(MAX_BACKOFF, 0.5 * 2**attempt)
        if time.monotonic() + wait >= deadline:
            raise LLMError(
                f"model endpoint asked to wait {wait:.0f}s ({_describe(exc)}), beyond the "
                f"{self.max_wall_seconds:.0f}s cap; the item is deferred to the next run"
            ) from None
        return wait

    # ---- provider batches (worker.llm.openai_batch) -------------------------------------
    supports_batch = True

    def submit_batch(self, items: Sequence[BatchItem], submission: str) -> str:
        from worker.llm.openai_batch_submit import submit_batch

        return submit_batch(self, items, submission)

    def find_submission(self, submission: str) -> SubmissionLookup:
        from worker.llm.openai_batch import find_submission

        return find_submission(self, submission)

    def batch_state(self, batch_id: str, items: Sequence[BatchItem]) -> BatchState:
        from worker.llm.openai_batch import batch_state

        return batch_state(self, batch_id)

    def release_batch(self, batch_id: str) -> BatchRelease:
        from worker.llm.openai_batch import release_batch

        return release_batch(self, batch_id)

    def sync_client(self) -> openai.OpenAI:
        """A client for the few calls of a batch (upload, create, retrieve, download)."""
        return openai.OpenAI(
            base_url=self.base_url, api_key=self._api_key, timeout=self.timeout,
            max_retries=self.max_retries,
            http_client=openai.DefaultHttpxClient(verify=self._ssl, timeout=self.timeout),
        )

    def _create(
        self, prompt_name: str, messages: list[dict[str, str]], fmt: dict[str, Any],
        deadline_s: float,
    ) -> Any:
        """One chat completion, headers and body within ``deadline_s`` seconds in total."""

        async def create() -> Any:
            client = openai.AsyncOpenAI(
                base_url=self.base_url, api_key=self._api_key, timeout=deadline_s, max_retries=0,
                http_client=openai.DefaultAsyncHttpxClient(verify=self._ssl, timeout=deadline_s),
            )
            async with client:
                try:
                    return await client.chat.completions.create(  # type: ignore[call-overload]
                        model=self.model, messages=messages, response_format=fmt,
                        temperature=0, **self._cap(),
                        # Lets proxies, logs and stubs tell prompts apart; carries no note text.
                        extra_headers={"X-Dream-Prompt": prompt_name},
                    )
                except UNDECODABLE:
                    raise UndecodableBody from None  # retried like a 5xx: a cut is transient

        return run_with_deadline(create(), deadline_s)


def client_error(exc: Exception) -> LLMError:
    """The one line a client-side failure (credentials, URL, model, bad request) becomes."""
    return LLMError(endpoint_problem(exc, "model", "DREAM_LLM")
                    or f"model call failed ({type(exc).__name__})")


def endpoint_problem(exc: Exception, what: str, prefix: str) -> str | None:
    """What an HTTP answer the client raised says is wrong, naming the setting to check
    (``prefix``: DREAM_LLM or DREAM_EMBEDDING), or None when the endpoint gave no status."""
    status = getattr(exc, "status_code", None)
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return f"{what} endpoint refused the credentials ({status}); check {prefix}_API_KEY"
    if isinstance(exc, openai.NotFoundError):
        return (f"{what} endpoint answered 404; check {prefix}_BASE_URL (usually ends in /v1) "
                f"and {prefix}_MODEL")
    if too_long(exc):  # a note longer than the embedding model takes
        return f"{what} endpoint refused a text as {CONTEXT_EXCEEDED} ({status}); check {prefix}_MODEL"
    if isinstance(exc, openai.BadRequestError | openai.UnprocessableEntityError):
        return (f"{what} endpoint rejected the request ({status}); check {prefix}_MODEL and the "
                "server's logs")
    if isinstance(exc, openai.APIStatusError):
        return f"{what} endpoint answered {status}; check the server"
    return None


def _maybe_billed(exc: Exception) -> bool:
    """The request reached the model and may have been billed, though no usage came back: it
    outlived its deadline (the model may have answered all along), its HTTP 200 body was cut
    short, or the connection dropped once the request was sent (mid-reply: the server answered
    and billed it). A 429, a 5xx or a connection that never carried the request is not billed."""
    if isinstance(exc, RequestDeadlineExceeded | UndecodableBody):
        return True
    # APITimeoutError is one of these: a read timeout may have been billed, a connect one not.
    return isinstance(exc, openai.APIConnectionError) and not never_sent(exc)


def never_sent(exc: Exception) -> bool:
    """The client's failure happened before the request reached the server whole (nothing
    there can have carried it out)."""
    return bool(_UNSENT & {kind.__name__ for kind in type(exc.__cause__).__mro__})


# What the client's transport raises (openai's cause) when the request never reached the server
# whole. By name: the openai client ships its own copy of httpx (``httpx2``), whose classes are
# not those of the ``httpx`` this package imports.
_UNSENT = frozenset({"ConnectError", "ConnectTimeout", "WriteError", "WriteTimeout"})


def _lost_attempt(prompt_name: str, exc: Exception) -> None:
    """Tell the asker's budget (``LOST_ATTEMPT``) of an attempt that may have been billed:
    it charges the attempt's estimate and holds another for a retry, or has no room left."""
    hook = LOST_ATTEMPT.get()
    if hook is not None and not hook():
        raise LLMError(f"model endpoint failed ({_describe(exc)}) and the model budget has no "
                       f"room to retry {prompt_name}; the item is deferred to the next run")


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    if isinstance(exc, RequestDeadlineExceeded):
        return "whole-request deadline"
    if isinstance(exc, UndecodableBody):
        return "HTTP 200 with a body that is not JSON; check DREAM_LLM_BASE_URL"
    return f"HTTP {status}" if status else type(exc).__name__


def _cut(resp: Any) -> bool:
    """The server stopped the reply at the token cap (``finish_reason`` "length")."""
    choices = getattr(resp, "choices", None)
    return bool(choices) and isinstance(choices, list) and getattr(
        choices[0], "finish_reason", None) == "length"


def chat_reply(resp: Any, default_model: str) -> LLMReply:
    """The reply of a chat completion; any other HTTP 200 body (an HTML error page from a
    proxy, ``null``, an unrelated JSON object) is an endpoint failure: the item is deferred."""
    choices = getattr(resp, "choices", None)
    if not isinstance(resp, openai.types.chat.ChatCompletion) or not isinstance(choices, list):
        raise LLMError("model endpoint answered HTTP 200 without a chat completion (not the "
                       "expected JSON); check DREAM_LLM_BASE_URL; the item is deferred to the "
                       "next run")
    message = getattr(choices[0], "message", None) if choices else None
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        content = None
    refusal = getattr(message, "refusal", None)
    return LLMReply(
        data=parse_content(content),
        tokens_in=token_count(resp.usage, "prompt_tokens"),
        tokens_out=token_count(resp.usage, "completion_tokens"),
        model=model_name(resp.model, default_model),
        raw=content or "",
        refused=not content and isinstance(refusal, str) and bool(refusal.strip()),
        unmetered=unmetered(resp.usage, content),
    )
