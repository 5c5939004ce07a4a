"""An id a file or the store already uses is "already present" only for the same record.

Before, the importers compared an id's scope and text alone: a second line of one id with
another status or protection, or a line of a later export whose note the store holds at an
earlier state (the file says superseded, fused), counted as already present, exit 0, and the
line's fields were dropped silently. Now every field a line gives is compared:

* within one file, two lines of one id must be the same record, field for field;
* against the store, a line is the stored record or an earlier state of it (the store changed
  it since: a dream retired it, a host read or pinned it): nothing to add. A line that is a later
  state than the store's (a note's ``updated_at`` after the stored one's, an example archived
  that the store holds active, a session ended that the store holds open) and differs is
  refused: an import never overwrites.

Either refusal is one line naming the file's line, the id and the first field that differs; the
whole file is refused, nothing written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

import numpy as np

from worker.ingest.jsonl import InputError

# A row's key → the field name a file gives it by.
_FILE_NAMES = {"meta": "metadata", "lineage_dates": "lineage created_at"}


def first_difference(a: Mapping[str, Any], b: Mapping[str, Any],
                     fields: Iterable[str]) -> str | None:
    """The first of ``fields`` whose values differ between ``a`` and ``b`` (a file's name for
    it), None when they agree on all."""
    for f in fields:
        if not _same(a.get(f), b.get(f)):
            return _FILE_NAMES.get(f, f)
    return None


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return x is not None and y is not None and np.array_equal(x, y)
    if isinstance(x, list | tuple) or isinstance(y, list | tuple):
        return list(x or []) == list(y or [])  # no flags, [] or null: none
    return bool(x == y)


def refuse_twice(number: int, what: str, record_id: str, first: int, field: str) -> NoReturn:
    """Two lines of one file give one id as two records."""
    raise InputError(f"line {number}: {what} id {record_id!r} is also the id of line {first}, "
                     f"with another {field}; a file gives each record once: keep one of the "
                     f"two lines (or give this {what} its own id)")


def refuse_later(number: int, what: str, record_id: str, field: str, state: str) -> NoReturn:
    """A line holds a later state of a stored record than the store."""
    raise InputError(f"line {number}: {what} {record_id!r} is stored with another {field}, and "
                     f"this line is {state}; import never overwrites a record: import the file "
                     "into an empty store, or leave this line out to keep the stored one")
