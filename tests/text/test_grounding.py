"""The shared grounding check (R13): whole tokens, content words, numbers, negations, omissions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.domain.types import Note, Scope
from worker.text.grounding import check_fusion
from worker.text.temporal import allowed_dates
from worker.text.words import stem, tokens

PY = ["The user writes Python 3.12.", "Type hints everywhere."]


@pytest.mark.parametrize(("sources", "fused", "invented"), [
    # Verbatim sources and clean unions are grounded, whatever the case or word form.
    (PY, "The user writes Python 3.12.", ()),
    (PY, "the user writes python 3.12 with type hints everywhere", ()),
    (["User prefers dark mode", "User likes dark mode at night"],
     "User prefers dark mode and likes it at night too", ()),
    (["User runs tests with pytest"], "User running tests with pytest", ()),  # -ing / -s forms
    (["User owes three dollars"], "User owes 3 dollars", ()),  # spelled-out = digits
    (["Budget is 1,000 euros"], "Budget is 1000 euros", ()),
    (["Docs at https://python.org/dev"], "Python docs at https://python.org/dev", ()),
    # Specifics no source states.
    (PY, "The user writes Python 3.13.", ("3.13",)),
    (PY, "The user writes Python, per Guido.", ("guido",)),
    (PY, "Python 3.12 docs: https://python.org", ("docs", "https://python.org")),
    (PY, "Python 3.12, ada@example.com", ("ada@example.com",)),
    (PY, "Python 3.12 since 2024-05-01.", ("2024-05-01",)),
    # The adversarial pass's cases: whole tokens, never substrings; every content word counts.
    (["User jogs every morning"], "Orn jogs every morning", ("orn",)),
    (["Account opened in 2021"], "Account opened in 2021; owes 20", ("owes", "20")),
    (["User likes lemon in tea"], "User likes Lemo in tea", ("lemo",)),
    (["User likes lemon in tea"], "User likes lemon in tea, says bob", ("says", "bob")),
    (["User owes three dollars"], "User owes twenty dollars", ("twenty",)),
    (["User owes three dollars"], "User owes 30 dollars", ("30",)),
    (["Dana reviews billing reports"],
     "Dana reviews billing reports and is an administrator with full billing access",
     ("administrator", "full", "access")),

    # a number's sign is the number (before: both grounded, the fact flipped)
    (["Freezer is set to -18 degrees"], "Freezer is set to 18 degrees", ("18",)),
    (["Freezer is set to 18 degrees"], "Freezer is set to -18 degrees", ("-18",)),
    (["Freezer is set to −18 degrees"], "Freezer is set to -18 degrees", ()),  # U+2212
    (["Office on floors 10-12"], "Office on floors 10-12", ()),  # a range keeps its hyphen
])
def test_invented_tokens(sources: list[str], fused: str, invented: tuple[str, ...]) -> None:
    """Each content token of the fusion (word stem, number, URL, address) must be a whole
    token of some source; stop words and word forms are free, nothing else is."""
    assert check_fusion(sources, fused).invented == invented


@pytest.mark.parametrize(("sources", "fused", "flipped"), [
    # A negation the fusion adds to a fact the sources state positively.
    (["User never drinks coffee", "User drinks green tea"], "User never drinks green tea",
     True),
    (["User drinks green tea"], "User does not drink green tea", True),
    # A negation the fusion drops.
    (["User does not drink green tea"], "User drinks green tea", True),
    (["User stopped using Slack"], "User uses Slack", True),
    (["User never drinks coffee after 2pm"], "User drinks coffee", True),
    # Kept polarity, in other words or another order: not a flip.
    (["User never drinks coffee", "User drinks green tea"],
     "User drinks green tea and never drinks coffee", False),
    (["User does not use Windows", "User uses macOS"], "User uses macOS, not Windows", False),
    (["User stopped using Slack"], "User stopped using Slack", False),
    (["User does not drink coffee", "User does not drink tea"],
     "User drinks neither coffee nor tea", False),
])
def test_negation_flips(sources: list[str], fused: str, flipped: bool) -> None:
    """A negator scopes the rest of its clause; the fusion may neither negate what the sources
    state positively nor restate positively what a source negates."""
    assert bool(check_fusion(sources, fused).negation_flips) is flipped


@pytest.mark.parametrize(("sources", "fused", "found"), [
    # The audit's cases: the same words, the relation turned round (passed before).
    (["Bob reports to Anna"], "Anna reports to Bob", ("anna reports to bob",)),
    (["Alice prefers tea over coffee in the morning"] * 3,
     "Alice prefers coffee over tea in the morning", ("coffee over tea",)),
    # A comparison, a choice, a span, an agent, an order in time (and its converse marker).
    (["Alice is taller than Bob"], "Bob is taller than Alice", ("bob is taller than alice",)),
    (["Alice prefers tea rather than coffee"], "Alice prefers coffee rather than tea",
     ("coffee rather than tea",)),
    (["Alice moved from Paris to Berlin"], "Alice moved from Berlin to Paris",
     ("berlin to paris",)),
    (["Slack was replaced by Teams"], "Teams was replaced by Slack",
     ("teams was replaced by slack",)),
    (["Alice runs before breakfast"], "Alice runs after breakfast",
     ("alice runs after breakfast",)),
    (["The cache sits above the database"], "The cache sits below the database",
     ("cache sits below the database",)),
    (["Score went from 3 to 5"], "Score went from 5 to 3", ("5 to 3",)),
    # Legitimate rewordings: one phrase moved, a converse marker, a symmetric relation, every
    # source's order kept, sources that state both orders (a changed preference), a passive.
    (["Alice drinks tea in the morning"], "In the morning Alice drinks tea", ()),
    (["Alice switched to Vim in 2020"], "In 2020 Alice switched to Vim", ()),
    (["Alice moved from Paris to Berlin"], "Alice moved to Berlin from Paris", ()),
    (["Alice wakes before Bob"], "Bob wakes after Alice", ()),
    (["Alice runs before breakfast"], "Before breakfast, Alice runs", ()),
    (["Alice is married to Bob"], "Bob is married to Alice", ()),
    (["Alice lives next to Bob"], "Bob lives next to Alice", ()),
    (["Alice is talking to Bob"], "Bob is talking to Alice", ()),
    (["Alice prefers tea over coffee", "Alice prefers tea over coffee at night"],
     "At night too Alice prefers tea over coffee", ()),
    (["Alice prefers tea over coffee", "Alice now prefers coffee over tea"],
     "Alice now prefers coffee over tea", ()),
    (["Bob reports to Anna", "Anna leads the billing team"],
     "Anna leads the billing team; Bob reports to Anna", ()),
    (["A bee is clinging to a yellow flower"], "A yellow flower is being clung to by a bee", ()),
    (["A horse is ridden in a creek by a man"], "The man rides a horse by a creek", ()),
])
def test_reversed_relations(sources: list[str], fused: str, found: tuple[str, ...]) -> None:
    """Two words a source orders one way across a directional marker (to, from, by, than,
    over, instead of, before/after, above/below) may not swap sides in the fusion; one phrase
    moving, a converse marker saying the same, or a symmetric relation is a rewording."""
    check = check_fusion(sources, fused)
    assert check.reversed == found
    assert not found or not check.grounded  # a reversed relation is not grounded


def test_omissions_are_phrases_and_dropped_sources_are_named() -> None:
    """Missing source content comes back as adjacent phrases ("session store"); a source whose
    content is mostly missing is dropped, not merged."""
    sources = ["User keeps the session store in Postgres", "User caches with Redis"]
    check = check_fusion(sources, "User caches with Redis")
    assert check.omitted == ("keeps", "session store", "postgres")
    assert check.dropped == (0,)
    union = check_fusion(sources, "User keeps the session store in Postgres and caches with Redis")
    assert union.omitted == () and union.dropped == () and union.grounded


@pytest.mark.parametrize(("fused", "found"), [
    ("User moved to unittest yesterday", ("yesterday",)),
    ("Demo is next week", ("next week",)),
    ("User switched 3 days ago", ("3 days ago",)),
    ("User recently switched", ("recently",)),
    ("The demo is on Friday", ("friday",)),
    ("The demo is on Friday, May 8", ()),
    ("The database is reset every Monday at 06:00", ()),
    ("User moved to unittest on 2026-05-04", ()),
])
def test_relative_time_left_in_the_fusion(fused: str, found: tuple[str, ...]) -> None:
    """Relative time (and a bare weekday) is reported; absolute dates and schedules are not."""
    assert check_fusion([fused], fused).relative_time == found


def test_stemmer_and_number_words() -> None:
    """Word forms share a stem; different words keep different ones; number words fold."""
    assert {stem(w) for w in ("use", "uses", "using", "used")} == {"us"}
    assert stem("preferred") == stem("prefers") == "prefer"
    assert len({stem("morning"), stem("orn"), stem("lemon"), stem("lemo")}) == 4
    assert [t.key for t in tokens("twenty-five, three hundred and one thousand two")
            if t.content] == ["25", "300", "1002"]


def test_a_relative_date_may_be_resolved_near_its_note() -> None:
    """"on Friday" / "last week" in a source allow the dates around its created_at, and only
    those; a source without relative time allows none."""
    written = datetime(2026, 5, 4, tzinfo=UTC)  # a Monday
    friday = Note(id="a", scope=Scope("a"), content="Demo is on Friday", created_at=written)
    plain = Note(id="b", scope=Scope("a"), content="Demo is in room B", created_at=written)
    fused = "Demo is on 2026-05-08"
    assert check_fusion([friday.content], fused, allowed=allowed_dates([friday])).invented == ()
    assert check_fusion([plain.content], fused, allowed=allowed_dates([plain])).invented == (
        "2026-05-08",)
    assert check_fusion([friday.content], "Demo is on 2027-01-01",
                        allowed=allowed_dates([friday])).invented == ("2027-01-01",)


_VOCAB = ["user", "prefers", "dark", "mode", "never", "not", "tea", "drinks", "3.12", "2021",
          "twenty", "five", "lemon", "morning", "and", "but", "https://ex.org/a", "a@ex.org",
          "isn't", "stopped", "using", "Slack", "the", "in", ",", ".", ";", "User's", "boxes"]


@given(st.lists(st.lists(st.sampled_from(_VOCAB), min_size=1, max_size=12).map(" ".join),
                min_size=1, max_size=4))
def test_verbatim_sources_and_their_union_invent_nothing(sources: list[str]) -> None:
    """Whatever the sources say, one of them verbatim, or all of them joined, invents no token
    and (the union) drops no source: the rule judge's verbatim merges stay grounded."""
    assert check_fusion(sources, sources[0]).invented == ()
    union = check_fusion(sources, " ; ".join(sources))
    assert union.invented == () and union.dropped == () and union.omitted == ()


_SIDES = ["alice", "bob", "tea", "coffee", "berlin", "2020", "team"]
_MARKERS = ["to", "over", "than", "before", "after", "from", "below", "replaced by"]


@given(st.lists(st.tuples(st.lists(st.sampled_from(_SIDES), min_size=1, max_size=3),
                          st.sampled_from(_MARKERS),
                          st.lists(st.sampled_from(_SIDES), min_size=1, max_size=3)),
                min_size=1, max_size=3))
def test_a_relation_reverses_only_when_its_sides_swap(
        relations: list[tuple[list[str], str, list[str]]]) -> None:
    """Any sources built of relations ("alice tea over coffee"): one of them verbatim, or all
    joined, reverses nothing; a source's relation with its sides swapped is reversed exactly
    when the sources never state it that way (the sides share no word)."""
    sources = [" ".join([*left, marker, *right]) for left, marker, right in relations]
    assert check_fusion(sources, sources[0]).reversed == ()
    assert check_fusion(sources, " ; ".join(sources)).reversed == ()
    left, marker, right = relations[0]
    swapped = " ".join([*right, marker, *left])
    stated = set(left) & set(right) or any(swapped == s for s in sources)
    if not stated and len(sources) == 1:
        assert check_fusion(sources, swapped).reversed != ()
