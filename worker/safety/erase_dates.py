"""A note dated at an erased statement is dated back to the statements of its fact still held.

The contradictions phase keeps one note of a fact said twice and dates it at the later
statement (``Change.restate``): a value said between the two must not read as newer. When the
later statement's note is erased, the kept note kept its date, and the erased conversation still
decided which value a later judge took as current. The erasure now dates it at the latest
statement left: its own first date, a later note still retired into it as the same fact, or a
line an import or a host said it again in. Logged under the erasure's id like its restorations
(``dream undo`` reverts them together), one version up, so a pair judged on the old date is
judged again. A note it had superseded as the older value of one attribute that is the later
statement now stays retired and is held for review, as when the newer note itself is erased.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from worker.domain.types import Said, Scope, said_key
from worker.errors import Conflict
from worker.phases.kit.rows import RowBuilder
from worker.store.repositories.said_dates import Carrier
from worker.store.uow import UnitOfWork

_CHANGED = "a note changed during the erase; nothing was erased, run it again"


@dataclass
class DatedBack:
    ids: list[str] = field(default_factory=list)  # notes dated back
    # Scope → notes a dated-back note had superseded as the older value that are the later
    # statement now: still retired, held for review (as when the newer note itself is erased).
    reopened: dict[str, list[str]] = field(default_factory=dict)


def date_back(uow: UnitOfWork, erased: Mapping[str, Said], scope_keys: set[str],
              erase_id: str, subject: str, now: datetime) -> DatedBack:
    """Date back every note of ``scope_keys`` carrying the date of an ``erased`` note (id →
    its statement, read before the erase), in the erase's transaction."""
    found = uow.safety.carriers(scope_keys, erased)
    gone = {s for s in erased.values() if s[0] is not None}
    dated = _dates(found, gone)
    if not dated:
        return DatedBack()
    state = uow.writes.lock_state(dated)
    reason = f"erase of {subject.split()[0]}: the later statement it was dated at was erased"
    builders: dict[str, RowBuilder] = {}
    for c in found:
        if c.note_id not in dated:
            continue
        row = state.get(c.note_id)
        if row is None or (row["created_at"], row["write_seq"]) != c.said:
            raise Conflict(_CHANGED)
        rows = builders.get(c.scope_key)
        if rows is None:
            rows = builders[c.scope_key] = RowBuilder(Scope.from_key(c.scope_key), erase_id, now,
                                                      state, None, {})
        when, seq = dated[c.note_id]
        rows.set_fields(c.note_id, {"created_at": when, "write_seq": seq}, reason)
    for rows in builders.values():
        for keys, batch in rows.update_batches():
            if uow.writes.update_notes(keys, batch) != len(batch):
                raise Conflict(_CHANGED)
        uow.writes.add_log(rows.log)
    out = DatedBack(sorted(dated))
    for c in found:
        if c.note_id in dated:
            # Retired as older than the erased statement's date, later than the date left.
            now_at, was_at = said_key(*dated[c.note_id]), said_key(*c.said)
            later = [i for i, said in c.superseded if now_at < said_key(*said) <= was_at]
            if later:
                out.reopened.setdefault(c.scope_key, []).extend(later)
    return out


def _dates(found: list[Carrier], gone: set[Said]) -> dict[str, Said]:
    """Each carrier's latest statement not erased, when earlier than its date. A member that is
    a carrier itself counts at its own new date (a fact said three times, kept twice over)."""
    out: dict[str, Said] = {}
    for _ in range(len(found) + 1):  # each round settles at least one more chain link
        changed = False
        for c in found:
            if c.first is None:
                continue  # its own date, never moved: the erased note shared it by chance
            held = [c.first, *c.unheld, *(out.get(i, said) for i, said in c.members)]
            left = [s for s in held if s not in gone]
            latest = max(left, key=lambda s: said_key(*s), default=c.first)
            if said_key(*latest) < said_key(*c.said) and out.get(c.note_id) != latest:
                out[c.note_id] = latest
                changed = True
        if not changed:
            break
    return out
