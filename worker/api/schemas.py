"""Request bodies of the host API (responses are plain JSON documented by example)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from worker.domain.types import Scope

# Ids and scope parts: no NUL (PostgreSQL text cannot hold it), at most the column width.
Ident = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\x00]+$")]


class ScopeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_id: Ident
    user_id: Ident | None = None
    company_id: Ident | None = None

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

    source_ids: list[Ident] = Field(max_length=50)
    fused_content: str = Field(max_length=100_000)
    fused_importance: float | None = Field(None, ge=0.0, le=1.0)
    strict: bool = Field(False, description="Refuse (422) instead of warning on ungrounded facts.")
    type: str | None = Field(None, max_length=20)


class KeepApartIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source_ids: list[Ident] = Field(max_length=50)


class NoteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeIn | None = None
    content: str = Field(max_length=100_000)
    type: str = Field("Context", max_length=20)
    importance: float = Field(0.5, ge=0.0, le=1.0)


class RunIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: ScopeIn | None = None
    force: bool = False  # skips the gate only
    dry_run: bool = False
    # Retirements this run may make past the blast-radius guard's share (R20).
    allow_retire: int | None = Field(None, ge=0, le=10_000_000)


class UndoIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    force_cascade: bool = False
