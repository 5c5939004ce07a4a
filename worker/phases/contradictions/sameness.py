"""What a topic answer may apply, read from the notes' own texts: a value group whose notes do
not say one thing (a model lumping unrelated facts into one "value"), or an attribute joining
notes kept apart, applies nothing; and the model's reason, written into a retired note's
comment, is used only when it reads as a plain, short reason.

The sameness rule was chosen by measurement (tests/bench/eval_endstate.py, heavy rewording,
and the SICK and MSRP pairs of ../shared/eval-data): a note retired into the kept note of its
value must share most of its content words with the kept note, or a content word (a stem, a
number) beyond the words most
of the scope's notes hold ("Alice", a team's name), and both must have the same polarity (a
negator in both or in neither). Every pair of one value of the evolving suite passes (its
heaviest rewording, "The team ships releases on Tuesdays" / "Deployments go out on
Tuesdays", shares one word of four or five; inside a 12-30 word lead-in, one of ten or
more, so no share of the words is asked for); of SICK's pairs 2 % of
ENTAILMENT, 29 % of NEUTRAL and 90 % of CONTRADICTION are refused (under 1 % of CONTRADICTION
without the polarity test), of MSRP's paraphrases 3 %; and every pair of seven unrelated
facts about one person.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import permutations
from typing import Any

from worker.domain.types import Note
from worker.phases.contradictions.topics import Attribute, TopicVerdict
from worker.safety.injection import injection_signals
from worker.text.words import hides_text, strip_invisible, tokens

# A retired note whose content words the kept note holds for more than this share restates
# it, whatever the scope's subject ("Never run the linter before each commit" / "... before
# committing" in a scope mostly about the linter); a two-word name is only half of a note.
MOST = 0.5
# A word in at least this share of the scope's notes (of three or more) is its subject: it
# says whom the note is about, not what.
SUBJECT_SHARE = 0.5
SUBJECT_MIN_NOTES = 3
# The model's reason in a comment: at most this many characters.
REASON_MAX = 200
# When a refused attribute's pairs are asked again (``unsettled``).
ASKED_AGAIN = ("the attribute is asked again once a note of it changes or "
               "DREAM_LLM_UNANSWERED_HOURS pass")


def content_words(text: str) -> frozenset[str]:
    return frozenset(t.key for t in tokens(text) if t.content)


def subject_words(texts: Iterable[str]) -> frozenset[str]:
    """Content words at least ``SUBJECT_SHARE`` of the texts hold (none under three texts)."""
    bags = [content_words(t) for t in texts]
    if len(bags) < SUBJECT_MIN_NOTES:
        return frozenset()
    df = Counter(w for bag in bags for w in bag)
    return frozenset(w for w, n in df.items() if n >= SUBJECT_SHARE * len(bags))


def unlike(retired: str, kept: str, subject: frozenset[str]) -> str | None:
    """Why ``retired`` cannot be a restatement of ``kept``; None when it can."""
    if _negated(retired) != _negated(kept):
        return "one is negated and the other is not"
    words, held = content_words(retired), content_words(kept)
    if len(words & held) > MOST * len(words):
        return None  # most of what it says, the kept note says (in a scope all about it too)
    own = words - subject
    if own and own.isdisjoint(held):
        return "they share no word beyond the scope's subject"
    return None


def _negated(text: str) -> bool:
    return any(t.negator for t in tokens(text))


def unsupported_value(attr: Attribute, notes: dict[str, Note],
                      subject: frozenset[str]) -> tuple[str, str, str] | None:
    """The first pair of one of ``attr``'s values whose texts do not say one thing: (the note
    that would retire, the note it would retire into, why). A value with a ``fullest`` note
    retires every other note into it; without, any note may be kept, so every order is asked."""
    for cls in attr.values:
        if cls.fullest is not None:
            pairs = [(m, cls.fullest) for m in cls.note_ids if m != cls.fullest]
        else:
            pairs = list(permutations(cls.note_ids, 2))
        for retired, kept in pairs:
            why = unlike(notes[retired].content, notes[kept].content, subject)
            if why is not None:
                return retired, kept, why
    return None


@dataclass
class Consistency:
    """Filters a topic answer: what the texts and what is already settled allow of it."""

    notes: dict[str, Note]
    apart: set[frozenset[str]]
    counters: Any
    _subject: frozenset[str] | None = None
    # The last answer's attributes refused for a value (``unsettled``: not asked by every run).
    refused: list[Attribute] = field(default_factory=list)

    def subject(self) -> frozenset[str]:
        if self._subject is None:
            self._subject = subject_words(n.content for n in self.notes.values())
        return self._subject

    def consistent(self, verdict: TopicVerdict) -> tuple[TopicVerdict, list[dict[str, Any]]]:
        """The answer without its attributes that join two notes judged apart at their
        current versions (before, or earlier in this run) or kept apart by a host or a
        reviewer: a model lumping two attributes, or overriding a person's word, not a finding
        (a pair judged apart is not asked again unless a note changes, so no later answer is
        taking back a mistake made on it); nor those with a value whose notes do not say one
        thing. Counted, with an entry for each value refused; the attribute's pairs are not
        decided, and are not asked again for a while (``unsettled``)."""
        kept: list[Attribute] = []
        entries: list[dict[str, Any]] = []
        self.refused = []
        for attr in verdict.attributes:
            if self._joins_apart(attr):
                self._count("attributes_against_memory")
                continue
            found = unsupported_value(attr, self.notes, self.subject())
            if found is None:
                kept.append(attr)
                continue
            self._count("values_unsupported")
            self.refused.append(attr)
            entries.append({"a": found[0], "b": found[1], "relation": "same value",
                            "action": "none", "kind": "unsupported",
                            "why": f"kept both: {found[2]}; {ASKED_AGAIN}"})
        if len(kept) == len(verdict.attributes):
            return verdict, entries
        return TopicVerdict(verdict.topic, kept), entries

    def _count(self, key: str) -> None:
        self.counters[key] = (self.counters.get(key) or 0) + 1

    def _joins_apart(self, attr: Attribute) -> bool:
        if not self.apart:
            return False
        ids = sorted(nid for cls in attr.values for nid in cls.note_ids)
        return any(frozenset((a, b)) in self.apart
                   for k, a in enumerate(ids) for b in ids[k + 1:])


def usable_reason(reason: str, fallback: str) -> str:
    """The model's reason as a comment may hold it: invisible characters gone, whitespace
    collapsed, at most ``REASON_MAX`` characters; ``fallback`` (the policy's own words) when
    it is blank, hides text, or reads like instructions — it is never acted on, only kept."""
    text = " ".join(strip_invisible(reason).split())
    if not text or hides_text(reason) or injection_signals(text):
        return fallback
    if len(text) > REASON_MAX:
        text = text[: REASON_MAX - 1].rstrip() + "…"
    return text
