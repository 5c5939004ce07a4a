"""The rule-based judge: merges only what rules settle safely, keeping one note's text verbatim.

Two notes are settled as the same when they are identical after normalisation, or when one
note's content words all appear in the other, from its start, with one subject, in one tense
("is" / "was"), and neither adds a number, a negation or a name the other lacks in a way that
could change the meaning, nor a word that makes the shorter one's last noun part of another
("a car" / "a car wash").
Only a note stated no earlier ever keeps its text over another's: a newer, shorter note may
have dropped the very word ("former", "hardly", "nicht mehr") that made the older one wrong.
Everything else stays open.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from itertools import dropwhile, takewhile

from worker.domain.types import VALUE_SYMBOLS, Note, normalise_text, said_order
from worker.text.words import STOPWORDS as FUNCTION_WORDS


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOPWORDS = _wordset("""
a an the and or but
is are was were be been being am do does did has have had having
this that these those it its it's there their they them he she his her
him i me my we our us you your user users user's which who whom whose what when where while
also very just so such some any each every all both either one ones own same too
being getting got get gets
""")

NEGATIONS = _wordset("""
no not never none nobody nothing nowhere neither nor without cannot can't won't don't doesn't
didn't isn't aren't wasn't weren't hasn't haven't hadn't shouldn't wouldn't couldn't mustn't
n't stop stopped stops quit avoid avoids avoided dislike dislikes hate hates anymore longer
except instead
former formerly ex previously hardly barely scarcely zero
nicht kein keine keinen keiner keines nie niemals ohne niet nooit geen
ne pas jamais aucun aucune sans nunca nada ningún ninguna sin non não nao nem mai senza
inte ikke ej aldri aldrig не нет никогда
""")

# Who a note is about, when a pronoun or the user says it: "User lives in Paris" is not said
# by "User's mother lives in Paris", nor "He lives in Paris" by "She lives in Paris". These are
# stop words for containment; the ones before a note's first content word are its subject.
SUBJECTS = _wordset("""
i me my mine we us our ours you your yours he him his she her hers they them their theirs
it its user users user's users'
""")

# The auxiliaries that say when: "The user is vegetarian" is not "The user was vegetarian", nor
# "has a cat" "had a cat" or "has been vegan" (an audit found these merged as one content, the
# newer value retired for a protected older one). A note's tense is the set of these it uses;
# the present ("is", "has", "does") is compared only against the past and the perfect.
TENSES = {**dict.fromkeys(("was", "were", "had", "did"), "past"), "been": "perfect"}

# Another person named by a possessive and a relation ("his wife", "user's son"): a fuller note
# that names one the shorter does not may say the shorter note's fact of that person instead.
POSSESSIVES = _wordset("his her their my our your user's users' its")
RELATIVES = _wordset("""
wife husband partner spouse fiance fiancee fiancé fiancée boyfriend girlfriend son sons daughter
daughters child children kid kids baby mother mom mum father dad parent parents brother
brothers sister sisters sibling siblings grandmother grandfather grandma grandpa grandparents
aunt uncle cousin niece nephew friend friends boss manager colleague colleagues coworker
roommate neighbour neighbor family
""")

# Quantity and frequency words are stop words for containment, yet they state a value like a
# number does: "has all of the vacation days left" is not contained in "has half of them left".
QUANTIFIERS = _wordset("""
all every each some any both either one none half most many few several only
always usually often sometimes rarely seldom
""")

_WORD = re.compile(rf"[\w./'’\u2212{re.escape(VALUE_SYMBOLS)}-]+", re.UNICODE)  # "C#", "100%"
_NUMBER = re.compile(r"\d")
# Punctuation around a token, but a minus sign that starts a number: "-18" is not "18".
_EDGES = re.compile(r"^(?:[.,;:!?/']|[-\u2212](?!\d))+|[.,;:!?/'\u2212-]+$")
_TRAILING = re.compile(r"[.,;:!?/'\u2212-]$")
# A time's half of the day is part of its number: "at 9 am" is not "at 9 pm", nor "at 9".
_HALF_DAYS = {"am": "am", "pm": "pm", "a.m": "am", "p.m": "pm"}
_FUNCTION = FUNCTION_WORDS | STOPWORDS
# What may follow a shorter note's last word in a fuller one and leave that word's phrase
# closed: a function word (preposition, conjunction, determiner, pronoun, auxiliary), a
# quantity or frequency word, a word of time or repetition ("… Vim again", "… once more",
# "… still", "… daily"), a negation (compared on its own), a number. Any other word may
# continue the phrase and change its head: "owns a car" / "owns a car wash", "has a dog" /
# "has a dog walker", "plays football" / "plays football video games".
_PHRASE_CLOSERS = FUNCTION_WORDS | STOPWORDS | QUANTIFIERS | NEGATIONS | _wordset("""
down along behind beside near inside outside above below against among beyond like unlike
despite past
again once anymore back already ever still now too also either later earlier lately recently
today tonight yesterday tomorrow nowadays currently really actually daily weekly monthly yearly
""")
# An adverb ("drinks coffee slowly", "is singing passionately") says how, it names no new
# thing: a word of six letters or more in -ly closes the phrase too, except these nouns and
# adjectives that make a compound with a noun before them ("a dog friendly …", "car assembly").
_NOT_ADVERBS = _wordset("""
friendly family supply assembly monopoly anomaly orderly butterfly dragonfly firefly housefly
""")


@dataclass(frozen=True)
class Words:
    """What the rules compare: content words, numbers, negations (``negated``) and
    capitalised names."""

    content: frozenset[str]
    sequence: tuple[str, ...]
    numbers: frozenset[str]
    names: frozenset[str]
    quantifiers: frozenset[str] = frozenset()
    subject: frozenset[str] = frozenset()
    # Per word of ``sequence``: the word right after it may continue its phrase (a word that
    # is no ``_PHRASE_CLOSERS``, with no punctuation between).
    joined: tuple[bool, ...] = ()
    tense: frozenset[str] = frozenset()  # "past", "perfect" (``TENSES``)
    # Each negation with its place: the words before and after it that are no function words.
    negated: frozenset[tuple[str, str, str]] = frozenset()
    # Content words said in brackets, and the relatives named after a possessive.
    asides: frozenset[str] = frozenset()
    others: frozenset[str] = frozenset()


def _tokens(text: str) -> list[str]:
    return [t for t, _ in _marked_tokens(text)]


def _marked_tokens(text: str) -> list[tuple[str, str]]:
    """The tokens, each with the punctuation that follows it (a comma, a dash, a bracket), or
    "" when none does."""
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("’", "'")
    out: list[tuple[str, str]] = []
    end = 0
    for match in _WORD.finditer(text):
        word = match.group()
        token = _EDGES.sub("", word).replace("\u2212", "-")
        between = text[end:match.start()].strip() + ("" if token else word)
        if out and between:
            out[-1] = (out[-1][0], out[-1][1] + between)
        if token:
            trailing = _TRAILING.search(word)
            out.append((token, trailing.group() if trailing else ""))
        end = match.end()
    return out


def _with_half_days(marked: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """"9 pm" as one number, "9pm", as the fusion checks read it."""
    out: list[tuple[str, str]] = []
    for token, stop in marked:
        half = _HALF_DAYS.get(token.casefold())
        if half and out and not out[-1][1] and _NUMBER.search(out[-1][0]):
            out[-1] = (out[-1][0] + half, stop)
        else:
            out.append((token, stop))
    return out


def _continues(word: str) -> bool:
    if _NUMBER.search(word):
        # A number refines ("Python" / "Python 3.12"); a name with a number in it after a
        # letter names another thing ("vitamin" / "vitamin B12", "type" / "type A1").
        return word[:1].isalpha()
    if word in _PHRASE_CLOSERS or word.endswith("n't"):
        return False
    return not (len(word) >= 6 and word.endswith("ly") and word not in _NOT_ADVERBS)


# A scope's notes are compared pair by pair: bounded memos of the pure analysis (frozen) and
# of the folded text (both notes of every pair are folded before anything else is compared).
_folded = lru_cache(maxsize=1 << 12)(normalise_text)


@lru_cache(maxsize=1 << 12)
def analyse(text: str) -> Words:
    marked = _with_half_days(_marked_tokens(text))
    raw = [t for t, _ in marked]
    lowered = [LETTER if _is_letter(marked, i) else t.casefold() for i, t in enumerate(raw)]
    numbers = frozenset(t for t in lowered if _NUMBER.search(t))
    # A capitalised word that is not the first word of the note (sentence case) is a name.
    names = frozenset(
        t.casefold() for i, t in enumerate(raw)
        if i > 0 and t[:1].isupper() and t.casefold() not in STOPWORDS
    )
    kept = [i for i, t in enumerate(lowered) if t not in STOPWORDS and t not in NEGATIONS]
    sequence = tuple(lowered[i] for i in kept)
    joined = tuple(not marked[i][1] and i + 1 < len(lowered) and _continues(lowered[i + 1])
                   for i in kept)
    quantifiers = frozenset(t for t in lowered if t in QUANTIFIERS)
    lead = takewhile(lambda t: t in STOPWORDS or t in NEGATIONS, lowered)
    subject = frozenset(t for t in lead if t in SUBJECTS)
    tense = frozenset(TENSES[t] for t in lowered if t in TENSES)
    return Words(frozenset(sequence), sequence, numbers, names, quantifiers, subject,
                 joined, tense, _negated(lowered), _asides(marked, lowered),
                 frozenset(t for p, t in zip(lowered, lowered[1:], strict=False)
                           if p in POSSESSIVES and t in RELATIVES))


def _asides(marked: list[tuple[str, str]], lowered: list[str]) -> frozenset[str]:
    """The content words inside brackets: "Allergic to penicillin (his wife)"."""
    depth, out = 0, set()
    for (_, after), word in zip(marked, lowered, strict=True):
        if depth and word not in STOPWORDS and not _is_negation(word):
            out.add(word)
        depth = max(0, depth + sum(map(after.count, "([{")) - sum(map(after.count, ")]}")))
    return frozenset(out)


LETTER = "A"  # the letter "a" as a content word, told from the article (``_is_letter``)
_SENTENCE_END = re.compile(r"[.!?]")


def _is_letter(marked: list[tuple[str, str]], i: int) -> bool:
    """Whether this "a" is a letter that states something — "vitamin A", "plan A", "grade A",
    "type A" — not the article: a capital "A" inside a sentence, or an "a" that ends one. The
    article was a stop word, so "deficient in vitamin A" read as "deficient in vitamin", held
    by "deficient in vitamin B12" (an audit found it merged and vitamin A lost)."""
    token, after = marked[i]
    if token not in ("a", "A"):
        return False
    if after or i + 1 == len(marked):
        return True
    return token == "A" and i > 0 and not _SENTENCE_END.search(marked[i - 1][1])


def _is_negation(word: str) -> bool:
    return word in NEGATIONS or word.endswith("n't")


def _negated(lowered: list[str]) -> frozenset[tuple[str, str, str]]:
    """Where each negation sits: "allergic to peanuts, not to shellfish" is not "not allergic
    to peanuts, but to shellfish", nor "reports to Anna, not to Bob" "not to Anna, but to Bob"
    (an audit found these merged: the negations were compared as a set)."""
    def said(words: list[str]) -> str:
        return next((w for w in words if w not in _FUNCTION and not _is_negation(w)), "")

    return frozenset((said(lowered[i - 1::-1] if i else []), t, said(lowered[i + 1:]))
                     for i, t in enumerate(lowered) if _is_negation(t))


def _unquantified(sequence: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dropwhile(QUANTIFIERS.__contains__, sequence))


def same_or_contained(small: str, big: str) -> bool:
    """True when ``big`` says everything ``small`` says, in place, and changes no specifics.

    ``big`` may add content words after what ``small`` says, never before it (a subject or a
    qualifier: "Anna is allergic to peanuts", "On weekends user drinks coffee"), nor right
    after its last word without a function word or punctuation between ("a car wash"), and no
    negation; it may add numbers, quantity words (all, half, always…) or names only where
    ``small`` has none of that kind to contradict (a refinement, "Python" → "Python 3.12").
    A negation sits between the same words in both. ``big`` adds no words in brackets and
    names no other relative ("his wife"). Both say it in one tense ("is" / "was", "has" / "had", "has been"). Both have one subject ("User" is not "User's mother", "he" not "she").
    """
    if _folded(small) == _folded(big):
        return True
    if not _marks_kept(_folded(small), _folded(big)):
        return False
    a, b = analyse(small), analyse(big)
    # Order and adjacency matter: "cutting a box" is not contained in "cutting the tape on the
    # box", nor "the dog chases the cat" in "the cat chases the dog" (SICK NEUTRAL pairs). A
    # word of ``small`` missing from ``big`` settles it before its words are compared in place.
    # A leading quantity word is the quantifier check's ("Always run the linter …").
    says, start = _unquantified(a.sequence), _unquantified(b.sequence)
    if not a.content or not a.content <= b.content or start[:len(says)] != says:
        return False
    # ``big`` goes on right after ``small``'s last word with a word that may continue its
    # phrase: another thing, not a refinement of it ("owns a car wash" does not say "owns a
    # car"; "plays the cello in a quartet" says "plays the cello").
    if says and b.joined[len(b.sequence) - len(start) + len(says) - 1]:
        return False
    if a.negated != b.negated or a.subject != b.subject or a.tense != b.tense:
        return False
    # Words added in brackets, or another person, may say whose fact it is: "Allergic to
    # penicillin (his wife)" does not hold "Allergic to penicillin" (an audit found it merged).
    if b.asides - a.content or b.others - a.others:
        return False
    if a.quantifiers and a.quantifiers != b.quantifiers:
        return False
    if a.numbers and a.numbers != b.numbers:
        return False
    return not (a.names and a.names != b.names)


def _plain(c: str) -> bool:
    return c.isalnum() or unicodedata.category(c)[0] == "M"


@lru_cache(maxsize=1 << 12)
def _marked(folded: str) -> tuple[frozenset[str], frozenset[str]]:
    """The tokens of a folded text that carry a mark the word analysis reads past (a sign, a
    decimal point, a symbol, "ß"), and every token with its marks taken off."""
    tokens = folded.split()
    marked = frozenset(t for t in tokens if "ß" in t or not all(map(_plain, t)))
    return marked, frozenset(map(_bare, tokens))


def _bare(token: str) -> str:
    return "".join(filter(_plain, token.replace("ß", "ss")))


def _marks_kept(small: str, big: str) -> bool:
    """``big`` keeps every marked token of ``small`` ("< $1500", "❌", "O-", ".5", "Maßen"), and
    adds one only as a new word, never as another form of a word ``small`` says: "> $1500" is
    not "< $1500", ".5 mg" not "5 mg", "O-" not "O", "Massen" not "Maßen" (the word analysis
    reads each pair as the same words)."""
    (small_marked, small_bare), (big_marked, _) = _marked(small), _marked(big)
    if not small_marked <= big_marked:
        return False
    return not any((bare := _bare(t)) and bare in small_bare for t in big_marked - small_marked)


def settles_pair(text_a: str, text_b: str) -> bool:
    """The rule verdict for one pair, in either direction."""
    return same_or_contained(text_a, text_b) or same_or_contained(text_b, text_a)


def rule_judge_pairs(pairs: Sequence[tuple[str, str]]) -> list[bool]:
    """Would the rule judge merge each (text_a, text_b)? Used by the eval harness."""
    return [settles_pair(a, b) for a, b in pairs]


def keeps_over(kept: Note, other: Note) -> bool:
    """Whether the rules may retire ``other`` into ``kept``, whose text stays: ``kept`` says
    all ``other`` says (``same_or_contained``) and was stated no earlier (``said_order``), in
    the same words too: the later statement's text and order stay. Before, an older, fuller
    note absorbed the newer one and took its date: "User is a former smoker" (January) kept
    over "User is a smoker" (March) read as the current fact; "Nutzer trinkt Kaffee nicht mehr"
    over "Nutzer trinkt Kaffee"."""
    return same_or_contained(other.content, kept.content) and said_order(other) <= said_order(kept)


def _richness(note: Note) -> tuple[int, tuple[datetime, int], str]:
    """More content words first, then the later statement (``said_order``: the recording order
    between notes of one ``created_at``, not the id: two lines of one import dated alike kept
    the first line's text and retired the line recorded after it); the id only breaks a tie
    of notes without a recorded order."""
    return (len(analyse(note.content).content), said_order(note), note.id)


@dataclass(frozen=True)
class RuleGroup:
    """Notes the rules settle as one: ``keep_id``'s text is kept verbatim."""

    keep_id: str
    note_ids: tuple[str, ...]
    rule: str  # identical | contained


def rule_groups(
    notes: Sequence[Note], related: Callable[[Note, Note], bool] | None = None,
) -> tuple[list[RuleGroup], list[str]]:
    """Partition a candidate cluster into groups the rules settle and ids left open.

    Each note joins the richest (then newest) note that subsumes it and was stated no earlier
    (``keeps_over``); a note that subsumes no other and is subsumed by none stays open.
    ``related`` (e.g. cosine ≥ the rule threshold) must also hold between a note and the one it
    joins. Deterministic whatever the input order.
    """
    ordered = sorted(notes, key=_richness, reverse=True)
    heads: dict[str, list[Note]] = {}
    placed: set[str] = set()
    for head in ordered:
        if head.id in placed:
            continue
        members = [head]
        for other in ordered:
            if other.id == head.id or other.id in placed or other.id in heads:
                continue
            if (related is None or related(other, head)) and keeps_over(head, other):
                members.append(other)
        if len(members) > 1:
            heads[head.id] = members
            placed.update(m.id for m in members)
    groups = []
    for head_id, members in heads.items():
        identical = len({_folded(m.content) for m in members}) == 1
        groups.append(RuleGroup(head_id, tuple(sorted(m.id for m in members)),
                                "identical" if identical else "contained"))
    open_ids = sorted(n.id for n in notes if n.id not in placed)
    return sorted(groups, key=lambda g: g.note_ids), open_ids
