"""Pure planning for archive: which notes and examples expired or went unused for too long."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from worker.domain.types import DEFAULT_NOTE_RETENTION_DAYS, Note, NoteStatus, Protection
from worker.store.repositories.examples import Example

DEFAULT_EXAMPLE_RETENTION_DAYS = 180
LOW_SUCCESS_SCORE = 50.0


@dataclass(frozen=True)
class RetentionPolicy:
    """An agent's retention settings; the defaults apply to agents missing from the registry."""

    note_retention_days: int = DEFAULT_NOTE_RETENTION_DAYS
    example_retention_days: int = DEFAULT_EXAMPLE_RETENTION_DAYS
    auto_archive_enabled: bool = True
    protected_inactive_days: int = 365


# What ``plan_notes`` decides a note on beside its status and version; a host may write each
# without a version (a renewal, a retrieval's touch, a pin), so the write re-checks them.
DECIDED_FIELDS = ("expires_at", "last_accessed_at", "protection", "is_auto_generated")
# What ``plan_examples`` decides an example on, by reason; a host renews, re-scores, uses or
# takes over an example without a version, so an approval re-checks them (``seen``).
EXAMPLE_EXPIRED_FIELDS = ("expires_at", "is_auto_generated")
EXAMPLE_UNSUCCESSFUL_FIELDS = ("success_score", "last_accessed_at", "is_auto_generated")


@dataclass(frozen=True)
class Decision:
    id: str
    version: int
    comment: str
    idle_days: int
    decided: tuple[tuple[str, object], ...] = ()  # the fields decided on, as the plan read them


@dataclass
class NotePlan:
    expired: list[Decision] = field(default_factory=list)
    stale: list[Decision] = field(default_factory=list)
    protected_preserved: list[str] = field(default_factory=list)
    manual_preserved: list[str] = field(default_factory=list)
    # Unused past retention, but kept: no note of the scope was ever read (``read_recorded``).
    unread_preserved: list[str] = field(default_factory=list)


@dataclass
class ExamplePlan:
    expired: list[Decision] = field(default_factory=list)
    stale: list[Decision] = field(default_factory=list)
    manual_preserved: list[str] = field(default_factory=list)


def idle_since(last_accessed_at: datetime | None, created_at: datetime | None,
               access_count: int = 0) -> datetime | None:
    """Never-accessed items count from creation; so does one stated again after its last read
    (a note dated at a later statement of its fact: the restatement is a use). An item read
    (an access count) with no date of its last read has none: when it was last used is
    unknown, and unknown is not idle (None: never archived for disuse; before, it counted
    from creation, and a host that counts reads without dating them lost its current facts)."""
    if last_accessed_at is None and access_count:
        return None
    if last_accessed_at is None or created_at is None:
        return last_accessed_at or created_at
    return max(last_accessed_at, created_at)


# A last access this close to the note's creation is the write's own stamp, not a read.
WRITE_STAMP = timedelta(minutes=1)


def read_recorded(notes: list[Note]) -> bool:
    """Whether the host records reads in this scope: some note of it has a read (an access
    count, or a last access after its writing). Where none has, a note never read says
    nothing about its use, so no note is archived for going unused (a host that never reports
    reads, or stamps the last access when it writes a note and never again, would otherwise
    lose every fact older than the retention, its current ones too); expiry still applies."""
    return any(n.access_count or _read_after_writing(n) for n in notes)


def _read_after_writing(note: Note) -> bool:
    if note.last_accessed_at is None:
        return False
    return note.created_at is None or note.last_accessed_at - note.created_at > WRITE_STAMP


def _idle(now: datetime, last: datetime | None) -> timedelta:
    return now - last if last is not None else timedelta(0)


def _decided(item: Note | Example, fields: tuple[str, ...]) -> tuple[tuple[str, object], ...]:
    return tuple((f, getattr(item, f)) for f in fields)


def _stamp(now: datetime, why: str) -> str:
    return f"archived by archive on {now.date().isoformat()}: {why}"


def plan_notes(notes: list[Note], policy: RetentionPolicy, now: datetime) -> NotePlan:
    """Expired or unused auto-generated notes; manual ones never, protected ones only after long idle."""
    plan = NotePlan()
    retention = timedelta(days=policy.note_retention_days)
    protected_limit = timedelta(days=policy.protected_inactive_days)
    # The enum values read once, not once per note.
    active, immutable, protected = (NoteStatus.ACTIVE.value, Protection.IMMUTABLE.value,
                                    Protection.PROTECTED.value)
    measured = read_recorded(notes)
    for note in notes:
        if note.status != active:
            continue
        idle = _idle(now, idle_since(note.last_accessed_at, note.created_at, note.access_count))
        expired = note.expired(now)
        stale = idle > retention
        if not (expired or stale):
            continue
        if not note.is_auto_generated:
            plan.manual_preserved.append(note.id)
            continue
        if note.protection == immutable or (note.protection == protected and idle <= protected_limit):
            plan.protected_preserved.append(note.id)
            continue
        if not expired and not measured:
            plan.unread_preserved.append(note.id)
            continue
        decided = _decided(note, DECIDED_FIELDS)
        if expired:
            assert note.expires_at is not None
            why = f"expired on {note.expires_at.date().isoformat()}"
            plan.expired.append(Decision(note.id, note.version, _stamp(now, why), idle.days,
                                         decided))
        else:  # the rule that let it go: a protected note's own, longer limit
            limit = (policy.protected_inactive_days if note.protection == protected
                     else policy.note_retention_days)
            why = f"not accessed for {idle.days} days (retention {limit} days)"
            plan.stale.append(Decision(note.id, note.version, _stamp(now, why), idle.days,
                                       decided))
    return plan


def plan_examples(examples: list[Example], policy: RetentionPolicy, now: datetime) -> ExamplePlan:
    """Expired examples; unsuccessful (score < 50) auto-generated examples unused past retention.

    A manual example is never archived, not even past its expires_at (R26): a person wrote it,
    and only a person retires it. It is counted as preserved instead.
    """
    plan = ExamplePlan()
    retention = timedelta(days=policy.example_retention_days)
    for ex in examples:
        idle = _idle(now, idle_since(ex.last_accessed_at, ex.created_at, ex.access_count))
        expired = ex.expires_at is not None and ex.expires_at <= now
        unsuccessful = (ex.success_score is not None and ex.success_score < LOW_SUCCESS_SCORE
                        and idle > retention)
        if not ex.is_auto_generated:
            if expired or unsuccessful:
                plan.manual_preserved.append(ex.id)
            continue
        if expired:
            assert ex.expires_at is not None
            why = f"expired on {ex.expires_at.date().isoformat()}"
            plan.expired.append(Decision(ex.id, ex.version, _stamp(now, why), idle.days,
                                         _decided(ex, EXAMPLE_EXPIRED_FIELDS)))
        elif unsuccessful:
            why = (f"success score {ex.success_score:g} and not accessed for {idle.days} days "
                   f"(retention {policy.example_retention_days} days)")
            plan.stale.append(Decision(ex.id, ex.version, _stamp(now, why), idle.days,
                                       _decided(ex, EXAMPLE_UNSUCCESSFUL_FIELDS)))
    return plan
