"""What an imported note says about other notes: ``consolidated_into_id``, ``comments``,
``consolidation_generation``, ``lineage_conversation_ids`` and ``lineage`` (the edges ``dream
notes export`` writes). Stored as
given, so an export imports back unchanged; every pointer and edge is checked against the file and
the store first, so an import never leaves one at a note that is not there (lineage has foreign
keys, erasure follows both).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from worker.domain.limits import INT_MAX, ident_problem
from worker.ingest.fields import opt_number, opt_str, opt_time
from worker.ingest.jsonl import InputError
from worker.store.uow import UnitOfWork

MAX_RELATION_CHARS = 32  # note_lineage.relation
MAX_LINEAGE_CONVERSATIONS = 10_000  # a fusion of fusions of whole conversations, and then some
Edges = list[tuple[str, str]]  # (parent id, relation) of one child
EdgeDates = dict[tuple[str, str], datetime]  # (parent id, relation) → when the edge was recorded


def parse_links(obj: dict[str, Any], number: int) -> dict[str, Any]:
    """The line's pointer, comments, fusion generation (what caps re-fusing) and lineage edges
    (``lineage`` and the dates its entries give, ``lineage_dates``: no columns, the caller
    takes them out of the row)."""
    generation = opt_number(obj, "consolidation_generation", number, 0, lo=0, hi=INT_MAX)
    if generation != int(generation):
        raise InputError(f"line {number}: consolidation_generation must be a whole number")
    comments = obj.get("comments")
    if comments is not None and not isinstance(comments, str):
        raise InputError(f"line {number}: comments must be a string")
    raw = obj.get("lineage")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise InputError(f"line {number}: lineage must be an array")
    edges = [_edge(entry, number) for entry in raw]
    return {"consolidated_into_id": opt_str(obj, "consolidated_into_id", number),
            "comments": comments, "consolidation_generation": int(generation),
            "lineage_conversation_ids": _conversations(obj.get("lineage_conversation_ids"),
                                                       number),
            "lineage": [(parent, relation) for parent, relation, _ in edges],
            "lineage_dates": {(parent, relation): at for parent, relation, at in edges
                              if at is not None}}


def _conversations(value: object, number: int) -> list[str] | None:
    """A fused note's sources' conversations (what prune checks it against), as the export
    writes them (distinct: every writer stores a set); absent (an older export) is none."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_LINEAGE_CONVERSATIONS:
        raise InputError(f"line {number}: lineage_conversation_ids must be an array of at most "
                         f"{MAX_LINEAGE_CONVERSATIONS} conversation ids")
    for entry in value:
        if not isinstance(entry, str) or (problem := ident_problem(entry)):
            what = problem if isinstance(entry, str) else "must be a non-empty string"
            raise InputError(f"line {number}: a lineage conversation id {what}")
    if len(set(value)) != len(value):  # as flags: the export never writes one twice
        raise InputError(f"line {number}: lineage_conversation_ids names a conversation twice; "
                         "give each once")
    return sorted(value) or None


def _edge(entry: object, number: int) -> tuple[str, str, datetime | None]:
    """(parent, relation, when recorded: None for the child's ``created_at``, as exports before
    the date was written)."""
    if not isinstance(entry, dict) or not {"parent_id", "relation"} <= set(entry) \
            or not set(entry) <= {"parent_id", "relation", "created_at"}:
        # A bare parent id (exports before the relation was written) would have to guess the
        # relation, and erasure follows "consolidated" edges but not "superseded" ones.
        raise InputError(f"line {number}: each lineage entry must be an object "
                         '{"parent_id": …, "relation": …, "created_at": … (optional)}, as dream '
                         "notes export writes it; a file exported before relations were written "
                         "imports without lineage (as it always did) once its lineage fields are "
                         "removed")
    parent = opt_str(entry, "parent_id", number)
    relation = entry["relation"]
    if parent is None:
        raise InputError(f"line {number}: lineage parent_id is required")
    if not isinstance(relation, str) or not relation or len(relation) > MAX_RELATION_CHARS:
        raise InputError(f"line {number}: lineage relation must be a string of 1 to "
                         f"{MAX_RELATION_CHARS} characters")
    return parent, relation, opt_time({"lineage created_at": entry.get("created_at")},
                                      "lineage created_at", number)


def check_references(uow: UnitOfWork, rows: list[dict[str, Any]], lineage: dict[str, Edges],
                     line_of: dict[str, int], known_rows: list[dict[str, Any]]) -> None:
    """Every pointer and lineage parent ``rows`` name is a note of the same scope: one of
    ``known_rows``, or one stored (one query per 500 names). Checked for every line of a file
    before any is found already present: a line is refused for what it says, whether or not
    its note is stored."""
    known = {r["id"]: r["scope_key"] for r in known_rows}
    named = {target for r in rows for _, target in references(r, lineage)}
    stored = uow.notes.identities(named - known.keys())
    known.update((note_id, scope_key) for note_id, (scope_key, _) in stored.items())
    for r in rows:
        for field, target in references(r, lineage):
            where = f"line {line_of[r['id']]}: {field}"
            if target == r["id"]:
                raise InputError(f"{where} names the note itself")
            if target not in known:
                raise InputError(f"{where} names note {target!r}, which is neither in this file "
                                 "nor stored; import it too (an export filtered by --status "
                                 "leaves it out) or drop the field")
            if known[target] != r["scope_key"]:
                raise InputError(f"{where} names note {target!r} of another scope")


def lineage_rows(uow: UnitOfWork, fresh: list[dict[str, Any]], lineage: dict[str, Edges],
                 line_of: dict[str, int], dates: Mapping[str, EdgeDates]
                 ) -> list[dict[str, Any]]:
    """The ``note_lineage`` rows of the notes about to be inserted, once every pointer and parent
    they name is known to be a note of the same scope: one of them, or one stored (checked
    again under the import's lock: a note named may have been erased since). Each dated as its
    entry says (``dates``: child id → its edges' dates), else at the child's creation."""
    check_references(uow, fresh, lineage, line_of, fresh)
    return [{"scope_key": r["scope_key"], "parent_id": parent, "child_id": r["id"],
             "relation": relation, "run_id": None,
             "created_at": dates.get(r["id"], {}).get((parent, relation), r["created_at"])}
            for r in fresh for parent, relation in lineage.get(r["id"], [])]


def references(row: dict[str, Any], lineage: dict[str, Edges]) -> Iterable[tuple[str, str]]:
    """(field, note id) of every note the row names."""
    if row["consolidated_into_id"] is not None:
        yield "consolidated_into_id", row["consolidated_into_id"]
    for parent, _ in lineage.get(row["id"], []):
        yield "lineage", parent
