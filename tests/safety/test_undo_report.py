"""What an undo did, note by note (R17): `dream undo [--json]`, `POST /api/runs/{id}/undo` and,
afterwards, `dream runs show [--json]` and `GET /api/runs/{id}` say per note what was restored,
what was retired again and, for a refused undo, every note that refused it and why; ids and
statuses only, never note text. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from typing import Any

from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, TOKENS, auth
from tests.safety.test_undo import SCOPE, _fuse
from tests.support.factories import add_notes
from tests.support.safety import note_states, run_row
from worker.api import create_api
from worker.app import App, build_app
from worker.cli import main
from worker.config import Settings

CANARY = "zanzibar-quokka"  # in every note's text: no answer may carry it
CONFLICT = 4  # the exit code of a refusal (worker.errors.Conflict)


def dream(app: App, *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env={
        "DREAM_DATABASE_URL": app.settings.database_url, "DREAM_LLM_PROVIDER": "none",
        "DREAM_LOG_LEVEL": "WARNING"})


def _merged(app: App) -> tuple[str, str]:
    """A finished run that merged n0, n1 and n2 into a new note (n3 untouched)."""
    add_notes(app, *({"id": f"n{i}", "user_id": "u1",
                      "content": f"User likes tea number {i} {CANARY}"} for i in range(4)))
    run_id = run_row(app, SCOPE)
    return run_id, _fuse(app, run_id, ["n0", "n1", "n2"], f"User likes tea {CANARY}")


def _host_edit(app: App, note_id: str) -> None:
    with app.uow() as uow:
        (note,) = uow.notes.get_many([note_id])
        assert uow.notes.change(note, run_id=None, reason="host edit", importance=0.9)
        uow.commit()


def _outcomes(entries: list[dict[str, Any]]) -> dict[str, tuple[str, str | None, str | None]]:
    return {e["id"]: (e["outcome"], e.get("was"), e.get("status")) for e in entries}


def _expected(fused: str) -> dict[str, tuple[str, str | None, str | None]]:
    return {"n0": ("restored", "revoked", "active"), "n1": ("restored", "revoked", "active"),
            "n2": ("restored", "revoked", "active"), fused: ("retired", "active", "revoked")}


def test_undo_json_lists_each_note_and_runs_show_says_it_afterwards(app: App) -> None:
    """`dream undo RUN` prints the short summary and where to see each note; `--json` lists
    each note's outcome (the three sources reactivated, the fused note retired again), and
    `dream runs show RUN` (text and `--json`) says the same afterwards, read back from the
    operation log. No output carries note text."""
    run_id, fused = _merged(app)
    undone = dream(app, "undo", run_id, "--json")
    assert undone.exit_code == 0, undone.output
    answer = json.loads(undone.stdout)
    assert answer["undone"] is True and answer["run_ids"] == [run_id]
    assert _outcomes(answer["notes"]) == _expected(fused)

    shown = dream(app, "runs", "show", run_id, "--json")
    assert shown.exit_code == 0, shown.output
    record = json.loads(shown.stdout)["undo"]
    assert record["counts"] == {"restored": 3, "retired": 1, "overwritten": 0, "examples": 0}
    assert _outcomes(record["notes"]) == _expected(fused)

    text = dream(app, "runs", "show", run_id)
    assert text.exit_code == 0, text.output
    assert "undo: restored 3, retired 1" in text.stdout
    assert "restored  note n0 (revoked → active)" in text.stdout
    assert f"retired   note {fused} (active → revoked)" in text.stdout
    for out in (undone.output, shown.output, text.output):
        assert CANARY not in out


def test_undo_text_is_the_summary_and_a_pointer_to_each_note(app: App) -> None:
    """Without `--json`: which runs were undone, the one summary line, and the command that
    lists each note."""
    run_id, _ = _merged(app)
    undone = dream(app, "undo", run_id)
    assert undone.exit_code == 0, undone.output
    assert undone.stdout.splitlines() == [
        f"undone run {run_id}", "restored 3 notes; retired 1 note the run(s) created",
        f"each note: `dream runs show {run_id}`"]


def test_a_refused_undo_lists_every_note_that_refuses_it_and_changes_nothing(app: App) -> None:
    """Two notes the run merged were edited by the host since: `dream undo --json` prints both
    with why (stdout), still fails with one error line and the conflict exit code (stderr),
    and nothing changes; the run keeps its status, so `runs show` has no undo record."""
    run_id, _ = _merged(app)
    _host_edit(app, "n0")
    _host_edit(app, "n2")
    before = note_states(app)
    refused = dream(app, "undo", run_id, "--json")
    assert refused.exit_code == CONFLICT, refused.output
    answer = json.loads(refused.stdout)
    assert answer["undone"] is False and answer["run_id"] == run_id
    assert [(e["id"], e["outcome"]) for e in answer["refused"]] == [("n0", "refused"),
                                                                   ("n2", "refused")]
    assert all(e["why"].startswith("was changed since by the host") for e in answer["refused"])
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot undo run {run_id}: note n0 was changed since")
    assert note_states(app) == before
    shown = json.loads(dream(app, "runs", "show", run_id, "--json").stdout)
    assert shown["status"] == "succeeded" and "undo" not in shown


def test_force_cascade_marks_the_host_edits_it_overwrote(app: App) -> None:
    """With `--force-cascade` the host's edit of n1 is overwritten: the answer and the record
    afterwards mark that note (and only it) `overwrote_host_edit`."""
    run_id, fused = _merged(app)
    _host_edit(app, "n1")
    undone = dream(app, "undo", run_id, "--force-cascade", "--json")
    assert undone.exit_code == 0, undone.output
    answer = json.loads(undone.stdout)
    assert answer["overwritten"] == ["n1"]
    assert [e["id"] for e in answer["notes"] if e.get("overwrote_host_edit")] == ["n1"]
    record = json.loads(dream(app, "runs", "show", run_id, "--json").stdout)["undo"]
    assert [e["id"] for e in record["notes"] if e.get("overwrote_host_edit")] == ["n1"]
    assert record["counts"]["overwritten"] == 1
    assert "restored  note n1 (revoked → active), over a host edit" in dream(
        app, "runs", "show", run_id).stdout


def test_the_api_answers_each_note_and_its_run_detail_keeps_them(app: App) -> None:
    """`POST /api/runs/{id}/undo` answers `notes`; `GET /api/runs/{id}` carries the same
    record afterwards; a refused undo is a 409 whose body lists the refusing notes."""
    run_id, fused = _merged(app)
    other, _ = _refusable(app)
    served = build_app(Settings(database_url=app.settings.database_url, llm_provider="none",
                                api_tokens=TOKENS))
    try:
        with TestClient(create_api(served)) as client:
            refused = client.post(f"/api/runs/{other}/undo", headers=auth(ADMIN), json={})
            undone = client.post(f"/api/runs/{run_id}/undo", headers=auth(ADMIN), json={})
            detail = client.get(f"/api/runs/{run_id}", headers=auth(ADMIN))
    finally:
        served.dispose()
    assert refused.status_code == 409, refused.text
    body = refused.json()
    assert body["error"] == "conflict" and body["detail"].startswith(f"cannot undo run {other}")
    assert [(e["id"], e["outcome"]) for e in body["refused"]] == [("m0", "refused")]
    assert undone.status_code == 200, undone.text
    assert _outcomes(undone.json()["notes"]) == _expected(fused)
    assert detail.status_code == 200, detail.text
    assert _outcomes(detail.json()["undo"]["notes"]) == _expected(fused)
    for answer in (refused, undone, detail):
        assert CANARY not in answer.text


def test_the_dashboards_run_page_shows_what_the_undo_did(app: App) -> None:
    """The dashboard's page of an undone run (the house view of `dream runs show`) lists each
    note the undo restored or retired, with its status change; no note text."""
    run_id, fused = _merged(app)
    assert dream(app, "undo", run_id).exit_code == 0
    served = build_app(Settings(database_url=app.settings.database_url, llm_provider="none",
                                api_tokens=TOKENS))
    try:
        with TestClient(create_api(served)) as client:
            page = client.get(f"/dashboard/runs/{run_id}", headers=auth(ADMIN))
    finally:
        served.dispose()
    assert page.status_code == 200, page.text
    rows = re.findall(r'<tr class="undone-note">\s*<td data-label="note"><code>([^<]+)</code>'
                      r'</td>\s*<td data-label="outcome">([^<]+)</td>\s*'
                      r'<td data-label="status">([^<]+)</td>', page.text)
    assert {i: (o, st) for i, o, st in rows} == {
        "n0": ("restored", "revoked → active"), "n1": ("restored", "revoked → active"),
        "n2": ("restored", "revoked → active"), fused: ("retired", "active → revoked")}
    assert CANARY not in page.text


def _refusable(app: App) -> tuple[str, str]:
    """Another finished run (its own notes m0, m1) whose m0 the host edited since."""
    add_notes(app, *({"id": f"m{i}", "user_id": "u1", "content": f"User owns cat {i} {CANARY}"}
                     for i in range(2)))
    run_id = run_row(app, SCOPE)
    fused = _fuse(app, run_id, ["m0", "m1"], f"User owns cats {CANARY}")
    _host_edit(app, "m0")
    return run_id, fused


def test_every_refused_undo_prints_its_json_object(app: App) -> None:
    """A new user's report: with --json only a note's refusal printed JSON; an id already
    undone or no run's printed nothing on stdout. Each prints `{"undone": false, "refused":
    [], "error": …}`, with the same one error line and exit code as without --json."""
    run_id, _ = _merged(app)
    assert dream(app, "undo", run_id).exit_code == 0
    for rid, code in ((run_id, CONFLICT), ("no-such-run", 3)):
        plain = dream(app, "undo", rid)
        refused = dream(app, "undo", rid, "--json")
        assert refused.exit_code == plain.exit_code == code, refused.output
        assert json.loads(refused.stdout) == {"run_id": rid, "undone": False, "refused": [],
                                              "error": plain.stderr.strip()[len("error: "):]}
        assert refused.stderr == plain.stderr and len(plain.stderr.strip().splitlines()) == 1
