"""JSONL export of notes, with status, pointers, comments, flags, lineage (parent, relation
and when the edge was recorded: the relation decides what an erasure follows), the keep-apart
sets that still bind and, for a note dated at a later statement of its fact, when it was said
(``statements``), in the form ``dream notes import`` reads back; not the version (a counter of
this store's writes) nor an edge's run id (this store's runs are not exported). Examples,
sessions (with when the store recorded each: what its gate counts from) and entities too
(``export_records``), as their importers read them."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import select

from worker.app import App
from worker.domain.types import NoteStatus, Scope, fingerprint_notes
from worker.errors import UnknownScope
from worker.phases.kit.snapshot import APART_KINDS
from worker.store.db import read_one_snapshot
from worker.store.models import (
    AgentRow,
    CompanyRow,
    ConversationRow,
    ExampleRow,
    SessionRow,
    UserRow,
)
from worker.store.repositories.said_dates import Statements


def export_notes(
    app: App, *, status: str | None = None, agent_id: str | None = None,
    user_id: str | None = None, company_id: str | None = None, with_embedding: bool = False,
) -> Iterator[str]:
    """The notes the filters select (None: any value), as JSONL lines. A filter no note,
    session or run matches is a mistyped scope: UnknownScope before the first line; a known
    scope without notes (of ``status``) exports nothing."""
    with app.uow() as uow:
        # One snapshot for every query: a host write or a dream's commit landing mid-export
        # would otherwise pair notes read before it with lineage and keep-apart sets read after
        # (a set naming a note the file lacks, which import refuses).
        read_one_snapshot(uow.session)
        if (agent_id, user_id, company_id) != (None, None, None) and \
                not uow.sessions.any_scope_matches(agent_id, user_id, company_id):
            given = (("--agent", agent_id), ("--user", user_id), ("--company", company_id))
            named = " ".join(f"{option} {shlex.quote(v)}" for option, v in given if v is not None)
            raise UnknownScope(f"unknown scope {named}: no note, session or run has it")
        batch: list[Any] = []
        apart: dict[str, dict[str, list[list[str]]]] = {}  # scope key → first id → sets
        for row in uow.notes.export_rows(status, agent_id, user_id, company_id,
                                         with_embedding=with_embedding):
            batch.append(row)
            if len(batch) >= 2000:
                yield from _lines(uow, batch, with_embedding, apart)
                batch = []
        if batch:
            yield from _lines(uow, batch, with_embedding, apart)


def _binding_apart(uow: Any, scope: Scope) -> dict[str, list[list[str]]]:
    """The scope's keep-apart sets (a host's, a declined review's) that still bind: every note
    active at the version it was given for; each under its first id."""
    rows = uow.judgements.of_kinds(scope, APART_KINDS)
    named = {i for r in rows for i in r.note_ids or ()}
    notes = {n.id: n for n in uow.notes.get_many(named)}
    out: dict[str, list[list[str]]] = {}
    for r in rows:
        ids = sorted(r.note_ids or ())
        members = [notes.get(i) for i in ids]
        if len(ids) < 2 or not all(n is not None and n.status == NoteStatus.ACTIVE.value
                                   for n in members):
            continue
        if fingerprint_notes([n for n in members if n is not None]) == r.fingerprint \
                and ids not in out.get(ids[0], []):
            out.setdefault(ids[0], []).append(ids)
    return out


def _lines(uow: Any, rows: list[Any], with_embedding: bool,
           apart: dict[str, dict[str, list[list[str]]]]) -> Iterator[str]:
    edges = uow.notes.dated_lineage([r.id for r in rows])
    said = uow.notes.statements([r.id for r in rows])
    for r in rows:
        key = Scope(r.agent_id, r.user_id, r.company_id).key
        if key not in apart:
            apart[key] = _binding_apart(uow, Scope.from_key(key))
        obj: dict[str, Any] = {
            "id": r.id, "agent_id": r.agent_id, "user_id": r.user_id, "company_id": r.company_id,
            "type": r.type, "content": r.content, "status": r.status,
            "protection": r.protection, "is_auto_generated": r.is_auto_generated,
            "importance": r.importance, "access_count": r.access_count,
            "created_at": _iso(r.created_at), "updated_at": _iso(r.updated_at),
            "last_accessed_at": _iso(r.last_accessed_at), "expires_at": _iso(r.expires_at),
            "valid_from": _iso(r.valid_from), "valid_to": _iso(_ended(r.valid_from, r.valid_to)),
            "last_checked_at": _iso(r.last_checked_at),
            "source_conversation_id": r.source_conversation_id,
            "consolidated_into_id": r.consolidated_into_id, "comments": r.comments,
            "consolidation_generation": r.consolidation_generation,
            "flags": list(r.flags or []),
            "lineage_conversation_ids": r.lineage_conversation_ids,
            "write_seq": r.write_seq,
            "lineage": [{"parent_id": parent, "relation": relation, "created_at": _iso(at)}
                        for parent, relation, at in sorted(edges.get(r.id, []))],
            "metadata": r.meta,
            "kept_apart": sorted(apart[key].get(r.id, [])),
        }
        if (statements := _statements(said.get(r.id), r.created_at)) is not None:
            obj["statements"] = statements
        if with_embedding and r.embedding is not None:
            obj["embedding_model"] = r.embedding_model
            # Nine significant digits give back every float32 bit (import keeps a unit vector
            # as it is), in about the text six decimals took; json.dumps would write 17.
            line = json.dumps(obj, ensure_ascii=False)
            numbers = ",".join(f"{x:.9g}" for x in np.asarray(r.embedding, np.float32).tolist())
            yield f'{line[:-1]}, "embedding": [{numbers}]}}'
            continue
        yield json.dumps(obj, ensure_ascii=False)


def _ended(began: datetime | None, ended: datetime | None) -> datetime | None:
    """A note's ``valid_to`` as the worker writes it now, never before its ``valid_from``: a
    worker before that could end a fusion or an imported note so, and the import refuses a
    validity that ends before it begins (so an export always imports)."""
    return began if began is not None and ended is not None and ended < began else ended


def _statements(said: Statements | None, created_at: datetime | None) -> dict[str, Any] | None:
    """When the note's fact was said, as ``dream notes import`` reads it back: the note's own
    first date, then each later statement no note holds (an import's line, a host's remember)
    with the conversation it was said in. None dated after the note's own date (an erasure
    never dates a note forward, and import refuses them), so an export always imports."""
    if said is None or created_at is None:
        return None
    when, seq = said.first
    if when is None or when > created_at:
        return None
    return {"first": {"created_at": _iso(when), "write_seq": seq},
            "again": [{"created_at": _iso(at), "write_seq": at_seq,
                       "source_conversation_id": conversation}
                      for (at, at_seq), conversation in said.again
                      if at is not None and at <= created_at]}


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


# The other records a store needs back after an export → import: what the importers read.
_SCOPE = ("id", "agent_id", "user_id", "company_id")
_RECORDS: dict[str, tuple[tuple[str | None, type[Any], tuple[str, ...]], ...]] = {
    "examples": ((None, ExampleRow, (*_SCOPE, "input", "output", "success_score",
                                     "is_auto_generated", "status", "access_count",
                                     "last_accessed_at", "created_at", "expires_at")),),
    "sessions": ((None, SessionRow, (*_SCOPE, "started_at", "ended_at", "recorded_at")),),
    "entities": (
        ("agent", AgentRow, ("id", "status", "deleted_at", "name", "note_retention_days",
                             "example_retention_days", "auto_archive_enabled", "gate_hours",
                             "gate_sessions", "gate_notes", "gate_idle_minutes",
                             "gate_max_stale_hours", "apply_mode")),
        ("user", UserRow, ("id", "status", "deleted_at")),
        ("company", CompanyRow, ("id", "status", "deleted_at")),
        ("conversation", ConversationRow, ("id", "status", "deleted_at", "deleted_reason")),
    ),
}


def export_records(app: App, what: str) -> Iterator[str]:
    """Every row of ``what`` (``examples``, ``sessions`` or ``entities``), by id, as the JSONL
    lines its importer reads back (an entity's line names its ``kind``); one snapshot."""
    with app.uow() as uow:
        read_one_snapshot(uow.session)
        for kind, model, keys in _RECORDS[what]:
            stmt = select(model).order_by(model.id).execution_options(yield_per=2000)
            for row in uow.session.scalars(stmt):
                obj = {"kind": kind} if kind else {}
                obj.update((key, _plain(getattr(row, key))) for key in keys)
                if model is SessionRow and obj["recorded_at"] is None:
                    # Recorded before the store kept the time (revision 0019): its gate counts
                    # it by its start alone, as it counts one recorded as it started.
                    obj["recorded_at"] = obj["started_at"]
                yield json.dumps(obj, ensure_ascii=False)


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value
