"""Request bodies of the host API (responses are plain JSON documented by example)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from worker.domain.limits import (
    ID_MAX,
    INT_MAX,
    json_text_problem,
    line_problem,
    reorder_problem,
    scope_problem,
    visible_problem,
)
from worker.domain.types import Scope
from worker.host.fusion import MAX_SOURCE_IDS

# Ids and scope parts: no NUL (PostgreSQL text cannot hold it), at most the column width.
Ident = Annotated[str, Field(min_length=1, max_length=ID_MAX, pattern=r"^[^\x00]+$")]


def _visible(value: str) -> str:
    if problem := visible_problem(value) or reorder_problem(value) or line_problem(value):
        raise ValueError(problem)
    return value


# Text someone reads (who decided): when given, something visible in it, on one line (a control
# character, an escape sequence's ESC, would reach `dream review show` and a refusal's line).
# At most 100 characters, checked on the string before its text (on the optional field
# pydantic said "at most 100 items after validation", which names no characters).
VisibleText = Annotated[str, Field(max_length=100), AfterValidator(_visible)]


class Body(BaseModel):
    """Every request body: unknown fields, NaN/Infinity (and 1e400, which parses as infinity)
    and strings no backend can store (NUL, lone surrogates) are a 422, never a 500. Strict
    types: ``"force": "true"`` or ``"item_id": "7"`` is a 422 naming the type, not a forced run
    or an approval read into a string (a whole number still fills a float field)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _storable_text(cls, data: Any) -> Any:
        # The field named (before: "body: a string is not valid Unicode", which left the
        # sender to guess which of its strings held the "\ud800" escape or the NUL).
        if problem := json_text_problem(data):
            raise ValueError(f"{problem}; send the text without it")
        return data


class ScopeIn(Body):
    agent_id: Ident
    user_id: Ident | None = None
    company_id: Ident | None = None

    @model_validator(mode="after")
    def _fits(self) -> ScopeIn:
        if problem := scope_problem(self.to_scope()):
            raise ValueError(problem)
        return self

    def to_scope(self) -> Scope:
        return Scope(self.agent_id, self.user_id, self.company_id)


class CandidatesIn(Body):
    scope: ScopeIn | None = Field(None, description="Required for admin tokens; a scoped token "
                                  "defaults to its own scope.")
    threshold: float = Field(0.88, ge=0.0, le=1.0)
    limit: int = Field(50, ge=1, le=500)


# Note id → the version a candidates listing showed: a source changed since is a 409.
JudgedVersions = Annotated[dict[Ident, Annotated[int, Field(ge=1, le=INT_MAX)]] | None, Field(
    None, max_length=MAX_SOURCE_IDS, description="The version of each source your model judged "
    "(the candidates' `version`): a source changed since is refused (409), nothing written.")]


class FuseIn(Body):
    source_ids: list[Ident] = Field(max_length=MAX_SOURCE_IDS)
    source_versions: JudgedVersions = None
    fused_content: str = Field(max_length=100_000)
    fused_importance: float | None = Field(None, ge=0.0, le=1.0)
    strict: bool = Field(False, description="Refuse (422) instead of warning on ungrounded facts.")
    type: str | None = Field(None, max_length=20)


class KeepApartIn(Body):
    source_ids: list[Ident] = Field(max_length=MAX_SOURCE_IDS)
    source_versions: JudgedVersions = None


class NoteIn(Body):
    scope: ScopeIn | None = None
    content: str = Field(max_length=100_000)
    type: str = Field("Context", max_length=20)
    importance: float = Field(0.5, ge=0.0, le=1.0)
    conversation_id: Ident | None = None  # the conversation it was said in (its source)
    manual: bool = True  # a person's note (R26); false: an agent's own, maintained by dreams


class RunIn(Body):
    scope: ScopeIn | None = None
    force: bool = False  # skips the gate only
    dry_run: bool = False
    # Retirements this run may make past the blast-radius guard's share (R20).
    allow_retire: int | None = Field(None, ge=0, le=10_000_000)


class UndoIn(Body):
    force_cascade: bool = False
