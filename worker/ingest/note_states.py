"""What an imported note's state must be, beside each field's own checks: one the worker could
have left (R8): a live note replaced by none, a note merged into a live one pointing at it (what
an erasure of that note follows to give it back, R28), a validity or an expiry that ends no
earlier than the note was recorded, a validity that ends no earlier than it began, each edge
once, and no loop of pointers or of lineage among the file's notes.
Checked before anything is written (R22). A revoked note with neither pointer nor comments
passes: a host may retire a note straight in the table, and its export must import back."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from worker.domain.types import NoteStatus
from worker.ingest.jsonl import InputError

_LIVE = frozenset({NoteStatus.ACTIVE.value, NoteStatus.PENDING.value})


def check_state(row: dict[str, Any], edges: list[tuple[str, str]], number: int, *,
                dated: bool = True) -> None:
    """One parsed line (``row`` as ``parse_note`` builds it, ``edges`` its lineage; ``dated``:
    the line gives ``created_at``)."""
    status = row["status"]
    if row["consolidated_into_id"] is not None and status in _LIVE:
        raise InputError(
            f"line {number}: consolidated_into_id names the note that replaced this one, but "
            f"status is {status}; a {status} note is replaced by none: drop "
            "consolidated_into_id, or give the status the note has (revoked)")
    if row["valid_to"] is not None and row["valid_to"] < row["created_at"]:
        raise InputError(
            f"line {number}: valid_to {row['valid_to'].isoformat()} is before created_at "
            f"{row['created_at'].isoformat()}; a note's validity cannot end before it was "
            "recorded (absent, created_at is the time of the import): fix valid_to, give "
            "created_at, or drop valid_to")
    if row["valid_to"] is not None and row["valid_from"] is not None \
            and row["valid_to"] < row["valid_from"]:
        # A window that ends before it begins (fields swapped, a wrong year). A worker before
        # this check could end a note so; its export writes the end at the start (``export``).
        raise InputError(
            f"line {number}: valid_to {row['valid_to'].isoformat()} is before valid_from "
            f"{row['valid_from'].isoformat()}; a note's validity cannot end before it begins: "
            "fix valid_to or valid_from, or drop valid_to")
    if dated and row["expires_at"] is not None and row["expires_at"] < row["created_at"]:
        # Two dates that contradict each other (fields swapped, a wrong year): the next dream
        # would archive the note as expired. A line without created_at is recorded at the
        # import's time, and one already expired then is a host's way to have it archived.
        raise InputError(
            f"line {number}: expires_at {row['expires_at'].isoformat()} is before created_at "
            f"{row['created_at'].isoformat()}; a note cannot expire before it was written: "
            "fix expires_at or created_at, or drop expires_at")
    seen: set[tuple[str, str]] = set()
    for parent, relation in edges:
        if (parent, relation) in seen:
            raise InputError(f"line {number}: lineage names parent {parent!r} twice with "
                             f"relation {relation!r}; give each edge once")
        seen.add((parent, relation))


def check_links(rows: list[dict[str, Any]], lineage: dict[str, list[tuple[str, str]]],
                line_of: dict[str, int]) -> None:
    """``_check_merged``, then no note of the file replaced, through others, by itself
    (``consolidated_into_id``), nor derived from itself (``lineage``, child → parent): the
    first line of a loop is named."""
    _check_merged(rows, lineage, line_of)
    # A note naming itself is ``lineage_rows``' to refuse, in its own words.
    pointers = {r["id"]: [r["consolidated_into_id"]] for r in rows
                if r["consolidated_into_id"] not in (None, r["id"])}
    parents = {child: [p for p, _ in edges if p != child] for child, edges in lineage.items()}
    for field, graph in (("consolidated_into_id", pointers), ("lineage", parents)):
        if loop := _loop(graph, sorted(graph, key=lambda i: line_of.get(i, 0))):
            start = min(loop[:-1], key=lambda i: line_of.get(i, 0))
            at = loop.index(start)
            shown = [*loop[at:-1], *loop[:at], start]
            raise InputError(
                f"line {line_of.get(start, 0)}: {field} makes a loop ({' → '.join(shown)}); "
                "a note is never replaced by, nor derived from, itself: fix or drop the field "
                "on one of these lines")


def _check_merged(rows: list[dict[str, Any]], lineage: dict[str, list[tuple[str, str]]],
                  line_of: dict[str, int]) -> None:
    """A revoked note a live note of the file was consolidated from points at a note: without
    the pointer, erasing that note would leave it retired for good (R28)."""
    by_id = {r["id"]: r for r in rows}
    for r in rows:
        if r["status"] not in _LIVE:
            continue
        for parent, relation in lineage.get(r["id"], []):
            source = by_id.get(parent)
            if (relation == "consolidated" and source is not None
                    and source["status"] == NoteStatus.REVOKED.value
                    and source["consolidated_into_id"] is None):
                raise InputError(
                    f"line {line_of[parent]}: status is revoked and note {r['id']!r} (line "
                    f"{line_of[r['id']]}) was consolidated from it, but consolidated_into_id is "
                    f"empty: give consolidated_into_id {r['id']!r} (what an erasure of that note "
                    "follows to give this one back)")


def _loop(graph: dict[str, list[str]], order: Iterable[str]) -> list[str] | None:
    """A cycle of ``graph`` as [a, b, …, a], or None (iterative depth-first search)."""
    done: set[str] = set()
    for root in order:
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        stack = [iter(graph.get(root, ()))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                node = path.pop()
                on_path.discard(node)
                done.add(node)
                continue
            if nxt in on_path:
                return [*path[path.index(nxt):], nxt]
            if nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(graph.get(nxt, ())))
    return None
