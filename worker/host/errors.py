"""Errors a host can cause through fuse / keep-apart / remember: the shared hierarchy of
worker.errors under the names the host paths use (each maps to one 4xx status by class)."""

from __future__ import annotations

from worker.errors import Conflict, InvalidInput, NotFound
from worker.errors import DreamError as HostError

Invalid = InvalidInput  # too few ids, empty or too long text, ungrounded facts

__all__ = ["Conflict", "HostError", "Invalid", "NotFound"]
