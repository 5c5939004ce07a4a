"""`dream run --due --via-celery` when another executor already holds the due scope."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.test_crash_recovery import DREAM
from tests.runs.test_recovery import broker_gate
from worker.app import App


@pytest.mark.redis
def test_a_second_due_via_celery_says_the_due_scope_is_held_not_that_none_is_due(
        app: App) -> None:
    """Two `dream run --due --via-celery` (several at once, or beat's check and an operator's):
    the first sends the due scope's run; the second finds the scope due but held by that run.
    It used to print `no scope is due (1 checked)` while `dream gate --explain` said the scope
    was due (`already_active`); now it says a due scope already has a run, as the in-process
    `--due` says another executor took it."""
    with broker_gate(app, "dream-due-held") as b:
        args = [DREAM, "run", "--due", "--via-celery"]
        first = subprocess.run(args, env=b.env, capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stderr
        assert f"run {b.run_id()} queued on the broker" in first.stdout, first.stdout
        second = subprocess.run(args, env=b.env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr
        assert "no scope is due" not in second.stdout, second.stdout
        assert second.stdout.strip() == ("no run sent from here: 1 due scope already has a run "
                                         "queued or running (`dream runs list`); 1 checked")
        assert b.queued() == [b.run_id()]  # nothing sent twice
