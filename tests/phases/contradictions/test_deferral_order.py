"""Topics a run's call budget cannot cover: which go first, and that none waits forever.

A first dream over a store never dreamed before asks its newest histories first (what
retrieval returns today), and reports that nothing has waited on the budget yet; from then
on the topics wait in turn, so one edited after its verdict is asked though new topics
arrive every run (before, it came after every topic never judged: never asked).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.phases.contradictions.test_service import (
    SCOPE,
    TEA_BREAKFAST,
    TEA_SUGAR,
    phase_step,
    with_stub,
)
from tests.support.factories import NOW, add_notes, days_ago
from tests.support.llm_stub import LLMStub
from tests.support.sql import recorded_statements
from worker.app import App
from worker.runs import service
from worker.store.models import NoteRow

TEA_SUGAR_EDITED = "The user prefers tea without sugar every single day"
# Histories that share no word but "uses": each one topic of its own.
FRAMES = {"Alder": ("Customer uses {} units for all reports", "metric", "imperial"),
          "Birch": ("The API uses {} for the HTTP layer", "Express", "Fastify"),
          "Cedar": ("Deployment pipeline uses {} nightly", "Jenkins", "Buildkite"),
          "Dogwood": ("Kitchen fridge uses {} water cartridges", "filtered", "bottled"),
          "Elm": ("Marketing newsletter uses {} templates weekly", "Mailchimp", "Substack"),
          "Fir": ("Garden irrigation uses {} sprinklers", "rotary", "drip"),
          "Ginkgo": ("Payroll spreadsheet uses {} formulas", "Excel", "Numbers")}
PROJECTS = list(FRAMES)


def run_at(app: App, clock: datetime) -> str:
    run_id = service.create_run(app, SCOPE, force=True, phases=["contradictions"], clock=clock)
    assert run_id
    service.execute_run(app, run_id)
    return run_id


def one_topic_per_run(app: App) -> None:
    s = app.settings.contradictions
    s.max_calls_per_run, s.notes_per_call, s.small_scope_notes = 1, 2, 0


def asked(stub: LLMStub, text: str) -> list[int]:
    """The numbers of the model calls whose prompt held ``text``."""
    return [k for k, r in enumerate(stub.chat_requests()) if text in r.user]


def build_pair(name: str, when: datetime) -> list[dict[str, str]]:
    frame, old, new = FRAMES[name]
    return [{"id": f"{name}-1", "content": frame.format(old),
             "created_at": (when - timedelta(hours=3)).isoformat()},
            {"id": f"{name}-2", "content": frame.format(new),
             "created_at": (when - timedelta(hours=2)).isoformat()}]


def about(name: str) -> str:
    frame, _, new = FRAMES[name]
    return frame.format(new)


def test_a_first_dream_asks_its_newest_history_first_and_its_backlog_before_later_topics(
    app: App, llm_stub: LLMStub
) -> None:
    """Three histories stated 90, 60 and 30 days before a first dream, one question a run: the
    newest goes first and the step says nothing had waited yet (0 days, not the notes' age);
    the next runs take the rest of that backlog newest first, before a topic found later."""
    with_stub(app, llm_stub)
    one_topic_per_run(app)
    add_notes(app, *build_pair("Alder", NOW - timedelta(days=90)),
              *build_pair("Birch", NOW - timedelta(days=60)),
              *build_pair("Cedar", NOW - timedelta(days=30)))
    first = run_at(app, NOW)
    out = phase_step(app, first)["output"]
    assert asked(llm_stub, about("Cedar")) == [0]
    assert (out["calls"], out["topics_deferred"], out["oldest_deferral_days"]) == (1, 2, 0.0)
    add_notes(app, *build_pair("Dogwood", NOW + timedelta(hours=12)))
    second = run_at(app, NOW + timedelta(days=1))
    assert asked(llm_stub, about("Birch")) == [1]
    assert phase_step(app, second)["output"]["oldest_deferral_days"] == 1.0
    run_at(app, NOW + timedelta(days=2))
    run_at(app, NOW + timedelta(days=3))
    assert asked(llm_stub, about("Alder"))[0] == 2 and asked(llm_stub, about("Dogwood")) == [3]


def test_an_edited_topic_is_asked_though_a_new_topic_arrives_every_run(
    app: App, llm_stub: LLMStub
) -> None:
    """Starvation: a pair judged once, then edited, waits from its edit; a new history arrives
    before every run, and the run's one question still reaches the edited pair in turn."""
    with_stub(app, llm_stub)
    one_topic_per_run(app)
    add_notes(app, {"id": "t1", "content": TEA_BREAKFAST, "created_at": days_ago(30)},
              {"id": "t2", "content": TEA_SUGAR, "created_at": days_ago(20)})
    run_at(app, NOW)
    assert asked(llm_stub, TEA_SUGAR) == [0]  # judged: two attributes, both kept
    with app.uow() as uow:
        uow.session.query(NoteRow).filter_by(id="t2").update(
            {"content": TEA_SUGAR_EDITED, "version": NoteRow.version + 1,
             "updated_at": NOW + timedelta(hours=1)})
        uow.commit()
    for day, name in enumerate(PROJECTS, start=1):
        when = NOW + timedelta(days=day)
        add_notes(app, *build_pair(name, when))
        run_at(app, when)
    assert asked(llm_stub, TEA_SUGAR_EDITED) == [1]  # the next run, before the newer topics
    assert asked(llm_stub, about(PROJECTS[-1])) == []  # one topic a run: still waiting


def test_deferral_age_counts_from_the_first_dream_not_from_the_note(
    app: App, llm_stub: LLMStub
) -> None:
    """A topic found by a later dream waits from its newer note, the reported age with it."""
    with_stub(app, llm_stub)
    one_topic_per_run(app)
    add_notes(app, {"id": "t1", "content": TEA_BREAKFAST, "created_at": days_ago(3)})
    run_at(app, NOW)  # the scope's first dream: one note, nothing to ask
    add_notes(app, *build_pair("Alder", NOW + timedelta(days=1)),
              *build_pair("Birch", NOW + timedelta(days=2)))
    run_id = run_at(app, NOW + timedelta(days=5))
    out = phase_step(app, run_id)["output"]
    assert asked(llm_stub, about("Alder")) == [0]  # waiting longest: found first
    assert (out["topics_deferred"], out["oldest_deferral_days"]) == (1, 3.1)


def test_the_first_dream_is_the_first_run_that_could_judge(app: App) -> None:
    """A dry run, or a run of other phases only, asked nothing: the backlog has not waited on
    the budget since them."""
    for clock, phases, dry in ((NOW - timedelta(days=10), ["prune"], False),
                               (NOW - timedelta(days=5), ["contradictions"], True),
                               (NOW - timedelta(days=1), ["contradictions"], False)):
        run_id = service.create_run(app, SCOPE, force=True, phases=phases, clock=clock,
                                    dry_run=dry)
        assert run_id
        service.execute_run(app, run_id)
    with app.uow() as uow:
        assert uow.run_history.first_dream_at(SCOPE, "contradictions") == NOW - timedelta(days=1)
        assert uow.run_history.first_dream_at(SCOPE, "prune") == NOW - timedelta(days=10)


def test_a_run_its_budget_covers_reads_no_first_dream(app: App, llm_stub: LLMStub) -> None:
    """The order only decides who is asked when the budget may fall short: a run whose calls
    fit its budget asks every topic and reads the scope's run history for nothing more (one
    statement a run kept off the common path); one that falls short reads it once."""
    with_stub(app, llm_stub)
    add_notes(app, *build_pair("Alder", NOW - timedelta(days=9)),
              *build_pair("Birch", NOW - timedelta(days=8)))
    app.settings.contradictions.notes_per_call = 2
    app.settings.contradictions.small_scope_notes = 0
    with recorded_statements(app) as seen:
        run_at(app, NOW)
    assert asked(llm_stub, about("Alder")) and asked(llm_stub, about("Birch"))
    assert not [s for s in seen if _first_dream_read(s)]
    add_notes(app, *build_pair("Cedar", NOW), *build_pair("Elm", NOW))
    app.settings.contradictions.max_calls_per_run = 1
    with recorded_statements(app) as seen:
        run_at(app, NOW + timedelta(days=1))
    assert len([s for s in seen if _first_dream_read(s)]) == 1


def _first_dream_read(statement: str) -> bool:
    return statement.startswith("SELECT coalesce(dream_runs.clock") or (
        "FROM dream_runs" in statement and "coalesce(dream_runs.clock, dream_runs.started_at)"
        in statement and "ORDER BY" in statement)
