"""Repositories: the only place SQL is written."""

from worker.store.repositories.judgements import JudgementRepository
from worker.store.repositories.notes import NoteRepository, ScopeSnapshot
from worker.store.repositories.registry import EntityRepository, SessionRepository
from worker.store.repositories.runs import RunRepository

__all__ = [
    "EntityRepository",
    "JudgementRepository",
    "NoteRepository",
    "RunRepository",
    "ScopeSnapshot",
    "SessionRepository",
]
