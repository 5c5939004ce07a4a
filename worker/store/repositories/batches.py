"""The provider batches a run's phases recorded (``worker.llm.ledger``: a child step per batch)
as the release of a stopped run reads and marks them."""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select, update
from sqlalchemy.orm import Session

from worker.domain.types import ACTIVE_RUN_STATUSES, StepStatus
from worker.domain.usage import BILLED_LATE
from worker.store.chunks import chunked
from worker.store.models import BATCH_STEPS, DreamRunRow, RunStepRow

BATCH_STEP_PREFIX = "llm batch "  # the step's name: this and the provider's batch id
RELEASE_KEY = "release"  # in its output: what releasing the batch did
READ_KEY = "read"  # in its output: the status of the finished batch its phase read
GIVEN_UP_KEY = "given_up"  # in the release: when the gate check stopped trying it again
# In its output: the tokens (in, out) of its output its phase charged (what it read or released
# itself); the rest the provider billed is ``BILLED_LATE``.
CHARGED_KEY = "charged"
# In its input, before the provider answered: the submission key the batch is created with
# (written ahead, ``worker.llm.ledger``); in its output, what a look for a batch made with that
# key found when the create's answer was lost (none: the step ends ``skipped``).
SUBMISSION_KEY = "submission"
LOOKUP_KEY = "lookup"
# A phase that ended one of these ways read or released every batch it asked.
_PHASE_ENDED = (StepStatus.SUCCEEDED.value, StepStatus.NO_ITEMS.value, StepStatus.SKIPPED.value)


class BatchStepRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def unreleased(self, run_ids: builtins.list[str]) -> builtins.list[RunStepRow]:
        """The batch steps of ``run_ids`` whose batch may still be at the provider: of a phase
        that did not end (waiting, interrupted, failed: nobody will read its answers) and not
        released yet, or released with something left behind; oldest first. Two reads per
        ``IN_CHUNK`` runs."""
        steps: builtins.list[RunStepRow] = []
        ended: set[Any] = set()
        for chunk in chunked(sorted(set(run_ids))):  # a read per chunk of ids (an erasure's runs)
            steps += self.session.scalars(
                select(RunStepRow).where(RunStepRow.run_id.in_(chunk),
                                         RunStepRow.parent_id.is_not(None),
                                         RunStepRow.name.startswith(BATCH_STEP_PREFIX)))
            ended.update(self.session.execute(
                select(RunStepRow.run_id, RunStepRow.phase).where(
                    RunStepRow.run_id.in_(chunk), RunStepRow.parent_id.is_(None),
                    RunStepRow.status.in_(_PHASE_ENDED))).all())
        steps.sort(key=lambda s: (s.started_at, s.seq))
        # A release that left something behind is tried again, whatever its phase did.
        return [s for s in steps if "batch_id" in (s.input or {}) and not released(s.output)
                and (RELEASE_KEY in (s.output or {}) or (s.run_id, s.phase) not in ended)]

    def incomplete_releases(self, limit: int, since: datetime) -> builtins.list[RunStepRow]:
        """Batch steps submitted ``since`` whose recorded release left something at the
        provider (its ``problem``: an error, a file kept, a batch still cancelling) and was not
        given up; oldest first, at most ``limit``. One read, of the batch steps' own index."""
        return [s for s in self.session.scalars(incomplete_releases_query(limit, since))
                if "batch_id" in (s.input or {})]

    def record_release(self, run_id: str, batch_id: str, record: dict[str, Any], *,
                       charged: bool = False) -> None:
        """``record`` as the batch step's ``output.release``, the rest of its output kept, and
        the time of the first release (``first_at``) kept from the record it replaces. A batch
        its phase never read ends ``skipped`` (nobody read its answers); one read stays
        ``succeeded`` (a release then only deletes what its read left).

        What the provider billed for its output (``billed_in``/``billed_out``) is the most any
        release of it read, never their sum (a kept file is read again). ``charged``: the
        phase releasing it charges that to its budget; a batch its phase read was charged
        reply by reply. The rest is billed late (``BILLED_LATE``, added to the run's usage):
        a batch released by a run stopped for good, or whose output a later release found."""
        step = self._step(run_id, batch_id)
        if step is None:
            return
        output = dict(step.output or {})
        prior = output.get(RELEASE_KEY)
        prior = prior if isinstance(prior, dict) else {}
        first = prior.get("first_at", prior.get("at"))
        billed = tuple(max(int(prior.get(k) or 0), int(record.get(k) or 0))
                       for k in ("billed_in", "billed_out"))
        record = {**record, "first_at": first or record.get("at"), "billed_in": billed[0],
                  "billed_out": billed[1]}
        read = READ_KEY in output
        if charged or read:
            output[CHARGED_KEY] = list(billed)
        paid = output.get(CHARGED_KEY) or [0, 0]
        late = (max(0, billed[0] - int(paid[0])), max(0, billed[1] - int(paid[1])))
        output.pop(BILLED_LATE, None)
        if any(late):
            output[BILLED_LATE] = {"tokens_in": late[0], "tokens_out": late[1]}
        self.session.execute(update(RunStepRow).where(RunStepRow.id == step.id).values(
            output={**output, RELEASE_KEY: record},
            status=StepStatus.SUCCEEDED.value if read else StepStatus.SKIPPED.value))

    def open_submissions(self, run_ids: builtins.list[str]) -> builtins.list[RunStepRow]:
        """The batch steps of ``run_ids`` written ahead of a submission that never learned its
        batch (no batch id, no settled look): the provider may run a batch made with their key
        (``input.submission``). One read per ``IN_CHUNK`` runs."""
        steps: builtins.list[RunStepRow] = []
        for chunk in chunked(sorted(set(run_ids))):
            steps += self.session.scalars(
                select(RunStepRow).where(RunStepRow.run_id.in_(chunk),
                                         RunStepRow.parent_id.is_not(None),
                                         RunStepRow.name.startswith(BATCH_STEP_PREFIX)))
        return [s for s in steps if open_submission(s.input, s.output)]

    def ended_open_submissions(self, limit: int, since: datetime) -> builtins.list[RunStepRow]:
        """The open submissions (``open_submission``) written ``since`` by runs that ended: no
        attempt of theirs will look them up again (their phase went on without the questions,
        the look having failed); oldest first, at most ``limit``. One read, of the batch steps'
        own index."""
        steps = self.session.scalars(
            select(RunStepRow).join(DreamRunRow, DreamRunRow.id == RunStepRow.run_id).where(
                BATCH_STEPS, RunStepRow.started_at >= since, RunStepRow.parent_id.is_not(None),
                RunStepRow.input[SUBMISSION_KEY].as_string().is_not(None),
                DreamRunRow.status.not_in(ACTIVE_RUN_STATUSES))
            .order_by(RunStepRow.started_at, RunStepRow.id))
        return [s for s in steps if open_submission(s.input, s.output)][:limit]

    def adopt(self, step_id: str, batch_id: str, custom_ids: builtins.list[str]) -> None:
        """The submission's batch is known (created, or found by its key): its step becomes
        the batch's (``llm batch <id>``, ``input.batch_id``), under the same parent."""
        step = self.session.get(RunStepRow, step_id)
        if step is None:
            return
        self.session.execute(update(RunStepRow).where(RunStepRow.id == step_id).values(
            name=f"{BATCH_STEP_PREFIX}{batch_id}",
            input={**(step.input or {}), "batch_id": batch_id, "custom_ids": custom_ids},
            output={**(step.output or {}), "submitted": len(custom_ids)}))

    def close_submission(self, step_id: str, record: dict[str, Any]) -> None:
        """No batch was made with the submission's key (refused, or none found by a look):
        ``record`` as its ``output.lookup``, and the step ends ``skipped``."""
        step = self.session.get(RunStepRow, step_id)
        if step is not None:
            self.session.execute(update(RunStepRow).where(RunStepRow.id == step_id).values(
                output={**(step.output or {}), LOOKUP_KEY: record},
                status=StepStatus.SKIPPED.value))

    def set_run_totals(self, run_id: str, totals: dict[str, Any]) -> None:
        """The run's totals, as its usage read again after a release (``runs.run_usage``)."""
        self.session.execute(update(DreamRunRow).where(DreamRunRow.id == run_id).values(
            totals=totals))

    def record_read(self, run_id: str, batch_id: str, status: str) -> None:
        """The finished batch was read: its status as ``output.read``."""
        step = self._step(run_id, batch_id)
        if step is not None:
            self.session.execute(update(RunStepRow).where(RunStepRow.id == step.id).values(
                output={**(step.output or {}), READ_KEY: status}))

    def _step(self, run_id: str, batch_id: str) -> RunStepRow | None:
        return self.session.scalars(select(RunStepRow).where(
            RunStepRow.run_id == run_id,
            RunStepRow.name == f"{BATCH_STEP_PREFIX}{batch_id}")).first()


def settled(output: dict[str, Any] | None) -> bool:
    """A batch step whose batch was read or released (nothing of it is left to ask for)."""
    return READ_KEY in (output or {}) or RELEASE_KEY in (output or {})


def open_submission(input_: dict[str, Any] | None, output: dict[str, Any] | None) -> bool:
    """A batch step written ahead of its submission whose batch is not known yet."""
    return (SUBMISSION_KEY in (input_ or {}) and "batch_id" not in (input_ or {})
            and LOOKUP_KEY not in (output or {}))


def released(output: dict[str, Any] | None) -> bool:
    """A batch step whose release left nothing at the provider."""
    record = (output or {}).get(RELEASE_KEY)
    return isinstance(record, dict) and not record.get("problem") and not record.get("kept")


def incomplete_releases_query(limit: int, since: datetime) -> Select[RunStepRow]:
    """``BatchStepRepository.incomplete_releases``' statement: its ``BATCH_STEPS`` clause and
    ``started_at`` range are what the partial index ``ix_run_steps_batch`` serves."""
    return (select(RunStepRow).where(
        BATCH_STEPS, RunStepRow.started_at >= since, RunStepRow.parent_id.is_not(None),
        RunStepRow.output[(RELEASE_KEY, "problem")].as_string().is_not(None),
        RunStepRow.output[(RELEASE_KEY, GIVEN_UP_KEY)].as_string().is_(None))
        .order_by(RunStepRow.started_at, RunStepRow.id).limit(limit))
