"""Submitting a provider batch for OpenAICompatibleLLM (``openai_batch``): the input file
uploaded, the batch created, each tried again only while the endpoint says it did nothing. A
create whose answer was lost is looked up by its submission key (``batch_lookup``), never sent
again: a second batch would be billed beside one the run never learns of."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

import openai
import structlog
from openai.types import Batch, FileObject

from worker.llm.base import BatchItem, LLMError, SubmissionUnknown
from worker.llm.batch_lookup import LOOKED, PROVIDER_ID, file_name, look_up, maybe_created
from worker.llm.openai_batch import ENDPOINT, answered, batch_lines, forget_files
from worker.llm.openai_compat import (
    MAX_BACKOFF,
    OpenAICompatibleLLM,
    client_error,
    never_sent,
    parse_retry_after,
)

log = structlog.get_logger(__name__)


def submit_batch(llm: OpenAICompatibleLLM, items: Sequence[BatchItem], submission: str) -> str:
    """Upload the requests (purpose ``batch``, named after ``submission``) and start a 24 h
    batch carrying ``submission`` in its metadata; its id. Neither call is retried by the
    client: a create whose answer was lost may have been carried out, and another would be
    billed beside one the run never learns of. Each is tried again here while the endpoint
    says it did nothing (``_retry_wait``); a batch a create may have made is looked up by its
    key instead (``batch_lookup``) and adopted; a lost upload's file is found by its name and
    deleted."""
    try:
        with llm.sync_client() as client:
            once = client.with_options(max_retries=0)
            uploaded = _upload(llm, client, once, items, submission)
            batch = _create(llm, client, once, (items[0].prompt_name, submission), uploaded.id)
            if isinstance(batch, str):  # adopted: found by its key
                return batch
            if not PROVIDER_ID.fullmatch(batch.id):
                forget_files(client, "(no id)", (uploaded.id,))
                raise LLMError("model endpoint answered a batch id that is no id (1 to 100 "
                               "letters, digits, '_', '-', '.' or ':'); check the server, "
                               "which may still run that batch; the items are deferred to the "
                               "next run")
    except openai.APIConnectionError:
        raise LLMError("cannot reach the model endpoint to submit a batch; check "
                       "DREAM_LLM_BASE_URL; the items are deferred to the next run") from None
    except openai.OpenAIError as exc:
        raise client_error(exc) from None
    return batch.id


def _upload(llm: OpenAICompatibleLLM, client: openai.OpenAI, once: openai.OpenAI,
            items: Sequence[BatchItem], submission: str) -> FileObject:
    """The uploaded requests. A 429, a 5xx or a lost answer is tried again (``_retry_wait``):
    an upload makes no batch, and what a failed one may have stored is deleted first (found by
    its name); a file the look cannot rule out stops the tries (``SubmissionUnknown``)."""
    data = batch_lines(llm, items)
    for attempt in itertools.count():
        try:
            return answered(lambda: once.files.create(
                file=(file_name(submission), data, "application/jsonl"), purpose="batch"),
                FileObject, "file")
        except (LLMError, openai.OpenAIError) as exc:
            error = _lost_upload(client, submission, exc)
            wait = None if isinstance(error, SubmissionUnknown) else _retry_wait(
                llm, exc, attempt, upload=True)
            if wait is None:
                raise _tried(error, attempt) from None
            _log_retry("upload", exc, attempt, wait)
    raise AssertionError("unreachable")


def _create(llm: OpenAICompatibleLLM, client: openai.OpenAI, once: openai.OpenAI,
            named: tuple[str, str], input_id: str) -> Batch | str:
    """The batch made of ``input_id`` (``named``: its prompt and submission key), or the id of
    the one a create whose answer was lost made (``_lost_create``). Tried again only on an
    answer that says the endpoint made nothing (a 429, a request that never reached it)."""
    prompt, submission = named
    for attempt in itertools.count():
        try:
            return answered(lambda: once.batches.create(
                input_file_id=input_id, endpoint=ENDPOINT, completion_window="24h",
                metadata={"source": "dream-worker", "prompt": prompt[:64],
                          "submission": submission}), Batch, "batch")
        except (LLMError, openai.OpenAIError) as exc:
            wait = None if maybe_created(exc) else _retry_wait(llm, exc, attempt, upload=False)
            if wait is None:
                try:
                    return _lost_create(client, submission, input_id, exc)
                except LLMError as failed:
                    raise _tried(failed, attempt) from None
            _log_retry("create", exc, attempt, wait)
    raise AssertionError("unreachable")


_DEFERRED = "; the items are deferred to the next run"
# A Retry-After longer than this is not waited for in a phase: the items are deferred.
SUBMIT_WAIT_CAP = 60.0
_NOT_DONE = frozenset({408, 409, 429})  # statuses that say the request was not carried out


def _retry_wait(llm: OpenAICompatibleLLM, exc: Exception, attempt: int, *,
                upload: bool) -> float | None:
    """Seconds to wait before trying a failed submit call again (its Retry-After, else a
    backoff), or None: out of DREAM_LLM_MAX_RETRIES, a refusal that will not pass, an HTTP
    200 that is no object, a wait past ``SUBMIT_WAIT_CAP``, and for a create (``upload``
    False) a 5xx or a lost answer, after which the batch may exist."""
    if attempt >= llm.max_retries:
        return None
    if isinstance(exc, openai.APIStatusError):
        if not (exc.status_code in _NOT_DONE or (upload and exc.status_code >= 500)):
            return None
        wait = parse_retry_after(exc.response.headers)
    elif not isinstance(exc, openai.APIConnectionError) or not (upload or never_sent(exc)):
        return None
    else:
        wait = None
    wait = min(MAX_BACKOFF, 0.5 * 2**attempt) if wait is None else wait
    return wait if wait <= SUBMIT_WAIT_CAP else None


def _log_retry(call: str, exc: Exception, attempt: int, wait: float) -> None:
    log.info("llm.batch_submit_retry", call=call, attempt=attempt + 1, wait=round(wait, 2),
             status=getattr(exc, "status_code", None), error_type=type(exc).__name__)
    time.sleep(wait)


def _tried(error: LLMError, attempt: int) -> LLMError:
    """``error`` as the submission's one reason: how many times the call was tried when more
    than once, and that the items wait for the next run."""
    said = str(error).removesuffix(_DEFERRED)
    return type(error)(f"{said}{f' (tried {attempt + 1} times)' if attempt else ''}{_DEFERRED}")


def _submit_error(exc: Exception) -> LLMError:
    """The one line a failed upload or create becomes."""
    if isinstance(exc, LLMError):
        return exc
    if isinstance(exc, openai.APIConnectionError):
        return LLMError("cannot reach the model endpoint to submit a batch; check "
                        "DREAM_LLM_BASE_URL")
    return client_error(exc)


def _lost_upload(client: openai.OpenAI, submission: str, exc: Exception) -> LLMError:
    """The error of an upload that failed; one whose answer was lost may have stored the file
    (every prompt: note text), which is found by its name and deleted."""
    error = _submit_error(exc)
    if not maybe_created(exc):
        return error
    found = look_up(client, submission, batch=False)
    log.warning("llm.batch_upload_lost", submission=submission, files_deleted=len(found.deleted),
                problem=found.problem)
    if found.problem is not None:
        return SubmissionUnknown(
            f"{error}; the file may have been stored all the same and looking for it failed "
            f"({found.problem}): delete the batch file named {file_name(submission)} at the "
            "provider if it is there; the items are deferred to the next run")
    return LLMError(f"{error}; {len(found.deleted)} file(s) it stored all the same deleted; "
                    "the items are deferred to the next run")


def _lost_create(client: openai.OpenAI, submission: str, input_id: str, exc: Exception) -> str:
    """The batch a create that failed made anyway (its answer was lost), found by its key and
    adopted; else the input file deleted (it holds every prompt) and the create's error. A
    look that settles nothing (it failed, or the key is too young for a "none": a provider may
    list a batch late) keeps the input file and leaves the submission open."""
    error = _submit_error(exc)
    if not maybe_created(exc):  # refused: no batch
        forget_files(client, "(no batch)", (input_id,))
        raise LLMError(f"{error}; the items are deferred to the next run")
    found = look_up(client, submission)
    if found.batch_id is not None:
        log.warning("llm.batch_adopted", batch_id=found.batch_id, submission=submission,
                    error=str(error)[:200])
        return found.batch_id
    if found.problem is not None:  # its input file is kept for the batch a later look adopts
        raise SubmissionUnknown(
            f"{error}; the batch may have been created all the same and the look for it by "
            f"its key settled nothing ({found.problem}): if the provider lists a batch with "
            f"metadata submission={submission}, cancel it there and delete its input file "
            f"{input_id}; the items are deferred to the next run")
    forget_files(client, "(no batch)", (input_id,))
    log.warning("llm.batch_create_lost", submission=submission, looked=LOOKED)
    raise LLMError(f"{error}; no batch with its key ({submission}) is among the provider's "
                   f"{LOOKED} most recent, so none was made; the items are deferred to the next "
                   "run")
