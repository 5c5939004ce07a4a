"""Lead-ins: the words a scope repeats around its facts, set aside so that two statements of one
attribute wrapped in different ones still meet as a same-frame pair. Pure: word lists in, row
pairs out.

An extraction model often writes where a fact was said around it ("During the weekly planning
call the user mentioned that the team chats on Slack", "…, according to what the user said near
the end of the session"), and the wrapping differs between two versions of one attribute. Such
a note differs from its other version by far more than a frame's span, its cosine is mostly its
wrapping's, and the wrapping's words make the fact's own words common in the scope: no source
joined "… mentioned that the team chats on Slack" / "Noted from a longer conversation: the team
chats on Microsoft Teams" (the evolving suite, `--wordy --filler 80`: half the histories among
80 other facts kept a superseded value).

A lead-in is a run of words at least ``min_words`` long that at least ``min_notes`` of the
scope's notes begin (or end) with, that they stop sharing right after, and that says how the
fact was said (a word of saying or of a conversation: ``_SAYING``): many notes opening "Went to
a …" or "Has a cousin who organises a …" are facts whose verb is their first words, and two of
them about one event ("Went to a book fair in Oslo" / "Has a cousin who organises a book fair in
Oslo") are two facts, not one said twice. The longest such run is the wrapping, a longer one shared by fewer notes may be an attribute's frame under one
wrapping ("… mentioned that the user always flies"); each is set aside in turn. The notes' cores
are then matched as ``same_frame_pairs`` matches whole notes, so two cores must still share as
many words as they differ in: setting a lead-in aside never pairs two notes whose facts share no
frame. Only pairs a core takes part in are returned (the whole notes' pairs are the caller's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from worker.similarity.candidates import FrameReport, FrameSettings, same_frame_pairs
from worker.similarity.terms import as_stated
from worker.text.words import stem

# Words (as ``frame_tokens`` stems them) of saying something or of where it was said. ("note"
# is left out: it stems as "not" does.)
_SAYING = frozenset(map(stem, (
    "said", "say", "mention", "told", "tell", "according", "stated", "reported", "shared",
    "explained", "added", "remarked", "recalled", "confirmed", "claimed", "wrote", "asked",
    "talked", "replied", "conversation", "session", "call", "meeting", "discussion", "chat")))
# Where the notes under a lead-in stop sharing words may be a word into their facts ("… that
# the" when each opens with "the", "… that" when not), and a note without one may open with
# "The": every core, and every note a core is matched with, is trimmed of these at both ends.
# (Not every function word: "the user eats …" / "the user follows …" keep "user" to share.)
_JOINING = frozenset(map(stem, ("that", "the", "a", "an", "and", "then", "so", "how")))


@dataclass(frozen=True)
class LeadInSettings:
    min_notes: int = 5  # notes a lead-in must open (or close): fewer is an attribute's frame
    min_words: int = 3  # shorter shared runs ("the user") are every fact's subject, not a wrapping
    min_core: int = 2  # words a note must keep once a lead-in is set aside
    max_words: int = 24  # the longest wrapping looked for
    max_cores: int = 3  # cores per note (longest lead-in first, at each end, then both ends)

    def __post_init__(self) -> None:
        # One note shares its words with itself only: every note would be cut everywhere.
        # The setting refuses 1 (worker.config_checks); nothing reads it as another count.
        if self.min_notes < 2:
            raise ValueError(f"a lead-in needs at least 2 notes, not {self.min_notes}")


def _shared_runs(frames: Sequence[Sequence[str]], s: LeadInSettings) -> Counter[tuple[str, ...]]:
    """How many notes open with each run of ``min_words`` to ``max_words`` words (the longer
    runs counted only for the notes whose first ``min_words`` enough notes share)."""
    m = s.min_words
    heads = [tuple(w[:min(len(w) - s.min_core, s.max_words)]) for w in frames]
    count = Counter(h[:m] for h in heads if len(h) >= m)
    for head in heads:
        if len(head) > m and count[head[:m]] >= s.min_notes:
            count.update(head[:k] for k in range(m + 1, len(head) + 1))
    return count


def _cut_points(words: tuple[str, ...], count: Counter[tuple[str, ...]],
                s: LeadInSettings) -> list[int]:
    """Where the lead-ins of ``words`` end, longest first: a run enough notes open with that
    fewer open with once one word more is added (or that the note's core ends), holding a word
    of saying beyond the shorter lead-in before it ("… mentioned that" / "… mentioned that has
    a cousin who organises a" is one lead-in and a fact's own verb)."""
    longest = min(len(words) - s.min_core, s.max_words)
    if count.get(words[:s.min_words], 0) < s.min_notes:
        return []  # most notes: no run opening them is shared enough
    cuts = []
    for k in range(longest, s.min_words - 1, -1):
        shared = count.get(words[:k], 0)
        if shared >= s.min_notes and (k == longest or count.get(words[:k + 1], 0) < shared):
            cuts.append(k)
    kept, last = [], 0
    for k in reversed(cuts):  # shortest first: each kept run adds words of saying to the last
        if _SAYING.isdisjoint(words[last:k]):
            continue
        last = k
        kept.append(k)
    return kept[::-1]


def lead_in_cores(frames: Sequence[Sequence[str]],
                  settings: LeadInSettings = LeadInSettings()) -> list[tuple[int, tuple[str, ...]]]:
    """(row, core) for every note that opens or closes with a lead-in: the note's words with
    the lead-in set aside, at most ``max_cores`` per note (each end's longest, then both)."""
    words = [tuple(f) for f in frames]
    heads = _shared_runs(words, settings)
    tails = _shared_runs([w[::-1] for w in words], settings)
    out: list[tuple[int, tuple[str, ...]]] = []
    for row, w in enumerate(words):
        if len(w) < settings.min_words + settings.min_core:
            continue
        front = _cut_points(w, heads, settings)
        back = _cut_points(w[::-1], tails, settings)
        cores = [w[k:] for k in front[:1]] + [w[:len(w) - k] for k in back[:1]]
        if front and back and len(w) - front[0] - back[0] >= settings.min_core:
            cores.append(w[front[0]:len(w) - back[0]])
        cores += [w[k:] for k in front[1:]] + [w[:len(w) - k] for k in back[1:]]
        trimmed = (_trim(core) for core in cores[:settings.max_cores])
        out.extend((row, core) for core in dict.fromkeys(trimmed)
                   if len(core) >= settings.min_core)
    return out


def _trim(words: tuple[str, ...]) -> tuple[str, ...]:
    """``words`` without the ``_JOINING`` words at either end."""
    start, end = 0, len(words)
    while start < end and words[start] in _JOINING:
        start += 1
    while end > start and words[end - 1] in _JOINING:
        end -= 1
    return words[start:end]


def lead_in_pairs(frames: Sequence[Sequence[str]], frame: FrameSettings = FrameSettings(),
                  settings: LeadInSettings = LeadInSettings()) -> set[tuple[int, int]]:
    """Row pairs (i < j) whose notes are a same-frame pair once a lead-in of one or both is set
    aside (the notes' ``frame_tokens`` in, as ``same_frame_pairs`` reads them); empty when no
    note of the scope has a lead-in."""
    cores = lead_in_cores(frames, settings)
    if not cores:
        return set()
    # A wrapped note meets the others by its cores alone: whole, it differs from an unwrapped
    # note or another's core by its wrapping, more than a span.
    wrapped = {row for row, _ in cores}
    whole = [row for row in range(len(frames)) if row not in wrapped]
    rows = [row for row, _ in cores] + whole
    tokens = [core for _, core in cores] + [_trim(tuple(frames[row])) for row in whole]
    found = same_frame_pairs((), frame, tokens=tokens).pairs
    pairs = set()
    for x, y in found:
        if x >= len(cores) and y >= len(cores):
            continue  # two whole notes: the caller's same-frame pass has them
        i, j = rows[x], rows[y]
        if i != j:
            pairs.add((min(i, j), max(i, j)))
    return pairs


def frame_pairs(frames: Sequence[Sequence[str]], frame: FrameSettings = FrameSettings(),
                lead_in_notes: int = LeadInSettings.min_notes) -> FrameReport:
    """Same-frame pairs of the notes (their ``frame_tokens``) as stated (``as_stated``: "…
    again" is the frame of "…"), and with the scope's lead-ins set aside (``lead_in_notes``
    notes a lead-in must open or close, at least 2; 0: not)."""
    stated = [as_stated(tuple(f)) for f in frames]
    report = same_frame_pairs((), frame, tokens=stated)
    if lead_in_notes:
        report.pairs |= lead_in_pairs(stated, frame, LeadInSettings(min_notes=lead_in_notes))
    return report
