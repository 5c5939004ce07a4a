"""Small settings sections (no environment reading: ``worker.config`` loads them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class BudgetSettings(BaseModel):
    max_calls_per_run: int | None = Field(None, ge=0)
    max_tokens_per_run: int | None = Field(None, ge=0)
    max_calls_per_scope: int | None = Field(None, ge=0)
    max_tokens_per_scope: int | None = Field(None, ge=0)


class PrivacySettings(BaseModel):
    redact: bool = False


class RememberSettings(BaseModel):
    noop_threshold: float = Field(0.85, ge=0.0, le=1.0)
    update_threshold: float = Field(0.5, ge=0.0, le=1.0)
    measure: Literal["jaccard", "cosine"] = "jaccard"


class HostSettings(BaseModel):
    """Limits on what a host may write through the API (fused text, remembered notes)."""

    max_fused_chars: int = Field(2000, ge=20)
    max_note_chars: int = Field(8000, ge=20)
