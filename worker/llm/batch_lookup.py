"""A provider batch or uploaded file whose create answer was lost (the connection dropped after
the provider accepted it, a timeout, a proxy's error page): found again by the submission key
it was sent with, among the provider's most recent batches (``metadata.submission``) and
batch files (its file name). Only an exact match of the key is touched: a batch or file
another run or scope made (another key, or none) is never adopted, cancelled or deleted.

The key is opaque (``dw-`` and a UUIDv7, ``batch_submit.new_submission``): it names no scope,
run or note, only when it was made. A provider may list a batch late: a look that finds none
for a key younger than ``LISTED_WITHIN`` settles nothing (the input file is kept for the batch
a later look may adopt)."""

from __future__ import annotations

import re
import time
from typing import Any

import openai
import structlog

from worker.llm.base import SubmissionLookup
from worker.llm.openai_compat import UNDECODABLE, never_sent

log = structlog.get_logger(__name__)

# A bounded look: this many pages of this many of the provider's most recent batches (and
# batch files). A lost answer is looked up at once, so the batch is among the newest unless
# the account submits hundreds of batches a minute.
SEARCH_PAGES = 3
PAGE_SIZE = 100
LOOKED = SEARCH_PAGES * PAGE_SIZE

# A batch id names its run step (``llm batch <id>``, at most 200 characters), log lines and
# what `dream runs cancel` prints: another string (pages of text, an escape sequence) failed
# the step's write on PostgreSQL, orphaning the batch, or was printed raw.
PROVIDER_ID = re.compile(r"[A-Za-z0-9_.:-]{1,100}")

# How long after its create a provider may still not list a batch (seconds): a look that finds
# none sooner is no proof there is none. Before, the first look's "none" deleted the input file
# of a batch listed a moment later, and closed its submission (its questions asked again).
LISTED_WITHIN = 600.0
_MADE_AT = re.compile(r"dw-([0-9a-f]{12})7[0-9a-f]{19}")


def submitted_at(submission: str) -> float | None:
    """When the key was made (epoch seconds, ``batch_submit.new_submission``); None for a key
    that does not say (one of an older version: a uuid4)."""
    made = _MADE_AT.fullmatch(submission)
    return int(made[1], 16) / 1000 if made else None


def too_young(submission: str) -> bool:
    """Whether a batch made with ``submission`` may still be missing from the provider's list."""
    made = submitted_at(submission)
    return made is not None and time.time() - made < LISTED_WITHIN


def file_name(submission: str) -> str:
    return f"{submission}.jsonl"


def maybe_created(exc: Exception) -> bool:
    """Whether a create that raised ``exc`` may have been carried out: its answer was lost (the
    connection dropped or timed out once the request was sent, an HTTP 200 that is no object,
    a 5xx from the server or a proxy in front of it). A 4xx is a refusal, and a request that
    never reached the server whole (no connection) made nothing."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500
    return not (isinstance(exc, openai.APIConnectionError) and never_sent(exc))


def _pages(first: Any) -> list[Any]:
    """The items of at most ``SEARCH_PAGES`` pages from ``first`` on."""
    items: list[Any] = []
    page = first
    for n in range(SEARCH_PAGES):
        items += list(getattr(page, "data", None) or ())
        if n + 1 == SEARCH_PAGES or not page.has_next_page():
            break
        page = page.get_next_page()
    return items


def find_batch(client: openai.OpenAI, submission: str) -> str | None:
    """The id of the batch sent with ``submission`` among the provider's most recent, or None."""
    for batch in _pages(client.batches.list(limit=PAGE_SIZE)):
        metadata = getattr(batch, "metadata", None)
        batch_id = getattr(batch, "id", None)
        if (isinstance(metadata, dict) and metadata.get("submission") == submission
                and isinstance(batch_id, str) and PROVIDER_ID.fullmatch(batch_id)):
            return batch_id
    return None


def find_files(client: openai.OpenAI, submission: str) -> list[str]:
    """The ids of the batch files uploaded under ``submission``'s name, most recent first."""
    name = file_name(submission)
    return [f.id for f in _pages(client.files.list(purpose="batch", limit=PAGE_SIZE,
                                                   order="desc"))
            if getattr(f, "filename", None) == name
            and isinstance(getattr(f, "id", None), str) and PROVIDER_ID.fullmatch(f.id)]


def look_up(client: openai.OpenAI, submission: str, *, batch: bool = True) -> SubmissionLookup:
    """Find the batch made with ``submission``; without one, delete every file uploaded under
    its name (they hold every prompt: note text). A batch found keeps its input file: it is
    deleted when the batch is read or released. None found for a key made less than
    ``LISTED_WITHIN`` ago settles nothing: the files are kept and that is the ``problem``.
    ``batch`` False: no create was sent (a lost upload), only the files are looked for. Never
    raises for the provider: a look that failed is the lookup's ``problem`` (what the provider
    holds is then unknown)."""
    from worker.llm.openai_batch import forget_files

    found = SubmissionLookup(submission)
    try:
        found.batch_id = find_batch(client, submission) if batch else None
        if found.batch_id is None and batch and too_young(submission):
            found.problem = (f"no batch with its key is listed yet, and a provider may list one "
                             f"late: looked up again once the key is {LISTED_WITHIN / 60:g} "
                             "minutes old")
        elif found.batch_id is None:
            found.deleted, found.kept = forget_files(client, "(no batch)",
                                                     find_files(client, submission))
    except (openai.OpenAIError, *UNDECODABLE) as exc:
        status = getattr(exc, "status_code", None)
        found.problem = (f"could not list the provider's batches and files "
                         f"({f'HTTP {status}' if status else type(exc).__name__})")
    if found.kept and found.problem is None:
        found.problem = f"the provider kept file {', '.join(found.kept)}"
    log.info("llm.batch_submission_looked_up", submission=submission, batch_id=found.batch_id,
             files_deleted=len(found.deleted), problem=found.problem)
    return found
