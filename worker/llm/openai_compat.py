"""An LLMClient for any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, LiteLLM).

Retries are ours, not the client's: 429 and 5xx are retried a bounded number of times,
honouring Retry-After, and the whole question never takes longer than a fixed wall-time cap.
"""

from __future__ import annotations

import json
import re
import threading
import time
from email.utils import parsedate_to_datetime
from typing import Any

import openai
import structlog

from worker.llm.base import LLMError, LLMReply

log = structlog.get_logger(__name__)

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)
MAX_BACKOFF = 8.0


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
    except ValueError:
        return None


class OpenAICompatibleLLM:
    """Chat completions with a JSON-schema reply, falling back to JSON mode where unsupported."""

    def __init__(
        self, *, base_url: str | None, model: str, api_key: str | None, timeout: float = 30.0,
        max_retries: int = 2, max_wall_seconds: float | None = None,
    ) -> None:
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        # One question may wait for every attempt plus short back-offs, never longer.
        self.max_wall_seconds = max_wall_seconds or timeout * (max_retries + 1) + 10.0
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=0
        )
        self._json_schema_supported = True
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Any) -> OpenAICompatibleLLM:
        return cls(
            base_url=settings.llm_base_url, model=settings.llm_model,
            api_key=settings.llm_api_key, timeout=settings.llm_timeout,
            max_retries=settings.llm_max_retries,
        )

    @property
    def json_schema_supported(self) -> bool:
        return self._json_schema_supported

    def _response_format(self, prompt_name: str, schema: dict[str, Any]) -> dict[str, Any]:
        if self._json_schema_supported:
            return {"type": "json_schema",
                    "json_schema": {"name": re.sub(r"\W", "_", prompt_name)[:64] or "reply",
                                    "schema": schema, "strict": False}}
        return {"type": "json_object"}

    def complete_json(
        self, *, prompt_name: str, system: str, user: str, schema: dict[str, Any]
    ) -> LLMReply:
        # The schema also goes into the system message: JSON mode needs the word JSON and a shape.
        system_full = (
            system.rstrip()
            + "\n\nReply with one JSON object that follows this JSON schema:\n"
            + json.dumps(schema, separators=(",", ":"))
        )
        messages = [{"role": "system", "content": system_full}, {"role": "user", "content": user}]
        deadline = time.monotonic() + self.max_wall_seconds
        attempt = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LLMError(f"model call {prompt_name} exceeded {self.max_wall_seconds:.0f}s "
                               "wall time; check DREAM_LLM_BASE_URL or raise DREAM_LLM_TIMEOUT")
            fmt = self._response_format(prompt_name, schema)
            try:
                resp = self.client.chat.completions.create(  # type: ignore[call-overload]
                    model=self.model, messages=messages, response_format=fmt,
                    temperature=0, timeout=min(self.timeout, remaining),
                    # Lets proxies, logs and test stubs tell prompts apart; carries no note text.
                    extra_headers={"X-Dream-Prompt": prompt_name},
                )
            except (openai.BadRequestError, openai.UnprocessableEntityError) as exc:
                if fmt["type"] == "json_schema":
                    with self._lock:
                        self._json_schema_supported = False
                    log.info("llm.json_schema_unsupported", prompt=prompt_name,
                             status=exc.status_code)
                    continue  # retry at once in JSON mode; not counted as a retry
                raise LLMError(f"model endpoint rejected the request ({exc.status_code}); "
                               "check DREAM_LLM_MODEL and the server's logs") from None
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                raise LLMError(f"model endpoint refused the credentials ({exc.status_code}); "
                               "check DREAM_LLM_API_KEY") from None
            except openai.NotFoundError:
                raise LLMError("model endpoint answered 404; check DREAM_LLM_BASE_URL "
                               "(usually ends in /v1) and DREAM_LLM_MODEL") from None
            except (openai.RateLimitError, openai.InternalServerError, openai.APIStatusError,
                    openai.APITimeoutError, openai.APIConnectionError) as exc:
                status = getattr(exc, "status_code", None)
                if isinstance(exc, openai.APIStatusError) and not (
                    status == 429 or (status is not None and status >= 500)
                ):
                    raise LLMError(f"model endpoint answered {status}; check the server") from None
                if attempt >= self.max_retries:
                    raise LLMError(
                        f"model endpoint failed after {attempt + 1} attempts "
                        f"({_describe(exc)}); the item is deferred to the next run"
                    ) from None
                wait = None
                if isinstance(exc, openai.APIStatusError):
                    wait = parse_retry_after(exc.response.headers)
                if wait is None:
                    wait = min(MAX_BACKOFF, 0.5 * 2**attempt)
                if time.monotonic() + wait >= deadline:
                    raise LLMError(
                        f"model endpoint asked to wait {wait:.0f}s ({_describe(exc)}), beyond the "
                        f"{self.max_wall_seconds:.0f}s cap; the item is deferred to the next run"
                    ) from None
                log.info("llm.retry", prompt=prompt_name, attempt=attempt + 1,
                         error=_describe(exc), wait_s=round(wait, 2))
                time.sleep(wait)
                attempt += 1
                continue
            except openai.OpenAIError as exc:
                raise LLMError(f"model call failed ({type(exc).__name__})") from None
            return _reply(resp, self.model)


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    return f"HTTP {status}" if status else type(exc).__name__


def _reply(resp: Any, default_model: str) -> LLMReply:
    content = resp.choices[0].message.content if resp.choices else None
    usage = resp.usage
    return LLMReply(
        data=parse_content(content),
        tokens_in=int(getattr(usage, "prompt_tokens", 0) or 0) if usage else 0,
        tokens_out=int(getattr(usage, "completion_tokens", 0) or 0) if usage else 0,
        model=resp.model or default_model,
        raw=content or "",
    )
