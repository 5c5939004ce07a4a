"""Lists of ids (hashes, fingerprints, rows) cut into pieces of one statement each, so an
``IN (...)`` list or a multi-row VALUES stays under the drivers' bound-parameter limits."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

T = TypeVar("T")

# Values bound per statement: far under SQLite's 32,766 and PostgreSQL's 65,535. Rows bind one
# value a column: a caller inserting wide rows sizes its chunks by their columns.
IN_CHUNK = 500


@overload
def chunked(values: list[T], size: int = IN_CHUNK) -> Iterator[list[T]]: ...
@overload
def chunked(values: Sequence[T], size: int = IN_CHUNK) -> Iterator[Sequence[T]]: ...
def chunked(values: Sequence[T], size: int = IN_CHUNK) -> Iterator[Sequence[T]]:
    """Consecutive slices of ``values`` of ``size`` items (a list's are lists), the last one
    shorter, in order; none for an empty sequence (no statement with an empty list)."""
    if size < 1:  # here, at the call, not when the first slice is taken
        raise ValueError(f"chunk size must be at least 1 (got {size})")
    return (values[start : start + size] for start in range(0, len(values), size))
