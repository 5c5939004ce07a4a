"""Fusion for a host with its own model: candidates, fuse, keep apart (worker.host)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from worker.api.deps import Caller, DreamApp, scope_for
from worker.api.schemas import CandidatesIn, FuseIn, KeepApartIn
from worker.host import fuse, fusion_candidates, keep_apart
from worker.runs.service import ensure_scope_known

router = APIRouter(prefix="/api/forgetting", tags=["forgetting"])


@router.post("/fusion-candidates")
def candidates(body: CandidatesIn, who: Caller, app: DreamApp) -> dict[str, Any]:
    """Similar pairs of a scope, the pairs a dream would ask a model about, open items, and a
    small scope's short notes as one topic (fuse each attribute's notes, keep the rest apart)."""
    scope = scope_for(who, body.scope)
    ensure_scope_known(app, scope)
    return {"candidates": fusion_candidates(app, scope, body.threshold, body.limit)}


@router.post("/fuse", status_code=201)
def fuse_notes(body: FuseIn, who: Caller, app: DreamApp) -> dict[str, Any]:
    """Replace the sources with the host's fused text in one transaction."""
    result = fuse(app, body.source_ids, body.fused_content, body.fused_importance,
                  body.strict, allowed_scope=who.scope, note_type=body.type,
                  source_versions=body.source_versions)
    return result.as_dict()


@router.post("/keep-apart")
def keep_notes_apart(body: KeepApartIn, who: Caller, app: DreamApp) -> dict[str, Any]:
    """Never offer these notes together again until one of them changes."""
    return keep_apart(app, body.source_ids, allowed_scope=who.scope,
                      source_versions=body.source_versions)
