"""Provider batches for OpenAICompatibleLLM: one JSONL of /v1/chat/completions requests per
batch (files + batches API); the output and error files are read back by ``custom_id``, then
all three are deleted at the provider. A batch its run no longer wants is released: cancelled
if it still works, its files deleted."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, TypeVar

import openai
import pydantic
import structlog
from openai.types import Batch, FileObject
from openai.types.chat import ChatCompletion

from worker.llm.base import (
    BATCH_FINISHED,
    TOO_LONG_CODE,
    BatchItem,
    BatchRelease,
    BatchState,
    LLMError,
    LLMReply,
    SubmissionLookup,
    says_too_long,
)
from worker.llm.batch_ends import line_failed, provider_problem
from worker.llm.batch_lookup import PROVIDER_ID, look_up
from worker.llm.openai_compat import UNDECODABLE, OpenAICompatibleLLM, chat_reply, client_error

log = structlog.get_logger(__name__)

ENDPOINT: Final[Literal["/v1/chat/completions"]] = "/v1/chat/completions"


def batch_lines(llm: OpenAICompatibleLLM, items: Sequence[BatchItem]) -> bytes:
    """The input file: one request per line, the same body an online call sends."""
    lines = [json.dumps({"custom_id": it.custom_id, "method": "POST", "url": ENDPOINT,
                         "body": llm.chat_body(it.prompt_name, it.system, it.user, it.schema)},
                        ensure_ascii=False) for it in items]
    return ("\n".join(lines) + "\n").encode()


AnswerT = TypeVar("AnswerT", FileObject, Batch)


def answered(call: Callable[[], object], kind: type[AnswerT], what: str) -> AnswerT:
    """The file or batch ``call`` got from the endpoint; LLMError for an HTTP 200 that is none
    (a proxy's HTML page, JSON cut short or of another shape), which before failed the phase
    as an AttributeError or a JSONDecodeError instead of deferring its items."""
    try:
        value = call()
    except UNDECODABLE:
        value = None
    if isinstance(value, kind) and isinstance(getattr(value, "id", None), str):
        return value
    raise LLMError(f"model endpoint answered HTTP 200 without a {what}; check "
                   "DREAM_LLM_BASE_URL")


def batch_files(batch: Batch) -> list[str | None]:
    """The batch's input, output and error file ids; None for one it has not, or that is no
    id (a lenient client keeps whatever the endpoint sent: it is neither read nor deleted)."""
    return [v if isinstance(v, str) and PROVIDER_ID.fullmatch(v) else None
            for v in (batch.input_file_id, batch.output_file_id, batch.error_file_id)]


_STATUS = re.compile(r"[a-z_]{1,40}")


def provider_status(value: object) -> str:
    """A batch's status as the provider says it, or ``unknown`` (never finished: the batch is
    waited on, then given up) for what is no status: it is recorded on the batch's step,
    logged and printed by `dream runs cancel`, where an escape sequence would be printed raw."""
    return value if isinstance(value, str) and _STATUS.fullmatch(value) else "unknown"


def batch_state(llm: OpenAICompatibleLLM, batch_id: str) -> BatchState:
    """The batch's status; once it is finished, every reply of its output file and every
    failed request of its error file, and the three files deleted (``forget_files``)."""
    try:
        with llm.sync_client() as client:
            batch = answered(lambda: client.batches.retrieve(batch_id), Batch, "batch")
            state = BatchState(batch_id, provider_status(batch.status),
                               problem=provider_problem(batch.errors))
            if not state.finished:
                return state
            files = batch_files(batch)
            for result_file in files[1:]:
                if result_file:
                    read_output(client.files.content(result_file).text, state, llm.model)
            forget_files(client, batch_id, files)
    except openai.APIConnectionError:
        raise LLMError(f"cannot reach the model endpoint to check batch {batch_id}; check "
                       "DREAM_LLM_BASE_URL") from None
    except openai.OpenAIError as exc:
        raise client_error(exc) from None
    return state


def forget_files(client: openai.OpenAI, batch_id: str,
                 file_ids: Sequence[str | None]) -> tuple[list[str], list[str]]:
    """Delete a batch's files at the provider once they are read (or no longer wanted): the
    ids deleted and those it keeps. They hold every prompt (note text) and reply, and a
    provider keeps uploaded files until they are deleted: no erasure could reach them. Best
    effort: a file the provider keeps is logged by id (a retried phase that reads the batch
    again finds the output gone and defers its items)."""
    deleted: list[str] = []
    kept: list[str] = []
    for file_id in file_ids:
        if not file_id:
            continue
        try:
            client.files.delete(file_id)
            deleted.append(file_id)
        except openai.NotFoundError:
            continue  # deleted already (the same batch read twice)
        except (openai.OpenAIError, *UNDECODABLE) as exc:
            kept.append(file_id)
            log.warning("llm.batch_file_kept", batch_id=batch_id, file_id=file_id,
                        error_type=type(exc).__name__)
    return deleted, kept


def find_submission(llm: OpenAICompatibleLLM, submission: str) -> SubmissionLookup:
    """The batch made with ``submission`` whose create answer was lost, or, without one, the
    files uploaded under its name deleted (``batch_lookup.look_up``); never raises."""
    try:
        with llm.sync_client() as client:
            return look_up(client, submission)
    except openai.OpenAIError as exc:
        return SubmissionLookup(submission, problem=str(client_error(exc)))


def release_batch(llm: OpenAICompatibleLLM, batch_id: str) -> BatchRelease:
    """Stop a batch whose run no longer wants its answers (cancelled, failed, given up, out of
    time): ``batches.cancel`` while the provider still works on it (it bills each request it
    answers), then its input, output and error files deleted. Never raises for the provider:
    what failed is the release's ``problem``, and what is left is released by a later call."""
    release = BatchRelease(batch_id)
    try:
        with llm.sync_client() as client:
            batch = answered(lambda: client.batches.retrieve(batch_id), Batch, "batch")
            status = provider_status(batch.status)
            if status not in BATCH_FINISHED and status != "cancelling":
                batch = answered(lambda: client.batches.cancel(batch_id), Batch, "batch")
                release.cancelled = True
            release.status = provider_status(batch.status)
            files = batch_files(batch)
            release.billed_in, release.billed_out = billed(client, batch_id, files[1])
            release.deleted, release.kept = forget_files(client, batch_id, files)
    except openai.NotFoundError:
        release.status = "gone"  # the provider holds no such batch (its retention ended)
        return release
    except openai.APIConnectionError:
        release.problem = "cannot reach the model endpoint (check DREAM_LLM_BASE_URL)"
    except LLMError as exc:
        release.problem = str(exc)
    except openai.OpenAIError as exc:
        release.problem = str(client_error(exc))
    if release.problem is None and release.status not in BATCH_FINISHED:
        # A cancel takes effect later (OpenAI: up to 10 minutes); the output file of what it
        # answered meanwhile appears then, and only a later release can delete it.
        release.problem = (f"the provider is still {release.status} it; the output file it "
                           "writes then is not deleted yet")
    elif release.problem is None and release.kept:
        release.problem = f"the provider kept file {', '.join(release.kept)}"
    return release


def billed(client: openai.OpenAI, batch_id: str, output_file: str | None) -> tuple[int, int]:
    """The tokens the provider billed for the replies in a released batch's output file
    (each line's usage: no reply is read), (0, 0) when it has none or it cannot be read."""
    if not output_file:
        return 0, 0
    try:
        text = client.files.content(output_file).text
    except (openai.OpenAIError, *UNDECODABLE) as exc:
        log.warning("llm.batch_usage_unread", batch_id=batch_id, file_id=output_file,
                    error_type=type(exc).__name__)
        return 0, 0
    state = BatchState(batch_id, "completed")
    read_output(text, state, "")
    return (sum(r.tokens_in for r in state.replies.values()) + state.unused_in,
            sum(r.tokens_out for r in state.replies.values()) + state.unused_out)


def read_output(text: str, state: BatchState, model: str) -> None:
    """Replies and failures of one output or error file into ``state``. A line that is not a
    result (broken JSON, no custom_id) answers nothing: its question stays unanswered. A
    request answered twice (two replies, or a reply and a failure, in either file) is failed:
    which answer holds is not ours to guess, and the last line read won before."""
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue
        custom_id = row.get("custom_id") if isinstance(row, dict) else None
        if not isinstance(custom_id, str):
            continue
        reply = _reply(row, model)
        if custom_id in state.replies or custom_id in state.failed:
            for unused in (state.replies.pop(custom_id, None), reply):  # both are billed
                if isinstance(unused, LLMReply):
                    state.unused_in += unused.tokens_in
                    state.unused_out += unused.tokens_out
            state.failed[custom_id] = "the batch answered this request more than once"
        elif isinstance(reply, LLMReply):
            state.replies[custom_id] = reply
        else:
            state.failed[custom_id] = reply


def _reply(row: dict[str, Any], model: str) -> LLMReply | str:
    """A result line's reply, or why it has none (no prompt text)."""
    failure = _failure(row)
    if failure:
        return failure
    try:
        return chat_reply(ChatCompletion.model_validate(row["response"]["body"]), model)
    except (pydantic.ValidationError, LLMError, KeyError, TypeError):
        return "the batch answered this request without a chat completion"


def _failure(row: dict[str, Any]) -> str:
    """Why a result line is a failure ("" when it carries a reply); never the prompt's text."""
    error = row.get("error")
    if isinstance(error, dict) and error:
        if says_too_long(400, error.get("code"), error.get("message")):
            return line_failed(TOO_LONG_CODE)
        return line_failed(str(error.get("code") or "error")[:40])
    response = row.get("response")
    status = response.get("status_code") if isinstance(response, dict) else None
    if status != 200:
        body = response.get("body") if isinstance(response, dict) else None
        said = body.get("error") if isinstance(body, dict) else None
        if isinstance(said, dict) and says_too_long(
                status, said.get("code"), said.get("type"), said.get("message")):
            # The same line fails the same way every run: remembered, not submitted again.
            return line_failed(TOO_LONG_CODE)
        return f"batch request failed (HTTP {status})"
    return ""
