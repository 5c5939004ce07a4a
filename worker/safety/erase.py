"""Erasure (R19): the only path that hard-deletes notes (R18).

Removes the subject's notes and every note derived from them through lineage (transitively,
re-deriving nothing), with their embeddings, lineage rows, operation-log rows and any log,
judgement, review or step record that names them or quotes their text — in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog

from worker.app import App
from worker.runs.service import RunError

log = structlog.get_logger(__name__)


@dataclass
class EraseResult:
    subject: str
    note_ids: list[str] = field(default_factory=list)
    derived_ids: list[str] = field(default_factory=list)  # erased because derived from the subject
    counts: dict[str, int] = field(default_factory=dict)


def erase(
    app: App, *, user_id: str | None = None, conversation_id: str | None = None,
    note_id: str | None = None,
) -> EraseResult:
    given = [v for v in (user_id, conversation_id, note_id) if v is not None]
    if len(given) != 1:
        raise RunError("give exactly one of --user, --conversation or --note")
    subject = (f"user {user_id}" if user_id is not None else
               f"conversation {conversation_id}" if conversation_id is not None else
               f"note {note_id}")
    with app.uow() as uow:
        seed = uow.safety.subject_note_ids(user_id=user_id, conversation_id=conversation_id,
                                           note_id=note_id)
        if note_id is not None and not seed:
            raise RunError(f"no note with id {note_id}")
        ids = uow.safety.derived_closure(seed)
        found = uow.safety.contents(ids)
        texts = sorted({content for _, content in found.values()})
        scope_keys = {key for key, _ in found.values()}
        counts = uow.safety.erase_notes(set(found), texts, scope_keys)
        if user_id is not None:
            counts["examples"] = uow.safety.erase_examples(user_id)
        uow.commit()
    result = EraseResult(subject, sorted(seed), sorted(set(found) - seed), counts)
    log.info("erase.finished", subject_kind=subject.split()[0], notes=counts.get("notes", 0),
             derived=len(result.derived_ids))
    return result
