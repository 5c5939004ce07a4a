"""Generator of evolving-fact profiles with their exact gold end state (written by this team).

A profile is one user's memory after months of sessions: slot-like facts whose value changes 1-7
times (negation flips, tool replacements, partial quantity changes, reverts to an earlier value,
restatements in other words), one-off exceptions that must not overturn a policy, complementary
facts that must both stay, and chit-chat distractors. Deterministic for a seed.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class Family:
    """One attribute: sentence frames (``{v}`` = the value) and the values it can take."""

    name: str
    frames: tuple[str, ...]
    values: tuple[str, ...]
    exception: str | None = None  # a one-off event that leaves the attribute unchanged


# frames: (canonical, a light rewording, a heavy rewording that shares few words).
FAMILIES: tuple[Family, ...] = (
    Family("linter", ("{v} run the linter before committing",
                      "{v} run the linter before each commit", "Linting before commits: {v}"),
           ("Always", "Never", "Only on Fridays", "Sometimes")),
    Family("chat", ("The team chats on {v} every day", "The team chats on {v}",
                    "Team chat runs on {v}"),
           ("Slack", "Microsoft Teams", "Discord", "Zulip", "Mattermost", "Google Chat")),
    Family("vacation", ("The user has {v} vacation days left this year",
                        "The user has {v} vacation days left",
                        "Remaining vacation this year: {v} days"),
           ("20", "10", "half of the", "all of the", "3", "none of the")),
    Family("units", ("Reports use {v} units", "All reports use {v} units",
                     "The customer wants {v} units in reports"),
           ("metric", "imperial")),
    Family("editor", ("The user writes code in {v}", "The user writes all code in {v}",
                      "Preferred code editor: {v}"),
           ("VS Code", "Vim", "Emacs", "JetBrains IDEA", "Zed", "Sublime Text")),
    Family("standup", ("The daily standup starts at {v}", "The standup starts at {v} every day",
                       "Standup meetings are held at {v}"),
           ("9:00", "9:30", "10:00", "8:45", "11:00")),
    Family("flight", ("The user always flies {v} class", "The user always books {v} class",
                      "Books {v} class for every flight"),
           ("economy", "premium economy", "business"),
           exception="The user flew first class once, for the honeymoon trip to Tokyo"),
    Family("diet", ("The user follows a {v} diet", "The user eats a {v} diet",
                    "Diet preference: {v}"),
           ("vegetarian", "vegan", "pescatarian", "low-carb", "omnivorous")),
    Family("deploy", ("Deployments go out on {v}", "Production deployments go out on {v}",
                      "The team ships releases on {v}"),
           ("Tuesdays", "Thursdays", "Mondays", "every weekday")),
    Family("tests", ("Unit tests run with {v}", "All unit tests run with {v}",
                     "The project's test runner is {v}"),
           ("pytest", "unittest", "nose2", "ward")),
    Family("review", ("Pull requests need {v} approvals", "Every pull request needs {v} approvals",
                      "Every pull request requires {v} reviews"),
           ("two", "one", "three", "no")),
    Family("timezone", ("The user works in the {v} time zone",
                        "The user is based in the {v} time zone",
                        "Working hours follow {v} time"),
           ("Berlin", "London", "New York", "Singapore", "Lisbon")),
)

COMPLEMENTARY: tuple[tuple[str, str], ...] = (
    ("The user prefers tea in the afternoon", "The user drinks coffee in the morning"),
    ("The user uses a standing desk at the office", "The user uses a laptop stand at home"),
    ("The user reads fiction on weekends", "The user reads technical books on the train"),
    ("The user runs on Monday mornings", "The user swims on Thursday evenings"),
    ("The user's invoices go to the Berlin office", "The user's contracts go to the Paris office"),
)

CHITCHAT: tuple[str, ...] = (
    "Mentioned that the weather in {p} was lovely",
    "Asked for a banana bread recipe for a party in {p}",
    "Said the train to {p} was late again",
    "Talked about a documentary on octopuses",
    "Shared a photo of a hike near {p}",
    "Laughed about a cat video a friend sent",
    "Asked which museums are open in {p}",
)
PLACES = ("Porto", "Kyoto", "Oslo", "Denver", "Nairobi", "Quito", "Hanoi", "Perth")
# ``filler``: facts that stand alone (each stays), to grow a scope past the small-scope size.
FILLER: tuple[str, ...] = (
    "Went to a {e} in {p} in {m}",
    "Recommended a {e} in {p} to a colleague in {m}",
    "Has a cousin who organises a {e} in {p} every {m}",
)
EVENTS = ("jazz concert", "pottery class", "chess tournament", "food market", "film festival",
          "climbing trip", "book fair", "cooking workshop", "football match", "science museum")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")


@dataclass(frozen=True)
class GoldNote:
    id: str
    text: str
    created_at: datetime
    slot: str  # family name, or a unique id for a fact that stands alone
    value: str
    kind: str  # version | exception | complementary | chitchat
    conversation: str = ""  # the session it was said in: "<user>-s<k>"
    importance: float = 0.5


@dataclass
class Profile:
    user_id: str
    notes: list[GoldNote] = field(default_factory=list)
    current: dict[str, str] = field(default_factory=dict)  # slot → its current value
    changes: dict[str, int] = field(default_factory=dict)  # family slot → number of changes
    sessions: list[datetime] = field(default_factory=list)  # each session's start, in order

    @property
    def last_session(self) -> datetime:
        return max(n.created_at for n in self.notes)


START = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
# Consecutive versions of one attribute at least this many days apart: the suite's first
# policy picked the newer of two values only when > 7 days apart (``--version-gap`` narrows it:
# today's picks it when more than an hour later).
MIN_GAP_DAYS = 8


REWORDING = {"light": 1, "heavy": 2}
# ``wordy``: each note as an extraction model often writes it, inside a clause about where it
# was said, 12-30 words (LoCoMo's observation facts: median 14 words, 90th percentile 21).
# A lead-in is shared by notes of different attributes and differs between versions of one.
LEAD_INS = (
    "During the weekly planning call the user mentioned that {t}",
    "The user told the assistant in passing, while chatting about other things, that {t}",
    "Noted from a longer conversation about the upcoming quarter: {t}",
    "{T}, according to what the user said near the end of the session",
)


def generate(count: int, seed: int = 13, families_per_profile: tuple[int, int] = (4, 7),
             paraphrase_share: float = 0.3, revert_share: float = 0.25,
             rewording: str = "light", wordy: bool = False,
             min_gap_days: int = MIN_GAP_DAYS,
             importance: tuple[float, float] = (0.5, 0.5),
             session_dates: bool = False, filler: int = 0,
             verbatim: bool = False) -> list[Profile]:
    """``count`` profiles; each slot changes value 1-7 times over sessions 2-5 days apart.

    ``paraphrase_share`` of the versions use another wording of the attribute: ``light`` (a
    restatement that keeps the attribute's words) or ``heavy`` (few words in common).
    ``wordy``: the same profiles, each note inside one of ``LEAD_INS`` (drawn apart, so the
    facts, values and gold are those of ``wordy=False``). ``min_gap_days``: the least time
    between two versions (sessions are 2-5 days apart: 1 lets versions follow session on
    session; 0 also lets a version be corrected in its own session, 5-50 minutes later).
    ``importance``: each note's importance drawn uniformly from this range (drawn apart).
    ``filler``: that many more facts per profile, each standing alone (drawn apart), dated in
    random sessions: a scope of a few hundred notes.
    ``session_dates``: every note dated at its session's start, as a corpus that dates only
    sessions does (LoCoMo's observations): notes of one session share one timestamp, and
    their order is only the order they are listed in.
    ``verbatim``: a value said again repeats its earlier words exactly (no "again", "once
    more"), so one text is several notes of one history, at different dates.
    """
    rng = random.Random(seed)
    frame = REWORDING[rewording]
    profiles = [_profile(rng, f"p{k:04d}", families_per_profile, paraphrase_share,
                         revert_share, frame, min_gap_days, verbatim) for k in range(count)]
    if filler:
        fill = random.Random(seed + 3)
        for p in profiles:
            _add_filler(fill, p, filler)
    if session_dates:
        for p in profiles:
            p.notes[:] = [replace(n, created_at=_session_start(p, n)) for n in p.notes]
    if wordy:
        leads = random.Random(seed + 1)
        for p in profiles:
            p.notes[:] = [replace(n, text=_lead_in(leads.choice(LEAD_INS), n.text))
                          for n in p.notes]
    if importance != (0.5, 0.5):
        draws = random.Random(seed + 2)
        for p in profiles:
            p.notes[:] = [replace(n, importance=round(draws.uniform(*importance), 2))
                          for n in p.notes]
    return profiles


def _add_filler(rng: random.Random, p: Profile, count: int) -> None:
    texts = rng.sample([f.format(e=e, p=pl, m=m) for f in FILLER for e in EVENTS
                        for pl in PLACES for m in MONTHS], count)
    for k, text in enumerate(texts):
        k_session = rng.randrange(len(p.sessions))
        slot = f"filler:{text}"
        p.notes.append(GoldNote(f"{p.user_id}-f{k}", text, p.sessions[k_session], slot, text,
                                "chitchat", f"{p.user_id}-s{k_session}"))
        p.current[slot] = text
    p.notes.sort(key=lambda n: n.created_at)  # stable: notes of one time keep their order


def _session_start(p: Profile, n: GoldNote) -> datetime:
    return p.sessions[int(n.conversation.rsplit("-s", 1)[1])]


def _lead_in(lead: str, text: str) -> str:
    return lead.format(t=text[0].lower() + text[1:], T=text)


def _profile(rng: random.Random, user_id: str, families_per_profile: tuple[int, int],
             paraphrase_share: float, revert_share: float, reworded: int,
             min_gap_days: int, verbatim: bool = False) -> Profile:
    profile = Profile(user_id)
    used_texts: set[str] = set()
    families = rng.sample(FAMILIES, rng.randint(*families_per_profile))
    # Sessions: a few months, one every 2-5 days.
    sessions = [START + timedelta(days=rng.randint(0, 20))]
    while len(sessions) < 60:
        sessions.append(sessions[-1] + timedelta(days=rng.randint(2, 5), hours=rng.randint(0, 8)))

    def add(text: str, when: datetime, slot: str, value: str, kind: str) -> None:
        base = text
        for suffix in ("", " again", " once more", " still"):
            text = base + suffix
            if verbatim or text not in used_texts:
                break
        used_texts.add(text)
        conversation = f"{user_id}-s{bisect_right(sessions, when) - 1}"
        profile.notes.append(GoldNote(f"{user_id}-{len(profile.notes)}", text, when, slot,
                                      value, kind, conversation))

    for family in families:
        changes = rng.randint(1, 7)
        values = _value_sequence(rng, family.values, changes + 1, revert_share)
        when = rng.choice(sessions[:10])
        for k, value in enumerate(values):
            frame = (family.frames[reworded] if rng.random() < paraphrase_share
                     else family.frames[0])
            add(frame.format(v=value), when, family.name, value, "version")
            if family.exception and k == 0:
                add(family.exception, when + timedelta(days=rng.randint(1, 3)),
                    f"exception:{family.name}", "once", "exception")
            later = [s for s in sessions if s >= when + timedelta(days=min_gap_days)]
            if not later:
                break
            after = rng.choice(later[:6])
            # ``min_gap_days=0``: the same session may come up; the value is corrected in it.
            when = after if after > when else when + timedelta(minutes=rng.randint(5, 50))
        profile.current[family.name] = [n for n in profile.notes if n.slot == family.name][-1].value
        profile.changes[family.name] = sum(1 for n in profile.notes if n.slot == family.name) - 1
    for a, b in rng.sample(COMPLEMENTARY, rng.randint(1, 2)):
        for text in (a, b):
            slot = f"complementary:{text}"  # named by its text: one slot across profiles
            add(text, rng.choice(sessions), slot, text, "complementary")
            profile.current[slot] = text
    for _ in range(rng.randint(2, 5)):
        text = rng.choice(CHITCHAT).format(p=rng.choice(PLACES))
        if text in used_texts:
            continue
        slot = f"chitchat:{text}"
        add(text, rng.choice(sessions), slot, text, "chitchat")
        profile.current[slot] = text
    for n in profile.notes:
        if n.kind == "exception":
            profile.current[n.slot] = n.value
    profile.sessions = sessions
    # Listed in the order they were said (ids count up as they are written).
    profile.notes.sort(key=lambda n: (n.created_at, int(n.id.rsplit("-", 1)[1])))
    return profile


def _value_sequence(rng: random.Random, pool: tuple[str, ...], length: int,
                    revert_share: float) -> list[str]:
    """Consecutive values always differ; sometimes a value returns to an earlier one."""
    out = [rng.choice(pool)]
    while len(out) < length:
        if len(out) >= 2 and rng.random() < revert_share:
            earlier = [v for v in out[:-1] if v != out[-1]]
            if earlier:
                out.append(rng.choice(earlier))
                continue
        out.append(rng.choice([v for v in pool if v != out[-1]]))
    return out
