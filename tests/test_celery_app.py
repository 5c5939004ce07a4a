"""R7: Celery settings that cannot cause double execution of a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.app import YOUNG_COLLECTION_EVERY
from worker.celery_app import celery_config
from worker.config import Settings


@pytest.mark.parametrize("time_limit", [60, 3000, 7200])
def test_r07_celery_settings_prevent_double_execution(time_limit: int) -> None:
    """R7: ack after the task finished, one message at a time, redelivery only after the hard
    time limit surely passed, lost workers' messages rejected back to the queue, and no beat
    entry carries a countdown/ETA."""
    conf = celery_config(Settings(task_time_limit=time_limit))
    assert conf["task_acks_late"] is True
    assert conf["task_reject_on_worker_lost"] is True
    assert conf["worker_prefetch_multiplier"] == 1
    assert conf["task_time_limit"] == time_limit
    assert conf["task_soft_time_limit"] < conf["task_time_limit"]
    visibility = conf["broker_transport_options"]["visibility_timeout"]
    assert visibility > conf["task_time_limit"]
    for entry in conf["beat_schedule"].values():
        assert "countdown" not in entry.get("options", {}) and "eta" not in entry.get("options", {})


def test_a_gate_check_no_worker_took_within_its_interval_expires() -> None:
    """After a worker outage every beat's gate check was still queued and all of them ran back
    to back once a worker came up, each the same check; now each expires after one interval."""
    conf = celery_config(Settings(beat_interval_seconds=600))
    (entry,) = conf["beat_schedule"].values()
    assert entry["options"]["expires"] == entry["schedule"] == 600.0


def test_r07_enqueue_uses_no_countdown_or_eta() -> None:
    """R7: the run chain is sent immediately (a countdown/ETA longer than the visibility timeout
    would make Redis redeliver it while it waits)."""
    import inspect

    from worker import tasks

    senders = (tasks.enqueue_run, tasks.enqueue_runs, tasks.send_runs, tasks._publish,
               tasks.gate_check)
    source = "".join(inspect.getsource(f) for f in senders)
    assert "apply_async(" in source  # the functions that send the messages, not wrappers alone
    assert "countdown" not in source and "eta=" not in source


@pytest.mark.parametrize(("asked", "delay"), [(None, 30.0), (0.0, 30.0), (0.2, 1.0), (90.0, 90.0),
                                              (10**9, 3000.0)])
def test_r07_a_waiting_phase_retries_within_the_time_limit(asked: float | None,
                                                           delay: float) -> None:
    """A phase waiting on a provider batch re-schedules its task; the countdown never passes
    the hard time limit, which is half the visibility timeout, so Redis never redelivers the
    delayed message while it waits."""
    from worker.tasks import wait_delay

    settings = Settings(database_url="sqlite://")
    assert wait_delay(asked, settings.task_time_limit) == delay
    conf = celery_config(settings)
    assert delay < conf["broker_transport_options"]["visibility_timeout"]


def test_tasks_that_re_schedule_themselves_have_no_retry_limit() -> None:
    """A phase (or run) task waiting on a provider batch re-schedules itself until the batch is
    back; ``retry(max_retries=None)`` means Celery's default limit of 3, so the tasks themselves
    carry ``max_retries = None``."""
    from worker import tasks

    for task in (*tasks.PHASE_TASKS.values(), tasks.run):
        assert task.max_retries is None, task.name


@pytest.mark.parametrize("command", [["worker", "-c", "1"], ["beat"]])
def test_a_bad_setting_stops_celery_with_the_one_line_dream_prints(
        command: list[str], tmp_path: Path) -> None:
    """`celery -A worker.celery_app worker|beat` with a bad setting printed the traceback of the
    module's import with the error last; now the line every `dream` command prints, exit 8,
    before Celery connects anywhere."""
    env = {**os.environ, "DREAM_GATE_HOURS": "abc",
           "DREAM_DATABASE_URL": f"sqlite:///{tmp_path / 'dream.db'}"}
    celery = Path(sys.executable).with_name("celery")
    done = subprocess.run([str(celery), "-A", "worker.celery_app", *command], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 8, done.stderr
    assert done.stderr.splitlines() == [
        "error: invalid setting DREAM_GATE_HOURS: Input should be a valid number, unable to "
        "parse string as a number (got 'abc'); fix the environment variable and retry"]
    assert not (tmp_path / "dream.db").exists()


def test_a_bad_setting_is_raised_where_the_module_is_imported_by_code() -> None:
    """Imported by anything but Celery's command line, the error stays an exception for the
    caller to handle (the `dream` commands have checked the settings before)."""
    env = {**os.environ, "DREAM_GATE_HOURS": "abc"}
    done = subprocess.run([sys.executable, "-c", "import worker.celery_app"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "worker.errors.ConfigError: invalid setting DREAM_GATE_HOURS" in done.stderr


def test_a_worker_process_settles_its_collector_once_its_app_is_built(tmp_path: Path) -> None:
    """A worker process froze what it had built, but young collections still ran every 700
    allocations, a few per cent of a run's CPU; now every YOUNG_COLLECTION_EVERY (the older
    generations as Python sets them)."""
    env = {**os.environ, "DREAM_DATABASE_URL": f"sqlite:///{tmp_path / 'dream.db'}"}
    script = ("import gc, json; default = gc.get_threshold(); from worker import celery_app; "
              "celery_app._init_process(); "
              "print(json.dumps([default, gc.get_threshold(), gc.get_freeze_count()]))")
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    default, settled, frozen = json.loads(done.stdout.splitlines()[-1])
    assert settled == [YOUNG_COLLECTION_EVERY, *default[1:]]
    assert frozen > 0
