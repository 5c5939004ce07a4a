"""SQLAlchemy 2 models for the memory store, the reference registry and run records.

Every scoped row carries ``scope_key`` (JSON of agent, user, company) so that "null is a value"
holds in plain equality and one index serves each per-scope bulk load.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from worker.store.types import Embedding, JSONType, UTCDateTime

ID = String(64)


class Base(DeclarativeBase):
    pass


class NoteRow(Base):
    __tablename__ = "notes"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    scope_key: Mapped[str] = mapped_column(String(400), nullable=False)
    agent_id: Mapped[str] = mapped_column(ID, nullable=False)
    user_id: Mapped[str | None] = mapped_column(ID)
    company_id: Mapped[str | None] = mapped_column(ID)
    source_conversation_id: Mapped[str | None] = mapped_column(ID)
    type: Mapped[str] = mapped_column(String(20), nullable=False, default="Context")
    content: Mapped[str] = mapped_column(Text, nullable=False)
    content_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    embedding: Mapped[np.ndarray | None] = mapped_column(Embedding())
    embedding_model: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="active")
    is_auto_generated: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    protection: Mapped[str] = mapped_column(String(16), nullable=False, default="standard")
    importance: Mapped[float] = mapped_column(Float, nullable=False, default=0.5)
    access_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    last_accessed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    valid_from: Mapped[datetime | None] = mapped_column(UTCDateTime())
    valid_to: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The note this one was merged or superseded into. No foreign key (migration 0010): on
    # SQLite a self-referencing one made every UPDATE setting it rewrite the row and all its
    # index entries. The worker sets it only in the write that inserts or re-checks the target,
    # and erase clears pointers at what it deletes.
    consolidated_into_id: Mapped[str | None] = mapped_column(ID)
    consolidation_generation: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    comments: Mapped[str | None] = mapped_column(Text)
    meta: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSONType())
    flags: Mapped[list[str] | None] = mapped_column(JSONType())
    # A fused note's provenance: the source conversations of every note it was written from,
    # transitively (NULL for a note written on its own), set when it is inserted, so prune
    # checks them in the look-up it makes anyway (migration 0011).
    lineage_conversation_ids: Mapped[list[str] | None] = mapped_column(JSONType())
    last_checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    version: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    # The order the store recorded the note in (``worker.clock.next_write_seq``, set by every
    # insert; NULL before migration 0016, or from an import in no order): which of two notes
    # stated at one same ``created_at`` came later. A note fused from others takes its newest
    # source's, as it takes its ``created_at``.
    write_seq: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (
        # (scope_key, status) look-ups use the prefix of ix_notes_scope_status_type_hash below.
        Index("ix_notes_scope_hash", "scope_key", "content_hash"),
        Index("ix_notes_user", "user_id"),
        Index("ix_notes_conversation", "source_conversation_id"),
        Index("ix_notes_consolidated_into", "consolidated_into_id"),
        # Covering index for write-time dedup (and every scope-and-status look-up, by its
        # prefix): a scope's active content hashes of one type come
        # from the index alone on every `remember`. No `id` in it on purpose: a query that also
        # needs the id then cannot be "covered" by it, so SQLite keeps using ix_notes_scope_hash
        # for hash look-ups instead of scanning the whole scope through this index.
        Index("ix_notes_scope_status_type_hash", "scope_key", "status", "type", "content_hash"),
    )


class NoteLineageRow(Base):
    """Provenance edge: ``parent`` note was folded into (or superseded by) ``child``."""

    __tablename__ = "note_lineage"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    scope_key: Mapped[str] = mapped_column(String(400), nullable=False)
    parent_id: Mapped[str] = mapped_column(ID, ForeignKey("notes.id", ondelete="CASCADE"))
    child_id: Mapped[str] = mapped_column(ID, ForeignKey("notes.id", ondelete="CASCADE"))
    relation: Mapped[str] = mapped_column(String(32), nullable=False)
    run_id: Mapped[str | None] = mapped_column(ID)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)

    __table_args__ = (
        Index("ix_lineage_parent", "parent_id"),
        Index("ix_lineage_child", "child_id"),
        Index("ix_lineage_run", "run_id"),
    )


class ExampleRow(Base):
    __tablename__ = "examples"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    scope_key: Mapped[str] = mapped_column(String(400), nullable=False)
    agent_id: Mapped[str] = mapped_column(ID, nullable=False)
    user_id: Mapped[str | None] = mapped_column(ID)
    company_id: Mapped[str | None] = mapped_column(ID)
    input: Mapped[str] = mapped_column(Text, nullable=False)
    output: Mapped[str] = mapped_column(Text, nullable=False)
    success_score: Mapped[float | None] = mapped_column(Float)
    is_auto_generated: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="active")
    access_count: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    last_accessed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    version: Mapped[int] = mapped_column(Integer, nullable=False, default=1)

    __table_args__ = (Index("ix_examples_scope_status", "scope_key", "status"),)


class AgentRow(Base):
    __tablename__ = "agents"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="active")
    note_retention_days: Mapped[int] = mapped_column(Integer, nullable=False, default=90)
    example_retention_days: Mapped[int] = mapped_column(Integer, nullable=False, default=180)
    auto_archive_enabled: Mapped[bool | None] = mapped_column(Boolean, default=True)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The agent's own gate (worker.runs.gate.GatePolicy); NULL = the deployment's DREAM_GATE_*.
    gate_hours: Mapped[float | None] = mapped_column(Float)
    gate_sessions: Mapped[int | None] = mapped_column(Integer)
    gate_notes: Mapped[int | None] = mapped_column(Integer)
    gate_idle_minutes: Mapped[float | None] = mapped_column(Float)
    gate_max_stale_hours: Mapped[float | None] = mapped_column(Float)
    # auto | propose | safe_auto (worker.review); NULL = the deployment's DREAM_APPLY_MODE.
    apply_mode: Mapped[str | None] = mapped_column(String(16))


class UserRow(Base):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="active")
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class CompanyRow(Base):
    __tablename__ = "companies"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="active")
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class ConversationRow(Base):
    __tablename__ = "conversations"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="active")
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    deleted_reason: Mapped[str | None] = mapped_column(String(32))


class SessionRow(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    scope_key: Mapped[str] = mapped_column(String(400), nullable=False)
    agent_id: Mapped[str] = mapped_column(ID, nullable=False)
    user_id: Mapped[str | None] = mapped_column(ID)
    company_id: Mapped[str | None] = mapped_column(ID)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # When this store recorded the session (NULL: recorded before revision 0019): a session
    # imported after a dream but dated before it counts toward the next one (the gate).
    recorded_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (Index("ix_sessions_scope_started", "scope_key", "started_at"),)


class DreamRunRow(Base):
    __tablename__ = "dream_runs"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    scope_key: Mapped[str] = mapped_column(String(400), nullable=False)
    agent_id: Mapped[str] = mapped_column(ID, nullable=False)
    user_id: Mapped[str | None] = mapped_column(ID)
    company_id: Mapped[str | None] = mapped_column(ID)
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="queued")
    trigger: Mapped[str] = mapped_column(String(16), nullable=False, default="cli")
    force: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    dry_run: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    phases: Mapped[list[str]] = mapped_column(JSONType(), nullable=False)
    clock: Mapped[datetime | None] = mapped_column(UTCDateTime())
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    lease_epoch: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    totals: Mapped[dict[str, Any] | None] = mapped_column(JSONType())
    error: Mapped[str | None] = mapped_column(Text)
    # Why a run is blocked or cancelled: one line of ids and counts, never note text.
    status_reason: Mapped[str | None] = mapped_column(Text)
    # How many retirements the operator allowed past the blast-radius guard (--allow-retire N).
    allow_retire: Mapped[int | None] = mapped_column(Integer)
    # When the run was last handed to an executor; a queued or interrupted run nobody claimed
    # within DREAM_QUEUED_TIMEOUT_SECONDS of this is re-enqueued by the gate check (R30).
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    requeues: Mapped[int] = mapped_column(Integer, nullable=False, default=0,
                                          server_default="0")
    # The Celery message (task id and retry) that last started one of the run's tasks, and
    # how many deliveries of it (and of the retries it backed off into) started in a row: a
    # delivery whose worker died never ends, and the next one counts it (``runs.deliveries``).
    delivery: Mapped[str | None] = mapped_column(String(200))
    deliveries: Mapped[int] = mapped_column(Integer, nullable=False, default=0,
                                            server_default="0")

    __table_args__ = (
        # R1: the database, not the broker, guarantees one queued/running/interrupted run per
        # scope (an interrupted run is resumed, never run beside a newer one).
        Index(
            "uq_dream_runs_one_active_per_scope",
            "scope_key",
            unique=True,
            sqlite_where=text("status IN ('queued', 'running', 'interrupted')"),
            postgresql_where=text("status IN ('queued', 'running', 'interrupted')"),
        ),
        Index("ix_dream_runs_scope_created", "scope_key", "created_at"),
        Index("ix_dream_runs_status", "status"),
    )


# The step rows of provider batches (``repositories.batches.BATCH_STEP_PREFIX``), as the partial
# index and its one query both spell it: a planner uses the index only for that very clause.
BATCH_STEPS = text("name LIKE 'llm batch %'")


class RunStepRow(Base):
    """One phase (parent) or one cluster/batch (child) of a run; what ops dashboards read."""

    __tablename__ = "run_steps"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    run_id: Mapped[str] = mapped_column(ID, ForeignKey("dream_runs.id", ondelete="CASCADE"))
    parent_id: Mapped[str | None] = mapped_column(ID, ForeignKey("run_steps.id", ondelete="CASCADE"))
    scope_key: Mapped[str] = mapped_column(String(400), nullable=False)
    phase: Mapped[str] = mapped_column(String(32), nullable=False)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    seq: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    input: Mapped[dict[str, Any] | None] = mapped_column(JSONType())
    output: Mapped[dict[str, Any] | None] = mapped_column(JSONType())
    error: Mapped[str | None] = mapped_column(Text)
    prompt_name: Mapped[str | None] = mapped_column(String(100))
    template_hash: Mapped[str | None] = mapped_column(String(64))
    model: Mapped[str | None] = mapped_column(String(200))
    tokens_in: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    tokens_out: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    duration_ms: Mapped[float | None] = mapped_column(Float)

    __table_args__ = (
        Index("ix_run_steps_run", "run_id"),
        Index("ix_run_steps_scope_started", "scope_key", "started_at"),
        Index("ix_run_steps_status", "status"),
        # Provider batch steps alone (a handful among the steps), by age: the gate check looks
        # for releases left incomplete on every beat without reading the whole table.
        Index("ix_run_steps_batch", "started_at", postgresql_where=BATCH_STEPS,
              sqlite_where=BATCH_STEPS),
    )


class OperationLogRow(Base):
    """Every row change a run made, with the before/after image undo needs."""

    __tablename__ = "operation_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str | None] = mapped_column(ID)
    scope_key: Mapped[str] = mapped_column(String(400), nullable=False)
    entity: Mapped[str] = mapped_column(String(16), nullable=False)  # note | example
    entity_id: Mapped[str] = mapped_column(ID, nullable=False)
    op: Mapped[str] = mapped_column(String(16), nullable=False)  # insert | update
    before: Mapped[dict[str, Any] | None] = mapped_column(JSONType())
    after: Mapped[dict[str, Any] | None] = mapped_column(JSONType())
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)

    __table_args__ = (
        Index("ix_oplog_run", "run_id"),
        Index("ix_oplog_entity", "entity_id"),
    )


class JudgementRow(Base):
    """Verdict memory: a cluster/pair already judged at these versions is not asked again."""

    __tablename__ = "judgements"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    scope_key: Mapped[str] = mapped_column(String(400), nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)  # cluster | pair | keep_apart | retire_pending
    fingerprint: Mapped[str] = mapped_column(String(64), nullable=False)
    note_ids: Mapped[list[str]] = mapped_column(JSONType(), nullable=False)
    verdict: Mapped[str] = mapped_column(String(32), nullable=False)
    reason: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(ID)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)

    __table_args__ = (
        UniqueConstraint("scope_key", "kind", "fingerprint", name="uq_judgements_fingerprint"),
    )


class ReviewRow(Base):
    """Something the worker would not decide alone (e.g. a conflict with a protected note)."""

    __tablename__ = "reviews"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    scope_key: Mapped[str] = mapped_column(String(400), nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    note_ids: Mapped[list[str]] = mapped_column(JSONType(), nullable=False)
    reason: Mapped[str | None] = mapped_column(Text)
    run_id: Mapped[str | None] = mapped_column(ID)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (Index("ix_reviews_scope", "scope_key"),)


class ReviewItemRow(Base):
    """A change a run planned and judged but did not apply (apply mode propose / safe_auto):
    what an operator approves (applied then, in its own small run) or declines."""

    __tablename__ = "review_items"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    scope_key: Mapped[str] = mapped_column(String(400), nullable=False)
    run_id: Mapped[str | None] = mapped_column(ID)  # the run that proposed it
    phase: Mapped[str] = mapped_column(String(32), nullable=False)
    kind: Mapped[str] = mapped_column(String(16), nullable=False)  # merge | revoke | flag | archive
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="open")
    # The notes the change writes, at the versions it was planned on (the staleness check).
    versions: Mapped[dict[str, int]] = mapped_column(JSONType(), nullable=False)
    fingerprint: Mapped[str] = mapped_column(String(64), nullable=False)
    content: Mapped[str | None] = mapped_column(Text)  # the fused text of a merge
    source_ids: Mapped[list[str] | None] = mapped_column(JSONType())
    relation: Mapped[str | None] = mapped_column(String(32))
    reason: Mapped[str | None] = mapped_column(Text)
    confidence: Mapped[float | None] = mapped_column(Float)
    payload: Mapped[dict[str, Any] | None] = mapped_column(JSONType())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    decided_by: Mapped[str | None] = mapped_column(String(200))
    applied_run_id: Mapped[str | None] = mapped_column(ID)  # the approval's own run
    outcome: Mapped[str | None] = mapped_column(Text)  # why it went stale or was declined

    __table_args__ = (
        Index("ix_review_items_scope_status", "scope_key", "status"),
        Index("ix_review_items_run", "run_id"),
    )


class InstanceKeyRow(Base):
    """Secrets of this database, each made once at random: ``note_ids`` keys the ids remember
    derives from a note's text, so an id outliving its note (a host's records, an erasure's
    own answer) cannot confirm a guess at what the note said."""

    __tablename__ = "instance_keys"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(128), nullable=False)
