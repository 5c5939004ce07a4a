"""Why a provider batch left a question unanswered, as one line without note text (the item's
deferral reason), and what a run's reason advises for it. The endpoint answered every call:
an expired, failed, cancelled, given-up or garbled batch is no reason to check
DREAM_LLM_BASE_URL (the advice every such run ended with before)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from worker.llm.ask import BATCH_WAIT_OUT
from worker.llm.base import BatchState

PREFIX = "provider batch "
# An error-file line's code that says the whole batch ended, not this one request.
BATCH_LEVEL_CODES = {"batch_expired": "expired", "batch_failed": "failed",
                     "batch_cancelled": "cancelled"}
_CODE = re.compile(r"[A-Za-z0-9_.-]{1,40}")
_AGAIN = "the next run asks these questions again in a new batch"


@dataclass(frozen=True)
class BatchEnd:
    """One way a batch ends its questions unanswered: what the item says after the batch id,
    and what the run's reason tells the operator to do."""

    says: str
    remedy: str


EXPIRED = BatchEnd("expired: the provider's 24 h completion window ended before it answered",
                   f"{_AGAIN}; if batches keep expiring, set DREAM_LLM_BATCH=false to ask online")
FAILED = BatchEnd("failed at the provider",
                  f"{_AGAIN}; if it fails again, look up the batch's errors at the provider or "
                  "set DREAM_LLM_BATCH=false to ask online")
CANCELLED = BatchEnd("was cancelled before it answered", _AGAIN)
GIVEN_UP = BatchEnd("given up", f"{_AGAIN}; if the provider keeps batches unfinished for a day, "
                    "set DREAM_LLM_BATCH=false to ask online")
GARBLED = BatchEnd("finished without a readable answer",
                   f"{_AGAIN}; if it recurs, check what the server writes to batch output files")
REQUEST_FAILED = BatchEnd("answered this request with an error",
                          f"{_AGAIN}; if it recurs, check the server")
ENDS = (EXPIRED, FAILED, CANCELLED, GIVEN_UP, GARBLED, REQUEST_FAILED)
_BY_STATUS = {"expired": EXPIRED, "failed": FAILED, "cancelled": CANCELLED}


def line_failed(code: str) -> str:
    """An error-file line's reason: ``batch request failed (code)``."""
    return f"batch request failed ({code})"


def said(batch_id: str, end: BatchEnd, detail: str = "") -> str:
    return f"{PREFIX}{batch_id} {end.says}{f' ({detail})' if detail else ''}"


def unanswered(batch_id: str, status: str, line: str | None, problem: str | None) -> str:
    """Why a finished batch has no answer for a request: its batch ended (expired, failed with
    the provider's error code if it gave one, cancelled), the request's line failed, or the
    output held no readable line for it (``line`` is what ``read_output`` made of its line,
    None without one)."""
    batch_level = line is None or any(line == line_failed(c) for c in BATCH_LEVEL_CODES)
    end = _BY_STATUS.get(status)
    if end is not None and batch_level:
        return said(batch_id, end, problem if end is FAILED and problem else "")
    if line is None:
        return said(batch_id, GARBLED, "no line for this request in its output")
    if line.startswith("batch request failed"):
        return said(batch_id, REQUEST_FAILED, line.removeprefix("batch request failed (")[:-1])
    return said(batch_id, GARBLED, line)


def given_up(batch_id: str, status: str, hours: int) -> str:
    return said(batch_id, GIVEN_UP, f"still {status} {hours} h after it was submitted, past the "
                "provider's 24 h window")


def provider_problem(errors: Any) -> str | None:
    """The first error code a failed batch carries (``Batch.errors.data``), if it is a code:
    never its message, which may quote a request."""
    for error in getattr(errors, "data", None) or ():
        code = getattr(error, "code", None)
        if isinstance(code, str) and _CODE.fullmatch(code):
            return code
    return None


def end_of(text: str) -> tuple[str, str] | None:
    """(what happened, what to do) for the first batch end ``text`` names, else None."""
    at = text.find(PREFIX)
    if at < 0:
        return None
    cause = text[at:].split(";")[0][:200]
    for end in ENDS:
        if f" {end.says}" in cause:
            return cause, end.remedy
    return None


def unanswered_item(state: BatchState, key: str, wait: float) -> str:
    """Why the batch has no answer for ``key``: what could not check it or gave it up (its
    own reason), the in-process wait running out, or how the finished batch ended."""
    if state.unchecked:
        return state.failed.get(key) or f"batch {state.batch_id} could not be checked"
    if not state.finished:
        return f"batch {state.batch_id} {BATCH_WAIT_OUT} ({wait:g}s)"
    return unanswered(state.batch_id, state.status, state.failed.get(key), state.problem)
