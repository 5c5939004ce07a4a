"""Notes a host writes: remember with write-time dedup (worker.host.remember)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from worker.api.deps import Caller, DreamApp, scope_for
from worker.api.schemas import NoteIn
from worker.host import remember

router = APIRouter(prefix="/api/notes", tags=["notes"])


@router.post("")
def add_note(body: NoteIn, who: Caller, app: DreamApp, response: Response) -> dict[str, Any]:
    """Write-time dedup: NOOP (already known), UPDATE (supersedes a shorter one) or ADD."""
    result = remember(app, scope_for(who, body.scope), body.content, body.type, body.importance,
                      body.conversation_id, body.manual)
    response.status_code = 200 if result.action == "NOOP" else 201
    return result.as_dict()
