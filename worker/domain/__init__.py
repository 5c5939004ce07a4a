"""Pure domain types shared by every phase; no I/O here."""

from worker.domain.types import (
    Note,
    NoteStatus,
    NoteType,
    PhaseReport,
    Protection,
    RunStatus,
    Scope,
    StepStatus,
    content_hash,
    normalise_text,
)

__all__ = [
    "Note",
    "NoteStatus",
    "NoteType",
    "PhaseReport",
    "Protection",
    "RunStatus",
    "Scope",
    "StepStatus",
    "content_hash",
    "normalise_text",
]
