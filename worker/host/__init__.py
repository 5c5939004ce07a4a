"""Host-facing services (no web framework here): fusion candidates, fuse, keep-apart, remember."""

from worker.host.candidates import fusion_candidates, held_for_review
from worker.host.errors import Conflict, HostError, Invalid, NotFound
from worker.host.fusion import FuseResult, fuse, keep_apart
from worker.host.remember import RememberResult, remember

__all__ = [
    "Conflict", "FuseResult", "HostError", "Invalid", "NotFound", "RememberResult", "fuse",
    "fusion_candidates", "held_for_review", "keep_apart", "remember",
]
