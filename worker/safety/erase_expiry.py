"""A note an erased note was retired or fused into expires again as it would have without it.

``Change.extend_expiry`` and ``fused_fields`` made it live as long as the erased note; left so,
the erased conversation would still keep another conversation's fact (README "Safety").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from worker.domain.types import lasting_expiry
from worker.phases.kit.rows import Edits
from worker.safety.erase_dates import CHANGED, expect
from worker.store.repositories.kept_lives import Keeper, Life
from worker.store.uow import UnitOfWork


def give_lives_back(uow: UnitOfWork, pointed: Iterable[str], erase_id: str, subject: str,
                    now: datetime) -> dict[str, int]:
    """Give every note an erased note was retired into (``pointed``, read before the erase),
    and each note that one was retired or fused into in turn, the expiry it would have without
    the erased notes (``shortened``): in the erase's transaction, after the erased notes are
    deleted, one version up, logged under the erasure's id (``dream undo`` reverts it with the
    rest). Each note changed → its version before (a keep-apart binds it again there)."""
    found = uow.safety.keepers(pointed)
    lives = shortened(found)
    if not lives:
        return {}
    state = uow.writes.lock_state(lives)
    edits = Edits(state, erase_id, now)
    why = (f"erase of {subject.split()[0]}: a note retired into it or fused into it, which it "
           "lived as long as, was erased; it expires as it would without it")
    for k in found:
        if k.note_id in lives:
            expect(state, k.note_id, expires_at=k.expires_at)
            edits.set(k.scope_key, k.note_id, {"expires_at": lives[k.note_id]}, why)
    edits.write(uow.writes, CHANGED)
    return {i: int(state[i]["version"]) for i in lives}


def shortened(found: Sequence[Keeper]) -> dict[str, Life]:
    """Each keeper's expiry without the erased notes (gone from its members and sources): its
    own before the worker first lengthened it, or its sources' life as they stand now, and the
    life of the notes still retired into it. Only where that is earlier than its expiry now: an
    erasure never lengthens a life. A member or source that is a keeper counts at its new one."""
    by_id = {k.note_id: k for k in found}
    memo: dict[str, Life] = {}

    def life(note_id: str, was: Life) -> Life:
        k = by_id.get(note_id)
        if k is None:
            return was
        if note_id not in memo:
            memo[note_id] = k.expires_at  # a cycle (none is written) reads it as it is
            memo[note_id] = _life(k, life)
        return memo[note_id]

    for k in found:
        life(k.note_id, k.expires_at)
    return {i: when for i, when in sorted(memo.items()) if _earlier(when, by_id[i].expires_at)}


def _life(k: Keeper, life: Callable[[str, Life], Life]) -> Life:
    """``k``'s expiry from what it stands for now; its expiry as it is when nothing lengthened
    it, or when the host changed it since the worker last set it (the host's, left alone)."""
    if not k.sources and not k.moves:
        return k.expires_at  # never lengthened: its own
    # What the worker set it to at first: a fusion its sources' life, else the first log row.
    expected = lasting_expiry(w for _, w in k.sources) if k.sources else k.moves[0][0]
    own = lasting_expiry(life(i, w) for i, w in k.sources) if k.sources else expected
    for before, after in k.moves:
        if before != expected:
            own = before  # the host set it meanwhile: its own life from then on
        expected = after
    if expected != k.expires_at:
        return k.expires_at  # the host changed it since
    return lasting_expiry([own, *(life(i, w) for i, w in k.members)])


def _earlier(when: Life, than: Life) -> bool:
    return when is not None and (than is None or when < than)
