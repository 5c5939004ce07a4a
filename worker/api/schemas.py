"""Request bodies of the host API (responses are plain JSON documented by example)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from worker.domain.types import Scope


class ScopeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_id: str = Field(min_length=1, max_length=64)
    user_id: str | None = Field(None, min_length=1, max_length=64)
    company_id: str | None = Field(None, min_length=1, max_length=64)

    def to_scope(self) -> Scope:
        return Scope(self.agent_id, self.user_id, self.company_id)


class CandidatesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeIn | None = Field(None, description="Required for admin tokens; a scoped token "
                                  "defaults to its own scope.")
    threshold: float = Field(0.88, ge=0.0, le=1.0)
    limit: int = Field(50, ge=1, le=500)


class FuseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source_ids: list[str] = Field(max_length=50)
    fused_content: str = Field(max_length=100_000)
    fused_importance: float | None = Field(None, ge=0.0, le=1.0)
    strict: bool = Field(False, description="Refuse (422) instead of warning on ungrounded facts.")
    type: str | None = None


class KeepApartIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source_ids: list[str] = Field(max_length=50)


class NoteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeIn | None = None
    content: str = Field(max_length=100_000)
    type: str = "Context"
    importance: float = Field(0.5, ge=0.0, le=1.0)


class RunIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeIn | None = None
    force: bool = False
    dry_run: bool = False


class UndoIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    force_cascade: bool = False
