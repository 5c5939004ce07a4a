"""Submitting a phase's batch so that no batch is ever made the run does not know of: each
submission gets a key (``new_submission``) written ahead on the run's ledger before
the provider is asked and sent in the batch's metadata and its file's name. A create whose
answer was lost is looked up by that key and adopted (read and charged like any batch); so is
one a process that died before recording it left behind, at the phase's next attempt (a Celery
retry, a resumed run). Without a batch, the files uploaded under the key's name are deleted."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import structlog

from worker.llm.ask import AskStatus, Outcome
from worker.llm.base import BatchItem, BatchLLM, LLMError, SubmissionUnknown
from worker.llm.spending import Holds

if TYPE_CHECKING:
    from worker.llm.batch import BatchLedger

log = structlog.get_logger(__name__)


def new_submission() -> str:
    """A key no other submission has: sent in the batch's metadata and its file's name. Laid
    out as a UUIDv7 (its first 48 bits the milliseconds it was made at): a look that finds no
    batch with a young key is not trusted (``batch_lookup.submitted_at``), as a provider may
    list a batch late. Made here, not beside the look-up, which imports the ``openai``
    client: every run imports this module, and one without a model has no use for that
    package (15 MB and 0.7 s a process)."""
    return f"dw-{int(time.time() * 1000):012x}7{uuid.uuid4().hex[13:]}"


def submit(llm: BatchLLM, fresh: list[BatchItem], holds: Holds, ledger: BatchLedger,
           outcomes: dict[str, Outcome[Any]]) -> tuple[str, set[str]] | None:
    """One batch of the questions the budget allows, each holding its estimate until its
    reply is charged (so the caps bound what is submitted); the rest stop as
    budget_exhausted and are deferred, as online."""
    reserved = []
    for it in fresh:
        if holds.reserve(it.custom_id):
            reserved.append(it)
        else:
            outcomes[it.custom_id] = Outcome(None, AskStatus.BUDGET_EXHAUSTED,
                                             "model budget exhausted")
    if not reserved:
        return None
    ids = [it.custom_id for it in reserved]
    submission = new_submission()
    ledger.intend(submission, ids)  # before the provider is asked: a crash leaves it to look up
    try:
        batch_id = llm.submit_batch(reserved, submission)
    except LLMError as exc:
        if not isinstance(exc, SubmissionUnknown):  # no batch made, or none with its key
            ledger.unsubmitted(submission, str(exc))
        for it in reserved:
            outcomes[it.custom_id] = Outcome(None, AskStatus.ERROR, str(exc)[:300], attempts=1)
        return None
    ledger.record(batch_id, ids, submission)
    log.info("llm.batch_submitted", batch_id=batch_id, requests=len(ids),
             prompt=reserved[0].prompt_name, submission=submission)
    return batch_id, set(ids)


def adopt_open(llm: BatchLLM, ledger: BatchLedger) -> dict[str, str]:
    """Look up the submissions of this phase whose batch is unknown (an earlier attempt died
    between the create and its record, or could not look a lost answer up): a batch found by
    the key is recorded as submitted (then read, or released if the phase no longer asks its
    questions, as any batch of an earlier attempt); without one the files of its name are
    deleted and it is closed (its questions asked again). Those still unknown (the look
    failed) are not asked again this attempt (a second batch could be billed beside the
    first): their custom ids, each with the reason it is deferred (one line, no note text)."""
    unknown: dict[str, str] = {}
    for submission, ids in ledger.open_submissions():
        found = llm.find_submission(submission)
        if found.batch_id is not None:
            ledger.record(found.batch_id, sorted(ids), submission)
            log.warning("llm.batch_adopted", batch_id=found.batch_id, submission=submission,
                        requests=len(ids))
        elif found.problem is None:
            ledger.unsubmitted(submission, f"no batch with its key among the provider's most "
                               f"recent; {len(found.deleted)} file(s) of its name deleted")
            log.warning("llm.batch_submission_not_found", submission=submission,
                        files_deleted=len(found.deleted))
        else:
            why = (f"batch submission {submission} may be at the provider ({found.problem}); "
                   "not asked again until a look finds or rules it out; deferred to the next run")
            unknown.update(dict.fromkeys(ids, why))
            log.warning("llm.batch_submission_unknown", submission=submission,
                        problem=found.problem)
    return unknown
