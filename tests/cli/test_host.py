"""`dream candidates`, `dream fuse`, `dream keep-apart`, `dream notes add` and `dream api`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.cli.test_commands import dream, one_error_line
from tests.conftest import make_sqlite_app
from tests.support.factories import add_notes
from worker.app import App
from worker.errors import ConfigError, NotFound
from worker.store.models import NoteRow


@pytest.fixture
def db(tmp_path: Path) -> Iterator[App]:
    app = make_sqlite_app(tmp_path)
    add_notes(app, {"id": "a", "content": "The user writes Python 3.12 with type hints and pytest."},
              {"id": "b", "content": "The user writes Python 3.12 with type hints and unittest."},
              {"id": "x", "agent_id": "agent-2", "content": "Other scope."})
    yield app
    app.dispose()


def statuses(app: App) -> dict[str, str]:
    with app.uow() as uow:
        return {r.id: r.status for r in uow.session.execute(select(NoteRow.id, NoteRow.status))}


def test_candidates_keep_apart_and_fuse_from_the_cli(db: App) -> None:
    """The CLI lists the pair, hides it after keep-apart, and fuses with the given text."""
    url = db.settings.database_url
    out = dream(url, "candidates", "--agent", "agent-1", "--threshold", "0.8")
    assert out.exit_code == 0 and "pair" in out.output and "a  b" in out.output
    assert dream(url, "keep-apart", "a", "b").exit_code == 0
    assert "no candidates" in dream(url, "candidates", "--agent", "agent-1",
                                    "--threshold", "0.8").output
    fused = dream(url, "fuse", "a", "b", "--content",
                  "The user writes Python 3.12 with type hints, pytest and unittest.")
    assert fused.exit_code == 0 and "fused 2 notes into" in fused.output
    s = statuses(db)
    assert s["a"] == s["b"] == "revoked" and list(s.values()).count("active") == 2

    undo_id = fused.output.split("`dream undo ")[1].split("`")[0]
    undone = dream(url, "undo", undo_id)
    assert undone.exit_code == 0, undone.output
    s = statuses(db)
    assert s["a"] == s["b"] == "active" and list(s.values()).count("active") == 3
    again = dream(url, "undo", undo_id)
    assert again.exit_code == 4 and "already undone" in again.output


@pytest.mark.parametrize(("args", "code"), [
    (("fuse", "a", "x", "--content", "text"), 2),          # two scopes
    (("fuse", "a", "nope", "--content", "text"), NotFound.exit_code),  # unknown id
    (("fuse", "a", "b", "--content", " "), 2),             # empty text
    (("fuse", "a", "b", "--strict", "--content", "Since 2019 at Acme."), 2),  # invented facts
    (("keep-apart", "a"), 2),                              # one id
    (("notes", "add", "--agent", "agent-1", "--content", "   "), 2),
])
def test_refusals_are_one_line_and_change_nothing(db: App, args: tuple[str, ...],
                                                  code: int) -> None:
    """Every refusal prints one `error:` line, exits with its class's code (2 invalid input,
    3 not found) and leaves every note as it was."""
    before = statuses(db)
    one_error_line(dream(db.settings.database_url, *args), code)
    assert statuses(db) == before


def test_notes_add_reports_the_action(db: App) -> None:
    """`dream notes add` prints ADD then NOOP for the same text, with the same derived id."""
    url = db.settings.database_url
    first = dream(url, "notes", "add", "--agent", "agent-1", "--content", "Standup at 9:30.")
    again = dream(url, "notes", "add", "--agent", "agent-1", "--content", "standup at 9:30")
    assert first.output.startswith("ADD ") and again.output.startswith("NOOP ")
    assert first.output.split()[1] == again.output.split()[1]


def test_api_refuses_to_start_without_tokens(db: App) -> None:
    """`dream api` without DREAM_API_TOKENS would lock everyone out: one-line error instead."""
    line = one_error_line(dream(db.settings.database_url, "api", "--port", "0"),
                          ConfigError.exit_code)
    assert "DREAM_API_TOKENS" in line
