"""Where the public evaluation data lives (read at run time, never copied into the repository)."""

from __future__ import annotations

import os
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


def eval_data_dir() -> Path:
    """DREAM_EVAL_DATA, else ../shared/eval-data beside the checkout, else /work/shared/eval-data.

    A clean clone elsewhere (CI's temporary checkout) still finds the shared copy.
    """
    candidates = [os.environ.get("DREAM_EVAL_DATA"), _REPO.parent / "shared" / "eval-data",
                  "/work/shared/eval-data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return _REPO.parent / "shared" / "eval-data"
