"""An option of one value given twice is refused, as a key given twice is by the importers, the
API and MCP: click kept the last value silently, so `dream erase --note n1 --note n2 --yes`
erased n2 alone (n1, which the user named too, stayed), `dream runs list --agent a --agent b`
listed b's runs, and `dream fuse … --judged n1=1 --judged n1=2` checked version 2 only."""

from __future__ import annotations

import pytest

from tests.cli.test_hostile_input import dream, one_error_line
from tests.support.factories import add_notes
from tests.support.safety import all_rows_text
from worker.app import App

REPEATED = [
    (["erase", "--note", "n1", "--note", "n2", "--yes"], "--note is given twice"),
    (["erase", "--user", "u1", "--user=u2", "--yes"], "--user is given twice"),
    (["runs", "list", "--agent", "a", "--agent", "b"], "--agent is given twice"),
    (["notes", "add", "--agent", "a", "--content", "Prefers tea", "--content", "Prefers coffee"],
     "--content is given twice"),
    (["run", "--agent", "a", "--force", "--allow-retire", "1", "--allow-retire", "5"],
     "--allow-retire is given twice"),
    (["--log-level", "info", "--log-level", "debug", "gate", "--explain"],
     "--log-level is given twice"),
    (["fuse", "n1", "n2", "--content", "Prefers tea", "--judged", "n1=1", "--judged", "n1=2"],
     "'--judged': note 'n1' is named twice"),
]


@pytest.mark.parametrize(("args", "says"), REPEATED, ids=[" ".join(a[:2]) for a, _ in REPEATED])
def test_an_option_given_twice_is_one_line_and_changes_nothing(
    app: App, args: list[str], says: str,
) -> None:
    add_notes(app, {"id": "n1", "agent_id": "a", "user_id": "u1", "content": "Prefers tea"},
              {"id": "n2", "agent_id": "a", "user_id": "u1", "content": "Prefers green tea"},
              {"id": "n3", "agent_id": "b", "user_id": "u2", "content": "Prefers coffee"})
    before = all_rows_text(app)
    line = one_error_line(dream(app.settings.database_url, args))
    assert says in line, line
    assert all_rows_text(app) == before


def test_a_value_that_looks_like_an_option_and_repeatable_options_still_work(app: App) -> None:
    add_notes(app, {"id": "n1", "agent_id": "a", "content": "Prefers tea"})
    url = app.settings.database_url
    added = dream(url, ["notes", "add", "--agent", "a", "--content", "--agent is a flag name"])
    assert added.exit_code == 0, added.output
    ran = dream(url, ["run", "--agent", "a", "--force", "--phase", "consolidate",
                      "--phase", "archive"])
    assert ran.exit_code == 0, ran.output
    listed = dream(url, ["runs", "list", "--", "--agent"])  # after `--`, no option at all
    assert "--agent is given twice" not in listed.output
