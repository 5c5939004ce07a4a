"""Every error a user or a caller can cause, by meaning. The message is one line naming the
problem and what to do (never note text); the class fixes the CLI exit code and the HTTP status.

| class          | exit | HTTP | meaning                                                       |
|----------------|------|------|---------------------------------------------------------------|
| InvalidInput   | 2    | 422  | the argument, file or request is wrong (usage mistakes too)   |
| NotFound       | 3    | 404  | no such id or scope (another scope's ids are "not found" too) |
| Conflict       | 4    | 409  | the state does not allow it: busy, not due, changed meanwhile |
| Unavailable    | 5    | 503  | a service does not answer: the database, the broker           |
| ModelFailure   | 6    | 502  | the model or embedding endpoint failed or answered garbage    |
| Forbidden      | 7    | 403  | not allowed for this caller (Unauthorized: no known token)    |
| ConfigError    | 8    | 500  | a setting, the database URL or its schema is wrong            |

Domain names (RunError, UnknownScope, HostError, InputError, LLMError, ...) are subclasses or
aliases of these, kept where callers import them.
"""

from __future__ import annotations

from typing import Any, ClassVar


class DreamError(Exception):
    """Base of every expected error: one line, no traceback; never raised itself."""

    exit_code: ClassVar[int] = 1
    status: ClassVar[int] = 500
    code: ClassVar[str] = "error"
    # True where every message the class is raised with is built from constants, setting
    # names, ids and counts only (never a note's or a reply's text): a failed phase keeps it
    # word for word instead of masking each word a note shares ("check X [note text] Y").
    says_no_note_text: ClassVar[bool] = False

    def details(self) -> dict[str, Any]:
        """Fields an answer carries beside the line (ids and reasons, never note text): the
        API's error body and a `--json` command's output; none by default."""
        return {}


class InvalidInput(DreamError):
    exit_code = 2
    status = 422
    code = "invalid"


class NotFound(DreamError):
    exit_code = 3
    status = 404
    code = "not_found"


class Conflict(DreamError):
    exit_code = 4
    status = 409
    code = "conflict"


class Unavailable(DreamError):
    exit_code = 5
    status = 503
    code = "unavailable"


class ModelFailure(DreamError):
    exit_code = 6
    status = 502
    code = "model_failed"


class Forbidden(DreamError):
    exit_code = 7
    status = 403
    code = "forbidden"


class Unauthorized(Forbidden):
    """No bearer token, or one nobody configured (the API answers 401 with a challenge)."""

    status = 401
    code = "unauthorized"


class ConfigError(DreamError):
    """A setting has a value the worker cannot use; the message names the variable."""

    exit_code = 8
    status = 500
    code = "misconfigured"
    says_no_note_text = True


# ---- run lifecycle (worker.runs) -------------------------------------------------------------
class RunError(Conflict):
    """A run request the store's state refuses (busy scope, not due, already finished)."""


class RunNotFound(NotFound, RunError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run with id {run_id}; list runs with `dream runs list`")


class UnknownScope(NotFound, RunError):
    """No notes, sessions or runs under this scope: a typo must not create a run."""


class InvalidRun(InvalidInput, RunError):
    """A run request with a value no run can use (unknown phase, negative allowance)."""


class BrokerUnavailable(Unavailable, RunError):
    """The Celery broker did not answer; nothing was queued."""


EXIT_CODES: dict[type[DreamError], int] = {
    cls: cls.exit_code for cls in (InvalidInput, NotFound, Conflict, Unavailable, ModelFailure,
                                   Forbidden, ConfigError)}
"""Exit code per class (the table above); a user error never exits with another."""
