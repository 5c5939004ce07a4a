"""Errors a host can cause through fuse / keep-apart / remember; each maps to one 4xx status."""

from __future__ import annotations


class HostError(Exception):
    """A refused host request; the message is one line and never quotes note text."""

    status = 400
    code = "bad_request"


class NotFound(HostError):
    """Unknown ids (or ids outside the caller's scope: those are indistinguishable on purpose)."""

    status = 404
    code = "not_found"


class Invalid(HostError):
    """The request itself is wrong: too few ids, empty or too long text, ungrounded facts."""

    status = 422
    code = "invalid"


class Conflict(HostError):
    """The notes are not in a state that allows it: not active, protected, changed meanwhile."""

    status = 409
    code = "conflict"
