"""Bulk (re-)embedding of a scope's notes that lack a vector from the configured model."""

from __future__ import annotations

from typing import Any

from worker.domain.types import Scope


def ensure_scope_embeddings(app: Any, scope: Scope) -> int:
    """Embed every active note of the scope missing a current vector; one read, one bulk write."""
    embedder = app.embedder
    with app.uow() as uow:
        missing = uow.notes.needing_embedding(scope, embedder.model_name)
    if not missing:
        return 0
    texts = [content for _, content in missing]
    vectors = embedder.embed(texts)
    with app.uow() as uow:
        uow.notes.set_embeddings(
            [(nid, vectors[i]) for i, (nid, _) in enumerate(missing)], embedder.model_name,
            scope.key)
        uow.commit()
    return len(missing)
