"""A run cut short by its database: the server was busy past a bound (a lock wait or a
statement timed out, a deadlock) or the connection was lost (the backend terminated, the server
restarting, the network). Not the phase's failure: the write in progress was rolled back whole
(or, lost at its commit, is in the database or not, either way whole), so the run is given
back as interrupted, as a stopped run is, and resumed from what the database holds by
`dream run --due`, the next gate check, or the Celery task's retry.
"""

from __future__ import annotations

import structlog
from sqlalchemy.exc import SQLAlchemyError

from worker.app import App
from worker.errors import Unavailable
from worker.runs.lease import give_back
from worker.store.errors import interruption

log = structlog.get_logger(__name__)


class RunInterrupted(Unavailable):
    """An executor's run given back (or left to its lease) because the database failed it;
    ``attempts``: the claims the run had, this one included (a Celery task retries it while
    they are below DREAM_MAX_ATTEMPTS)."""

    says_no_note_text = True  # ids, our own words and SQLSTATEs only

    def __init__(self, run_id: str, cause: str, given_back: bool | None, attempts: int) -> None:
        # given_back None: the database did not answer the give-back either.
        then = ("it was given back as interrupted: `dream run --due` resumes it from what the "
                "database holds" if given_back else
                f"it had been cancelled or taken over meanwhile (`dream runs show {run_id}`)"
                if given_back is False else
                "it stays running until its lease lapses (DREAM_LEASE_SECONDS): once the "
                "database answers, the gate check or `dream run --due` resumes it then")
        super().__init__(f"run {run_id} stopped: {cause}; the write in progress was rolled "
                         f"back, what its phases committed is kept; {then}")
        self.run_id, self.cause, self.given_back, self.attempts = (
            run_id, cause, given_back, attempts)


def interrupted_by_database(app: App, run_id: str, epoch: int, attempts: int,
                            exc: BaseException) -> RunInterrupted | None:
    """The run held under ``epoch``, given back because ``exc`` is the database's busy or lost
    connection (``worker.store.errors.interruption``), else None (a bug: the caller re-raises).
    Given back on a connection of its own (the pool replaced the lost one); a database still
    unreachable leaves the run to its lease, as a crash would."""
    cause = interruption(exc)
    if cause is None:
        return None
    try:
        given: bool | None = give_back(
            app, run_id, epoch, f"{cause}; the run is resumed by `dream run --due` or the next "
            "gate check", said=True)
    except SQLAlchemyError as again:
        log.info("run.give_back_failed", run_id=run_id, error_type=type(again).__name__)
        given = None
    # Said by whoever gets the error (a command's line, a task's retry, a server's log).
    log.info("run.database_interrupted", run_id=run_id, cause=cause, given_back=given,
                error_type=type(exc).__name__)
    return RunInterrupted(run_id, cause, given, attempts)
