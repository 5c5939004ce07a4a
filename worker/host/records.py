"""The JSON shape of a note as the host API returns it."""

from __future__ import annotations

from typing import Any

from worker.domain.types import Note


def note_record(note: Note) -> dict[str, Any]:
    return {
        "id": note.id,
        "scope": note.scope.as_dict(),
        "content": note.content,
        "type": note.type,
        "status": note.status,
        "protection": note.protection,
        "importance": note.importance,
        "access_count": note.access_count,
        "version": note.version,
        "created_at": note.created_at.isoformat() if note.created_at else None,
        "updated_at": note.updated_at.isoformat() if note.updated_at else None,
        "consolidated_into_id": note.consolidated_into_id,
        "consolidation_generation": note.consolidation_generation,
        # Orders two notes of one created_at (the later recorded was said later); null when
        # the store has no order for it.
        "write_seq": note.write_seq,
    }
