"""Pure archive planning, by table: expiry, idle days, protection, manual notes, examples."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.support.factories import NOW
from worker.domain.types import Note, Scope
from worker.phases.archive.core import RetentionPolicy, plan_examples, plan_notes
from worker.store.repositories.examples import Example


def _note(idle: float | None = None, age: float = 500, expires_in: float | None = None,
          auto: bool = True, protection: str = "standard") -> Note:
    return Note(
        id="n", scope=Scope("a"), content="x", is_auto_generated=auto, protection=protection,
        created_at=NOW - timedelta(days=age),
        last_accessed_at=NOW - timedelta(days=idle) if idle is not None else None,
        expires_at=NOW + timedelta(days=expires_in) if expires_in is not None else None,
    )


READ = replace(_note(idle=1), id="read")


@pytest.mark.parametrize(("note", "outcome"), [
    (_note(idle=91), "stale"),
    (_note(idle=89), None),
    (_note(idle=90), None),  # "not accessed within 90 days" means strictly more than 90
    (_note(idle=None, age=91), "stale"),  # never accessed: counts from creation
    # read three times, the date of the last read unknown: unknown is not idle, kept
    (replace(_note(idle=None, age=200), access_count=3), None),
    (replace(_note(idle=None, age=200, expires_in=-1), access_count=3), "expired"),
    # read 200 days ago, its fact stated again 5 days ago (a note dated at the restatement)
    (_note(idle=200, age=5), None),
    (_note(idle=1, expires_in=-1), "expired"),
    (_note(idle=1, expires_in=0), "expired"),  # expires_at == now is past
    (_note(idle=1, expires_in=3), None),
    (_note(idle=400, auto=False), "manual"),
    (_note(idle=200, protection="protected"), "protected"),
    (_note(idle=366, protection="protected"), "stale"),
    (_note(idle=900, protection="immutable"), "protected"),
])
def test_plan_notes(note: Note, outcome: str | None) -> None:
    """Each row: one note, the default policy (90 days, protected 365), and where it ends up,
    in a scope whose host records reads (``READ``: a note read yesterday, never due)."""
    plan = plan_notes([note, READ], RetentionPolicy(), NOW)
    found = {
        "stale": bool(plan.stale), "expired": bool(plan.expired),
        "manual": bool(plan.manual_preserved), "protected": bool(plan.protected_preserved),
        "unread": bool(plan.unread_preserved),
    }
    assert [k for k, v in found.items() if v] == ([outcome] if outcome else [])


def test_a_scope_whose_host_records_no_read_archives_nothing_for_disuse() -> None:
    """No note of the scope was ever read (no last access, no access count): a host that does
    not report reads, so "not accessed for 400 days" says nothing about use, and the notes are
    kept (``unread_preserved``); what expired still goes. One read anywhere in the scope, and
    the never-read note counts from its creation again."""
    old = replace(_note(idle=None, age=400), id="old")
    gone = replace(_note(idle=None, age=400, expires_in=-1), id="gone")
    plan = plan_notes([old, gone], RetentionPolicy(), NOW)
    assert (plan.unread_preserved, [d.id for d in plan.expired], plan.stale) == (
        ["old"], ["gone"], [])
    counted = replace(old, id="counted", access_count=3)  # read, time of the read unknown
    plan = plan_notes([old, gone, counted], RetentionPolicy(), NOW)
    # ``counted`` itself stays: its reads have no date, so it is not idle (before, it went too)
    assert [d.id for d in plan.stale] == ["old"] and not plan.unread_preserved


def test_a_last_access_stamped_when_the_note_was_written_is_no_read() -> None:
    """A host that sets a note's last access as it writes it, and never again: every note
    "last accessed" the moment it was created (or seconds later) says nothing about use, so
    nothing is archived for disuse (before, every note older than the retention went). A
    last access two minutes after the writing is a read, and brings the rule back."""
    stamped = [replace(_note(idle=age, age=age), id=f"s{age}") for age in (400, 200)]
    late = replace(_note(idle=399.99, age=400), id="late")  # 14 minutes after its writing
    plan = plan_notes([*stamped, replace(stamped[0], id="ms", last_accessed_at=(
        stamped[0].created_at or NOW) + timedelta(seconds=30))], RetentionPolicy(), NOW)
    assert (sorted(plan.unread_preserved), plan.stale) == (["ms", "s200", "s400"], [])
    plan = plan_notes([*stamped, late], RetentionPolicy(), NOW)
    assert sorted(d.id for d in plan.stale) == ["late", "s200", "s400"]


def test_policy_retention_days_apply() -> None:
    """A 30-day agent archives a 31-day-idle note; a 200-day agent keeps a 150-day-idle one."""
    assert plan_notes([_note(idle=31)], RetentionPolicy(note_retention_days=30), NOW).stale
    assert not plan_notes([_note(idle=150)], RetentionPolicy(note_retention_days=200), NOW).stale


def test_the_archive_comment_names_the_limit_that_applied() -> None:
    """A protected note goes after its own, longer idle limit, and its comment says that one."""
    policy = RetentionPolicy(note_retention_days=90, protected_inactive_days=365)
    [plain] = plan_notes([_note(idle=100)], policy, NOW).stale
    [pinned] = plan_notes([_note(idle=700, age=800, protection="protected")], policy, NOW).stale
    assert plain.comment.endswith("not accessed for 100 days (retention 90 days)")
    assert pinned.comment.endswith("not accessed for 700 days (retention 365 days)")


def _example(score: float | None, idle: float, auto: bool = True,
             expires_in: float | None = None, reads: int = 0) -> Example:
    return Example(id="e", is_auto_generated=auto, success_score=score,
                   created_at=NOW - timedelta(days=idle), last_accessed_at=None,
                   expires_at=NOW + timedelta(days=expires_in) if expires_in is not None else None,
                   version=1, access_count=reads)


@pytest.mark.parametrize(("example", "outcome"), [
    (_example(40, 181), "stale"),
    (_example(60, 181), None),
    (_example(50, 181), None),  # < 50 only
    (_example(40, 179), None),
    (_example(40, 400, reads=2), None),  # used, when unknown: not idle since its creation
    (_example(40, 400, reads=2, expires_in=-1), "expired"),
    (_example(None, 400), None),  # unscored examples are not judged unsuccessful
    (_example(10, 400, auto=False), "manual"),  # a person wrote it: kept, counted
    (_example(90, 1, expires_in=-1), "expired"),
    (_example(90, 1, auto=False, expires_in=-1), "manual"),  # even past expires_at (R26)
    (_example(90, 400, auto=False), None),  # nothing would retire it: not counted either
])
def test_plan_examples(example: Example, outcome: str | None) -> None:
    """Each row: one example under the default 180-day policy and where it ends up."""
    plan = plan_examples([example], RetentionPolicy(), NOW)
    found = [k for k, v in (("stale", plan.stale), ("expired", plan.expired),
                            ("manual", plan.manual_preserved)) if v]
    assert found == ([outcome] if outcome else [])
