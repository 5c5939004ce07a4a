"""Locate the top-level prompts/ and migrations/ folders, from a checkout or an installed wheel."""

from __future__ import annotations

import os
import sys
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[1]


def resource_dir(name: str) -> Path:
    """DREAM_RESOURCES_DIR/<name>, else the source checkout's, else <prefix>/share/dream-worker/<name>."""
    override = os.environ.get("DREAM_RESOURCES_DIR")
    candidates = [Path(override) / name] if override else []
    candidates += [_CHECKOUT / name, Path(sys.prefix) / "share" / "dream-worker" / name]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[0]
