"""Notes, scopes, run and step states: plain values with no database attached."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from functools import cached_property, total_ordering
from typing import Any


class NoteType(StrEnum):
    PREFERENCE = "Preference"
    CONSTRAINT = "Constraint"
    CONTEXT = "Context"
    EXAMPLE = "Example"
    ISSUE = "Issue"


class NoteStatus(StrEnum):
    ACTIVE = "active"
    PENDING = "pending"
    REVOKED = "revoked"
    ARCHIVED = "archived"


class Protection(StrEnum):
    IMMUTABLE = "immutable"
    PROTECTED = "protected"
    STANDARD = "standard"
    EPHEMERAL = "ephemeral"


# How long archive keeps an unread note of an agent the registry does not hold (an agent's own
# note_retention_days otherwise); a protected note stays DREAM_ARCHIVE__PROTECTED_INACTIVE_DAYS.
DEFAULT_NOTE_RETENTION_DAYS = 90

# Read for every note of every plan: plain strings, not enum members looked up on each call.
_NEVER_RETIRED = frozenset((Protection.IMMUTABLE.value, Protection.PROTECTED.value))
_WEAKEST_FIRST = (Protection.EPHEMERAL, Protection.STANDARD, Protection.PROTECTED,
                  Protection.IMMUTABLE)


def protection_rank(protection: str) -> int:
    """How strongly a protection keeps a note (ephemeral 0 … immutable 3); a value this code
    does not know ranks above all, so nothing weaker ever takes its note's place."""
    try:
        return _WEAKEST_FIRST.index(Protection(protection))
    except ValueError:
        return len(_WEAKEST_FIRST)


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    # Finished, but something stopped it from doing the work it found (the blast-radius guard,
    # an exhausted model budget, open candidates growing run after run); ``status_reason`` says
    # what. Never shown as plain succeeded (R27).
    BLOCKED = "blocked"
    CANCELLED = "cancelled"
    UNDONE = "undone"


# A scope has at most one run in these states (the partial unique index, R1): an interrupted
# run still owns its scope until it is resumed, given up or cancelled.
ACTIVE_RUN_STATUSES = (RunStatus.QUEUED.value, RunStatus.RUNNING.value,
                       RunStatus.INTERRUPTED.value)
# Runs that dreamed (the gate measures time and sessions since the last of these). A blocked run
# counts: re-trying it every beat would only trip the same guard every 15 minutes.
DREAMED_RUN_STATUSES = (RunStatus.SUCCEEDED.value, RunStatus.PARTIAL.value,
                        RunStatus.BLOCKED.value)
# dream_runs.totals key an undo sets: the status the run ended with before it was undone, so
# what it ended as stays countable (the gate's last dream, the back-off's failures, /metrics).
UNDONE_FROM = "undone_from"
# dream_runs.trigger of a review approval's run: it applies one item a person approved and
# plans nothing, so it leaves no open candidates behind.
REVIEW_TRIGGER = "review"


class StepStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    NO_ITEMS = "no_items"
    # A parent step whose attempt lost the run (killed, lease lapsed, interrupted by an
    # erasure): finished for the reader, but its phase is not done (not in TERMINAL_STEP).
    INTERRUPTED = "interrupted"


PHASES = ("consolidate", "contradictions", "prune", "archive")
# The phases that leave open candidates (clusters, pairs) a run counts.
JUDGING_PHASES = frozenset({"consolidate", "contradictions"})

# A conflict kept for review: both notes get the flag, and one review row of this kind names
# them. The row is the flag's reason: what deletes the row (an erasure) takes the flag too.
CONTRADICTION_REVIEW_KIND = "contradiction"
CONTRADICTION_REVIEW_FLAG = "contradiction_review"
# What a user's erasure leaves as the user part of the scope keys of the runs it keeps (README
# "Safety", Erasure): no record names the erased user; the rows keep their shape.
ERASED_USER = "[erased]"


# ``json.dumps`` with separators builds a new encoder on every call.
_SCOPE_KEY = json.JSONEncoder(separators=(",", ":")).encode


@total_ordering
@dataclass(frozen=True)
class Scope:
    """One tenant partition. ``None`` is a value, not a wildcard; it sorts before any id (the
    generated field-by-field order compared None with a string and raised)."""

    agent_id: str
    user_id: str | None = None
    company_id: str | None = None

    # Cached on the instance (the fields are frozen): every row a run writes carries the key.
    @cached_property
    def key(self) -> str:
        return _SCOPE_KEY([self.agent_id, self.user_id, self.company_id])

    @classmethod
    def from_key(cls, key: str) -> Scope:
        agent_id, user_id, company_id = json.loads(key)
        return cls(agent_id, user_id, company_id)

    def as_dict(self) -> dict[str, str | None]:
        return {"agent_id": self.agent_id, "user_id": self.user_id, "company_id": self.company_id}

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Scope):
            return NotImplemented
        return self._order() < other._order()

    def _order(self) -> tuple[tuple[bool, str], ...]:
        return tuple((v is not None, v or "") for v in (self.agent_id, self.user_id,
                                                        self.company_id))


# Symbols that carry a value are kept: "C#" is not "C++" nor "C", "100%" is not "$100", and a
# minus sign before a number ("-5 degrees") is not a hyphen. Folded away, each pair was one
# note: remember answered NOOP, an import skipped the line as present, the rule judge merged
# them. Migration 0015 recomputed the stored hashes of texts that hold one, 0017 all of them.
VALUE_SYMBOLS = "+#%‰$¢£¤¥€₹₽₩₺₪₫₴₦₱₡₲₵₸₼₾₿"
# Punctuation (Unicode P*) that names something rather than ending a sentence; kept like a
# symbol (S*): "R&D", "@anna", "§ 5", "5′10″".
_KEPT_PUNCT = VALUE_SYMBOLS + "&@§¶†‡′″‴‱"
# Every dash and the minus sign read as one "-": "–18 °C" (an en dash typed as the minus) is
# "-18 °C", "10–12" is "10-12". Where it carries no value (between words) it folds away.
_DASHES = re.compile("[\u2010-\u2015\u2212\ufe58\ufe63]")
# Symbols that are quotes in practice ("`tea`", "it´s"); any other symbol is kept.
_QUOTE_SYMBOLS = "`´"
_NOT_WORD = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")


def _is_letter(c: str) -> bool:
    return c.isalpha() or unicodedata.category(c).startswith("M")


def _mark(match: re.Match[str]) -> str:
    """What one character that is no letter, digit or space folds to: itself when it carries a
    value, "" when it shows nothing (a soft hyphen, a variation selector), else a space."""
    c, text, at = match.group(), match.string, match.start()
    before = text[at - 1] if at else " "
    after = text[at + 1] if at + 1 < len(text) else " "
    kind = unicodedata.category(c)
    if kind == "Cf" or c in "\ufe0e\ufe0f":
        return ""
    if (kind[0] in "SM" and c not in _QUOTE_SYMBOLS) or c in _KEPT_PUNCT:
        return c  # "<", "≥", "°", "✅", "C++", "100%"
    if before.isdigit() and after.isdigit():
        return c  # inside a number: "0.5", "3:30", "1/2", "10-12", "5,6"
    if c in ".-" and after.isdigit() and not _is_letter(before):
        return c  # a decimal point or a sign that starts a number: ".5", "-18"
    if c == "-" and (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
        return c  # a sign that ends a token: "O-", "A-"
    return " "


def fold_case(text: str) -> str:
    """Case folded, but "ß" kept: ``casefold`` makes it "ss", and "Maßen" (in moderation) is
    not "Massen" (in masses). The capital "ẞ" folds to "ß"; "Strasse" and "Straße" stay two
    spellings (a duplicate left, not a fact lost)."""
    if "ß" not in text and "ẞ" not in text:
        return text.casefold()
    return "ß".join(part.casefold() for part in text.replace("ẞ", "ß").split("ß"))


def normalise_text(text: str) -> str:
    """The identity of a text (identical notes, ``content_hash``): Unicode form, case, spacing,
    quotes and sentence punctuation folded away; what carries a value kept (``_mark``): a
    decimal point or sign of a number, a symbol or emoji, "O-", "C++", "ß"."""
    text = _DASHES.sub("-", fold_case(unicodedata.normalize("NFKC", text)))
    folded = _SPACE.sub(" ", _NOT_WORD.sub(_mark, text)).strip()
    # A text of punctuation alone ("!!!", "...") folded to "", one hash for all of them: each
    # imported after the first was "already present". It is its own identity, spacing folded.
    return folded or _SPACE.sub(" ", text).strip()


def content_hash(text: str) -> str:
    return hashlib.sha256(normalise_text(text).encode("utf-8")).hexdigest()


@dataclass
class Note:
    """What the phases plan with: a read-only snapshot of one note row."""

    id: str
    scope: Scope
    content: str
    type: str = NoteType.CONTEXT.value
    status: str = NoteStatus.ACTIVE.value
    protection: str = Protection.STANDARD.value
    is_auto_generated: bool = True
    importance: float = 0.5
    access_count: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_accessed_at: datetime | None = None
    expires_at: datetime | None = None
    source_conversation_id: str | None = None
    consolidation_generation: int = 0
    consolidated_into_id: str | None = None
    version: int = 1
    content_hash: str = ""
    flags: list[str] = field(default_factory=list)
    # The source conversations of the notes this one was written from (fused), transitively:
    # what prune checks a fused note's provenance against (``notes.lineage_conversation_ids``).
    lineage_conversation_ids: tuple[str, ...] = ()
    # The order the store recorded it in (``notes.write_seq``; None: before it kept one):
    # which of two notes with one ``created_at`` was stated later (``said_order``).
    write_seq: int | None = None

    @property
    def retirable(self) -> bool:
        return self.protection not in _NEVER_RETIRED

    def expired(self, now: datetime) -> bool:
        """Past its ``expires_at`` at ``now`` (at it counts as past): archive's to take."""
        return self.expires_at is not None and self.expires_at <= now


_BEFORE_ALL = datetime.min.replace(tzinfo=UTC)


def said_order(note: Note) -> tuple[datetime, int]:
    """A sort key, earliest statement first: ``created_at``, then, between notes stated at one
    same time, the order the store recorded them in (``write_seq``; unknown sorts first)."""
    return said_key(note.created_at, note.write_seq)


def said_key(created_at: datetime | None, write_seq: int | None) -> tuple[datetime, int]:
    """``said_order`` of a statement known by its date and recorded order (a row, a line)."""
    return created_at or _BEFORE_ALL, write_seq or 0


# A statement: when it was made (``created_at``) and the store's order among those of one time.
Said = tuple[datetime | None, int | None]


def restated_at(own: Said, later: Iterable[Said], protection: str | None) -> Said | None:
    """The statement a note kept for ``later`` statements of its own fact is dated at: the
    latest of them, when said after its ``own``; None when it keeps its date (none said after
    it, or the note is immutable)."""
    if protection == Protection.IMMUTABLE:
        return None
    latest = max(later, key=lambda s: said_key(*s), default=None)
    return latest if latest is not None and said_key(*latest) > said_key(*own) else None


def lasting_expiry(expiries: Iterable[datetime | None]) -> datetime | None:
    """When a note standing for notes of these ``expiries`` expires: at the latest of them, and
    never (None) when one of them never expires. A retirement never shortens a fact's life: a
    fusion of notes that all expire used to never expire, and a note that never expires retired
    into one that does went with it."""
    latest: datetime | None = None
    for when in expiries:
        if when is None:
            return None
        latest = when if latest is None or when > latest else latest
    return latest


def conversations_of(source: str | None, lineage: Iterable[str] | None) -> frozenset[str]:
    """The conversations whose erasure takes a note: its own, and its sources' (a fusion's
    ``lineage_conversation_ids``)."""
    return frozenset(c for c in (source, *(lineage or ())) if c is not None)


def stands_in(held_in: frozenset[str], said_in: str | None) -> bool:
    """Whether a note said in the conversations ``held_in`` (``conversations_of``) may stand
    for a statement of its text made in ``said_in`` (a NOOP, an import's line said again): only
    when no erasure can take the note and leave the statement, so when the note was said in no
    conversation, or in ``said_in`` alone. Otherwise the statement is its own note, and a dream
    merges the two. Before, a note of c1 (or a fusion of c1's and c3's) stood for a statement
    made in c5 or in none, and erasing c1 took that statement's fact too."""
    return all(c == said_in for c in held_in)


def recorded_later(a: Note, b: Note) -> bool | None:
    """Whether the store recorded ``a`` after ``b`` (its one clock, whatever the notes'
    ``created_at`` say), or None when it does not know (either has no recorded order)."""
    if a.write_seq is None or b.write_seq is None or a.write_seq == b.write_seq:
        return None
    return a.write_seq > b.write_seq


def fingerprint_notes(notes: list[Note]) -> str:
    """Identity of a set of notes at their current versions; changes when any member changes."""
    return fingerprint_versions([(n.id, n.version) for n in notes])


def fingerprint_versions(versions: list[tuple[str, int]]) -> str:
    """``fingerprint_notes`` of notes given as (id, version)."""
    parts = sorted(f"{i}:{v}" for i, v in versions)
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


@dataclass
class PhaseReport:
    """What a phase hands back to the run: its counters, step status and usage."""

    phase: str
    status: str = StepStatus.SUCCEEDED.value
    counters: dict[str, Any] = field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    calls: int = 0
    reason: str | None = None
