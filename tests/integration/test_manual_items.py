"""R26 through the `dream` command, as a user meets it (SQLite and PostgreSQL): no phase retires
a manual note or example, today, 120 or 400 days later; a fused note with a manual source stays
manual; a manual note may win a conflict but never loses one; a run's own review flags do not
make a refused cluster look new; a retirement never predates the note it retires."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from click.testing import Result
from sqlalchemy import select

from tests.cli.test_commands import dream, jsonl, one_error_line
from tests.support.factories import NOW as FACTORY_NOW
from tests.support.factories import add_notes
from worker.app import App
from worker.store.models import ExampleRow, NoteRow

AGENT, USER = "agent-m", "u1"
SCOPE = {"agent_id": AGENT, "user_id": USER}
# The first run's clock: the last run, 400 days later, must not be dated after the present time
# (a writing run's `--now` may not be).
NOW = FACTORY_NOW - timedelta(days=400)
FUSED = "User deploys the billing service on Fridays after the weekly review"

# What the fake model answers (matched on the notes' text only): fuse the billing cluster,
# refuse any other cluster, call every pair of the scripted topics conflicting.
SCRIPT = {
    "model": "fake-manual",
    "rules": [
        {"prompt": "consolidate", "contains": ["billing service"],
         "reply": {"should_consolidate": True, "content": FUSED, "type": "Context",
                   "source_ids": "$aliases", "reason": "one habit stated three ways"}},
        {"prompt": "consolidate",
         "reply": {"should_consolidate": False, "content": "", "type": "Context",
                   "source_ids": [], "reason": "different facts"}},
        *({"prompt": "contradictions", "contains": [topic],
           "id_field": "topic",
           "reply": {"topics_all": {"attributes": [
               {"name": "the one value that holds", "confidence": 0.95, "reason": "both cannot hold",
                "values": "$alias_values"}]}}}
          for topic in ("invoices", "standup", "wifi")),
        {"prompt": "contradictions", "id_field": "topic",
         "reply": {"topics_all": {"attributes": []}}},
    ],
    "default": {"should_consolidate": False, "content": "", "type": "Context",
                "source_ids": [], "reason": "unscripted", "topics": []},
}


def _ago(days: float, **extra: Any) -> dict[str, Any]:
    return {"created_at": (NOW - timedelta(days=days)).isoformat(), **extra}


def _note(nid: str, content: str, days: float, manual: bool = False,
          **extra: Any) -> dict[str, Any]:
    return {"id": nid, **SCOPE, "content": content, "is_auto_generated": not manual,
            **_ago(days), **extra}


NOTES = [
    # Three manual notes that consolidation fuses: the fusion must stay manual.
    _note("m1", "User deploys the billing service on Fridays", 30, manual=True),
    _note("m2", "User deploys the billing service on Fridays after review", 20, manual=True),
    _note("m3", FUSED, 10, manual=True),
    # A refused cluster whose pairs all conflict: the newer auto note would beat the two older
    # manual ones, which may not lose, so every pair is flagged and nothing is revoked.
    _note("eur", "Customer invoices are sent in EUR every month", 60, manual=True),
    _note("eur2", "Customer invoices are sent in EUR every month by post", 60, manual=True),
    _note("usd", "Customer invoices are sent in USD every month", 2),
    # A manual note may win: the newer manual note retires the older auto-generated one.
    _note("st-old", "Team standup happens at 10 in room A", 30),
    _note("st-new", "Team standup happens at 9 in room A", 3, manual=True),
    # Within the clock skew (an hour) the more used note wins, here the older one (half an
    # hour older): the newer loser's valid_to must not be the winner's (earlier) creation time.
    _note("wifi-old", "Office wifi password rotates on Mondays", 3.02, access_count=9),
    _note("wifi-new", "Office wifi password rotates on Tuesdays", 3, access_count=1),
    # Prune and archive: the manual ones stay, the auto-generated controls go. (Their words are
    # not the invoices': the scripted model calls every note of an invoices topic one attribute.)
    _note("m-orphan", "Asked about parcel 4411 in a deleted chat", 40, manual=True,
          source_conversation_id="c-gone"),
    _note("a-orphan", "Wanted a refund for order 7781 in a deleted chat", 40,
          source_conversation_id="c-gone"),
    _note("m-expired", "Trial of the diagram tool ends soon", 500, manual=True,
          expires_at=(NOW - timedelta(days=3)).isoformat()),
    _note("a-expired", "Conference ticket sale closes this week", 20,
          expires_at=(NOW - timedelta(days=3)).isoformat()),
    # Unrelated auto-generated notes (keep every run's retirements under the guard's share).
    *(_note(f"f{k}", text, 1, last_accessed_at=NOW.isoformat()) for k, text in enumerate((
        "Prefers tea in the afternoon", "Owns a black labrador called Rex", "Allergic to peanuts",
        "Runs marathons twice a year", "Speaks fluent Portuguese",
        "Keeps a vegetable garden on the balcony")))
]

EXAMPLES = [
    {"id": "ex-manual", **SCOPE, "input": "q", "output": "a", "is_auto_generated": False,
     "success_score": 90, **_ago(10), "expires_at": (NOW - timedelta(days=1)).isoformat()},
    {"id": "ex-manual-low", **SCOPE, "input": "q", "output": "a", "is_auto_generated": False,
     "success_score": 10, **_ago(400)},
    {"id": "ex-auto", **SCOPE, "input": "q", "output": "a", "success_score": 90, **_ago(10),
     "expires_at": (NOW - timedelta(days=1)).isoformat()},
]

ENTITIES = [
    {"kind": "agent", "id": AGENT, "status": "active"},
    {"kind": "user", "id": USER, "status": "active"},
    {"kind": "conversation", "id": "c-gone", "status": "deleted"},
]


def _ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.output)
    return result.output


def _store(app: App, tmp_path: Path) -> dict[str, str]:
    """Loads the store through the CLI; returns the environment for fake-model runs."""
    url = app.settings.database_url
    for kind, rows in (("entities", ENTITIES), ("notes", NOTES), ("examples", EXAMPLES)):
        path = tmp_path / f"{kind}.jsonl"
        path.write_text(jsonl(rows))
        _ok(dream(url, kind, "import", str(path)))
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    # The script answers the topics the signals form, not the small scope asked about whole.
    return {"DREAM_LLM_PROVIDER": "fake", "DREAM_FAKE_LLM_SCRIPT": str(script),
            "DREAM_CONTRADICTIONS__SMALL_SCOPE_NOTES": "0"}


def _run(app: App, env: dict[str, str], when: datetime,
         *extra: str) -> tuple[str, dict[str, Any]]:
    """`dream run --force --now WHEN`; the run id and each phase's output (`runs show --json`)."""
    url = app.settings.database_url
    out = _ok(dream(url, "run", "--agent", AGENT, "--user", USER, "--force",
                    "--now", when.isoformat(), *extra, **env))
    found = re.search(r"^run (\S+) ", out, re.MULTILINE)
    assert found, out
    tree = json.loads(_ok(dream(url, "runs", "show", found.group(1), "--json")))
    return found.group(1), {s["phase"]: s["output"] for s in tree["steps"]}


def _notes(app: App) -> dict[str, NoteRow]:
    with app.uow() as uow:
        rows = list(uow.session.scalars(select(NoteRow)))
        uow.session.expunge_all()
    return {r.id: r for r in rows}


def _examples(app: App) -> dict[str, str]:
    with app.uow() as uow:
        return {r.id: r.status for r in uow.session.scalars(select(ExampleRow))}


def test_no_phase_retires_a_manual_item_today_or_400_days_later(app: App, tmp_path: Path) -> None:
    """R26: after a run now, one 120 days later and one 400 days later, every manual note and
    example is active, except manual notes fused into a note that is itself manual; the
    auto-generated controls were retired, so each phase did act."""
    env = _store(app, tmp_path)
    _, first = _run(app, env, NOW)
    notes = _notes(app)
    fused = [n for n in notes.values() if n.id not in {r["id"] for r in NOTES}]
    assert [(n.content, n.status, n.is_auto_generated) for n in fused] == [(FUSED, "active", False)]
    assert {notes[i].consolidated_into_id for i in ("m1", "m2", "m3")} == {fused[0].id}
    # The manual losers were flagged, never revoked; the manual winner retired the auto note.
    assert {i: notes[i].status for i in ("eur", "eur2", "usd", "st-old", "st-new")} == {
        "eur": "active", "eur2": "active", "usd": "active", "st-old": "revoked",
        "st-new": "active"}
    assert all("contradiction_review" in (notes[i].flags or []) for i in ("eur", "eur2", "usd"))
    assert notes["st-old"].consolidated_into_id == "st-new"
    # Prune and archive took the auto-generated controls only.
    assert {i: notes[i].status for i in ("m-orphan", "a-orphan", "m-expired", "a-expired")} == {
        "m-orphan": "active", "a-orphan": "archived", "m-expired": "active",
        "a-expired": "archived"}
    assert _examples(app) == {"ex-manual": "active", "ex-manual-low": "active",
                              "ex-auto": "archived"}
    assert first["archive"]["examples_manual_preserved"] == 2

    manual_active = {i for i, n in notes.items() if not n.is_auto_generated and n.status == "active"}
    for days in (120, 400):
        # Past the guard, so these runs retire everything else they find idle or expired.
        _, later = _run(app, env, NOW + timedelta(days=days), "--allow-retire", "100")
        notes = _notes(app)
        if days == 120:  # the auto-generated notes went; every manual one stayed
            assert {notes[i].status for i in ("usd", "f0", "f5")} == {"archived"}
        assert {i for i in manual_active if notes[i].status != "active"} == set(), days
        assert later["archive"]["manual_preserved"] >= len(manual_active) - 1  # the fusion too
        assert later["archive"]["examples_manual_preserved"] == 2
        assert _examples(app)["ex-manual"] == _examples(app)["ex-manual-low"] == "active"
    assert not notes[fused[0].id].is_auto_generated


def test_a_runs_own_flags_do_not_make_a_refused_cluster_new(app: App, tmp_path: Path) -> None:
    """The refused invoice cluster is flagged by the contradictions phase in the same run; the
    flags keep the notes' versions, so the next run neither asks about the cluster nor about
    its pairs again (remembered), and nothing is flagged twice."""
    env = _store(app, tmp_path)
    _, first = _run(app, env, NOW)
    versions = {i: _notes(app)[i].version for i in ("eur", "eur2", "usd")}
    assert first["consolidate"]["clusters_refused"] == 1
    assert versions == {"eur": 1, "eur2": 1, "usd": 1}
    _, second = _run(app, env, NOW + timedelta(days=1))
    assert (second["consolidate"]["clusters_refused"],
            second["consolidate"]["clusters_known_refused"]) == (0, 1)
    assert second["contradictions"]["pairs_judged"] == 0
    assert second["contradictions"]["pairs_remembered"] >= 3
    assert {i: _notes(app)[i].version for i in versions} == versions


def test_a_retirement_never_predates_the_note_it_retires(app: App, tmp_path: Path) -> None:
    """Case 6: the older, more used note wins (half an hour apart); the newer loser's valid_to
    is its own creation time (the moment both facts were on record), never the winner's
    earlier one."""
    env = _store(app, tmp_path)
    _run(app, env, NOW)
    notes = _notes(app)
    loser = notes["wifi-new"]
    assert (loser.status, loser.consolidated_into_id) == ("revoked", "wifi-old")
    assert loser.valid_to is not None and loser.valid_to == loser.created_at
    retired = [n for n in notes.values() if n.valid_to is not None]
    assert retired and all(n.valid_to is not None and n.created_at is not None
                           and n.valid_to >= n.created_at for n in retired)


BASE = "The user deploys the billing service on Fridays after the weekly review."
LONGER = (BASE[:-1] + ", and always announces the release in the team channel with the "
          "changelog first.")


def test_host_paths_keep_manual_and_protected_notes(app: App, tmp_path: Path) -> None:
    """`dream fuse` of a manual and an auto-generated note gives a manual note; `dream notes
    add` of a longer near-duplicate of a protected note is an ADD (both kept), where the same
    write over a standard note supersedes it (UPDATE)."""
    url = app.settings.database_url
    rows: list[dict[str, Any]] = [
        {"id": "h-manual", **SCOPE, "content": "User likes green tea", "is_auto_generated": False},
        {"id": "h-auto", **SCOPE, "content": "User likes green tea in the morning"},
        {"id": "p-base", "agent_id": "agent-p", "content": BASE, "protection": "protected"},
        {"id": "s-base", "agent_id": "agent-s", "content": BASE},
    ]
    (tmp_path / "notes.jsonl").write_text(jsonl(rows))
    _ok(dream(url, "notes", "import", str(tmp_path / "notes.jsonl")))
    _ok(dream(url, "fuse", "h-manual", "h-auto", "--content", "User likes green tea in the morning"))
    fused = [n for n in _notes(app).values() if n.id not in {r["id"] for r in rows}]
    assert [(n.status, n.is_auto_generated) for n in fused] == [("active", False)]
    assert "ADD" in _ok(dream(url, "notes", "add", "--agent", "agent-p", "--content", LONGER))
    assert "UPDATE" in _ok(dream(url, "notes", "add", "--agent", "agent-s", "--content", LONGER))
    notes = _notes(app)
    assert (notes["p-base"].status, notes["s-base"].status) == ("active", "revoked")


def test_undo_never_overwrites_a_later_runs_annotation(app: App) -> None:
    """A run's flags and comments keep the note's version, yet they are a change: undoing an
    earlier run that annotated the same note is refused, naming the later run, until that one
    is undone; then both undos restore the note as it was."""
    url = app.settings.database_url
    add_notes(app, {"id": "n", "agent_id": "agent-u", "content": "User likes green tea"})
    run_ids = []
    for flag, comment in (("contradiction_review", "first"), ("injection", "second")):
        out = _ok(dream(url, "run", "--agent", "agent-u", "--force", "--phase", "archive"))
        run_id = re.search(r"^run (\S+) ", out, re.MULTILINE).group(1)  # type: ignore[union-attr]
        with app.uow() as uow:  # what a phase's annotation writes
            (note,) = uow.notes.get_many(["n"])
            assert uow.notes.change(note, run_id=run_id, reason="test annotation",
                                    flags=sorted({*note.flags, flag}),
                                    comments=f"{uow.notes.comments_of(['n'])['n'] or ''}{comment}")
            uow.commit()
        run_ids.append(run_id)
    assert _notes(app)["n"].version == 1
    line = one_error_line(dream(url, "undo", run_ids[0]), code=4)
    assert f"run {run_ids[1]}" in line
    assert _notes(app)["n"].flags == ["contradiction_review", "injection"]
    _ok(dream(url, "undo", run_ids[1]))
    _ok(dream(url, "undo", run_ids[0]))
    row = _notes(app)["n"]
    assert (row.flags or [], row.comments, row.status) == ([], None, "active")
