"""The ids made for import lines that give none (a session, an example): derived from what
identifies the record, so that a file imported again finds it present, and keyed with the
database's secret (``instance_keys.note_ids``, as remember's note ids are).

Before, the id was an unkeyed uuid5 of the record's identity (an example: its scope, input and
output; a session: its scope and start): an example erased with its user left an id (in a
host's records, an export, an erasure's answer) that confirmed a guess at its scope and text
offline, by anyone who computed the uuid5. A store holding records under those ids still finds
them present (``adopt_unkeyed``): the line takes the id the store holds."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from worker.app import App
from worker.ingest.same_record import first_difference, refuse_twice
from worker.store.repositories.keys import NOTE_IDS

# The namespace of the unkeyed ids imports made before (uuid5 of what identifies the record).
_UNKEYED = uuid.uuid5(uuid.NAMESPACE_URL, "https://dream-worker/import")


def import_key(app: App) -> str:
    """The database's key, read (made and committed first if the row is missing) before the
    lines are read."""
    with app.uow() as uow:
        key = uow.keys.get(NOTE_IDS)
        uow.commit()
    return key


def derived_id(key: str, *identity: str) -> str:
    """The id of a line without one: a keyed hash of what identifies its record, shaped as a
    UUID. Importing the line again, or the same record twice at once, finds it present."""
    raw = "\x1f".join(("import", *identity)).encode("utf-8")
    return str(uuid.UUID(bytes=hmac.new(key.encode("ascii"), raw, hashlib.sha256).digest()[:16]))


def unkeyed_id(*identity: str) -> str:
    """The id an import made for such a line before it was keyed (``adopt_unkeyed``)."""
    return str(uuid.uuid5(_UNKEYED, "\x1f".join(identity)))


def adopt_unkeyed(rows: dict[str, dict[str, Any]], line_of: dict[str, int],
                  unkeyed: dict[str, str],
                  records: Callable[[Iterable[str], Sequence[str]], dict[str, Any]],
                  what: str) -> dict[str, str]:
    """Lines without an id whose record the store holds under the unkeyed id an import made
    before (``unkeyed``: derived id → that id): each takes the stored id, so that the import
    compares it with the stored record and finds it present rather than adding it again.
    ``records``: the stored ones of some ids. The derived ids moved (derived → stored)."""
    wanted = {old: new for new, old in unkeyed.items() if new in rows}
    moved: dict[str, str] = {}
    for old in sorted(records(wanted, ("id",)) if wanted else ()):
        new = wanted[old]
        row = {**rows.pop(new), "id": old}
        number = line_of.pop(new)
        if old in rows:  # a line of the file gives that id too (an older export's)
            if differs := first_difference(rows[old], row, row):
                refuse_twice(number, what, old, line_of[old], differs)
            continue
        rows[old], line_of[old] = row, number
        moved[new] = old
    return moved
