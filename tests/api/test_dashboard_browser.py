"""The dashboard in a real headless Chromium (chromedriver), at desktop and phone widths, over a
store of several runs the worker dreamt: problem runs first, the health view, the SVG trends,
a run's steps by what they judged, and a scoped token that sees only its own scope.

Screenshots go to $DREAM_SCREENSHOT_DIR when set (else the test's tmp dir)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import ADMIN, AGENT_2, TOKENS
from tests.support.dashboard_store import (
    DEMO,
    DEMO_SCRIPT,
    OTHER,
    QUIET,
    SeededStore,
    second_app,
    seed_dashboard_store,
)
from tests.support.serve import serve
from tests.support.webdriver import Browser, chromium
from worker.app import App, build_app
from worker.config import Settings
from worker.store.migrate import upgrade

pytestmark = pytest.mark.browser
DESKTOP = (1366, 900)
PHONE = (390, 844)

# Everything a test reads off the live DOM in one round trip.
READ_OVERVIEW = """
const rows = [...document.querySelectorAll('#runs tr[data-status]')];
const health = [...document.querySelectorAll('#health-table tr.scope-health')];
const chart = id => { const svg = document.getElementById(id); return svg && {
  lines: [...svg.querySelectorAll('polyline')].map(p => p.dataset.series),
  bars: [...svg.querySelectorAll('rect.bar')].map(r => r.dataset.series),
  width: svg.getBoundingClientRect().width, title: svg.querySelector('title').textContent}; };
return {
  statuses: rows.map(r => r.dataset.status),
  attention: rows.map(r => r.classList.contains('attention')),
  firstReason: rows.length ? rows[0].querySelector('.why')?.textContent : null,
  health: health.map(r => ({scope: r.dataset.scope,
    notes: r.querySelector('.notes-by-status').textContent.trim(),
    last: r.querySelector('.last-success').textContent.trim(),
    openGrowing: r.querySelector('td.open').classList.contains('growing'),
    spark: !!r.querySelector('td.open svg.spark')})),
  charts: Object.fromEntries(['chart-notes', 'chart-retired', 'chart-calls', 'chart-tokens']
    .map(id => [id, chart(id)])),
  overflow: document.documentElement.scrollWidth - window.innerWidth,
  innerWidth: window.innerWidth, text: document.body.innerText,
  cellDisplay: rows.length ? getComputedStyle(rows[0].querySelector('td')).display : null,
};
"""
READ_RUN = """
return {
  phases: [...document.querySelectorAll('section.phase')].map(s => ({phase: s.dataset.phase,
    columns: [...s.querySelectorAll('dl.counts dt')].map(dt => dt.textContent),
    children: [...s.querySelectorAll('tr.child td.label')].map(td => td.textContent)})),
  title: document.querySelector('h1').textContent,
  overflow: document.documentElement.scrollWidth - window.innerWidth,
};
"""


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[tuple[App, SeededStore]]:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'dream.db'}", llm_provider="fake",
                        fake_llm_script=DEMO_SCRIPT, api_tokens=TOKENS)
    app = build_app(settings)
    upgrade(app.engine)
    rules_only = second_app(app)
    store = seed_dashboard_store(app, rules_only)
    rules_only.dispose()
    yield app, store
    app.dispose()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("DREAM_SCREENSHOT_DIR") or tmp_path / "shots")
    where.mkdir(parents=True, exist_ok=True)
    return where


def _note_counts(app: App) -> dict[str, str]:
    with app.uow() as uow:
        out = {}
        for scope in (DEMO, QUIET, OTHER):
            counts = uow.notes.count_by_status(scope)
            out[scope.key] = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return out


def _open(browser: Browser, url: str, size: tuple[int, int], script: str) -> dict[str, Any]:
    browser.viewport(*size, mobile=size == PHONE)
    browser.get(url)
    return dict(browser.run(script))


def _check_overview(page: dict[str, Any], app: App, store: SeededStore) -> None:
    # The quiet scope's last run was blocked for its growing open candidates and nothing
    # succeeded after it: first, marked; the demo scope's blocked run was resolved later.
    assert page["statuses"][0] == "blocked" and page["attention"][0]
    assert "open candidates grew 3 runs in a row" in page["firstReason"]
    assert page["attention"].count(True) == 1 and page["statuses"].count("blocked") == 2
    assert len(page["statuses"]) == sum(len(v) for v in store.runs.values())
    health = {h["scope"]: h for h in page["health"]}
    assert set(health) == {DEMO.key, QUIET.key, OTHER.key}
    for key, text in _note_counts(app).items():
        assert health[key]["notes"] == text
        assert health[key]["last"] != "never" and health[key]["spark"]
    assert health[QUIET.key]["openGrowing"] and not health[DEMO.key]["openGrowing"]
    charts = page["charts"]
    assert {"active", "revoked", "archived"} <= set(charts["chart-notes"]["lines"])
    assert {"consolidate", "archive"} <= set(charts["chart-retired"]["bars"])
    assert charts["chart-calls"]["bars"] and charts["chart-tokens"]["lines"] == [
        "tokens in", "tokens out"]
    assert all(c["width"] <= page["innerWidth"] for c in charts.values())
    assert page["overflow"] <= 0, "the page scrolls sideways"


def test_overview_and_run_detail_at_desktop_and_phone_widths(
        seeded: tuple[App, SeededStore], shots: Path, tmp_path: Path) -> None:
    """Desktop and phone: the same facts in the DOM, no sideways scrolling, tables stacked into
    cards on the phone; the blocked demo run's detail names each child step by what it judged
    and shows each phase's counters as labelled columns."""
    app, store = seeded
    blocked = store.runs[DEMO.key][0]
    for url in serve(app):
        with chromium(tmp_path / "profile") as browser:
            browser.get(f"{url}/dashboard?token={ADMIN}&refresh=0")
            for name, size in (("desktop", DESKTOP), ("phone", PHONE)):
                page = _open(browser, f"{url}/dashboard?refresh=0", size, READ_OVERVIEW)
                _check_overview(page, app, store)
                assert page["cellDisplay"] == ("grid" if size == PHONE else "table-cell")
                browser.screenshot(shots / f"overview-{name}.png")
                run = _open(browser, f"{url}/dashboard/runs/{blocked}", size, READ_RUN)
                browser.screenshot(shots / f"run-{name}.png")
                assert run["overflow"] <= 0 and blocked in run["title"]
                phases = {p["phase"]: p for p in run["phases"]}
                assert list(phases) == ["consolidate", "contradictions", "prune", "archive"]
                assert phases["consolidate"]["columns"][:3] == [
                    "notes scanned", "clusters found", "clusters merged"]
                assert phases["consolidate"]["children"] == [
                    "merge of 5 notes (py-1, py-2, py-3, +2)"]
                # The five wordings merged leave no room for the orphan: the guard holds it.
                assert phases["prune"]["children"] == [
                    "orphan check of 7 notes", "blast-radius guard held 1 note"]
                assert "blast-radius guard held 2 notes" in phases["archive"]["children"]


def test_scoped_token_sees_only_its_scope_in_the_browser(
        seeded: tuple[App, SeededStore], shots: Path, tmp_path: Path) -> None:
    """agent-2's token: its one run and scope, no other tenant's key anywhere on the page, and
    asking for another scope shows 'no such scope'; a click on its run opens that run."""
    app, store = seeded
    for url in serve(app):
        with chromium(tmp_path / "profile") as browser:
            browser.get(f"{url}/dashboard?token={AGENT_2}&refresh=0")
            page = dict(browser.run(READ_OVERVIEW))
            browser.screenshot(shots / "overview-scoped.png")
            assert [h["scope"] for h in page["health"]] == [OTHER.key]
            assert page["statuses"] == ["succeeded"]
            for other in ("demo-assistant", "quiet-bot", json.dumps(DEMO.agent_id)):
                assert other not in page["text"]
            browser.click("#runs a[href^='/dashboard/runs/']")
            run = dict(browser.run(READ_RUN))
            assert store.runs[OTHER.key][0] in run["title"]
            browser.get(f"{url}/dashboard?scope=quiet-bot&refresh=0")
            page = dict(browser.run(READ_OVERVIEW))
            assert "no such scope" in page["text"] and page["statuses"] == []
            assert page["health"] == []
