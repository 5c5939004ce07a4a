"""A bounded, thread-safe map of validated replies (or seen keys) for one process."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class ReplyCache:
    """Validated replies by question, for one process; a key names the run and scope, so an
    answer is reused only for the identical prompt of the same run (a retried phase, a batch
    picked up again), never across runs or scopes. The oldest entries go first."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._data: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            if key not in self._data:
                return None
            self._data.move_to_end(key)
            return self._data[key]

    def put(self, key: str, data: Any) -> None:
        with self._lock:
            self._data[key] = data
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def add(self, key: str) -> bool:
        """Remember ``key``; True the first time (while it is remembered)."""
        with self._lock:
            first = key not in self._data
            self._data[key] = True
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)
            return first
