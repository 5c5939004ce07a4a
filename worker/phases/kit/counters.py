"""Typed phase counters: a dataclass per phase, read and written like the dict they replace.

Fields typed ``X | None`` are left out of ``as_dict`` while None, so the recorded step output
keeps exactly the keys it had (dashboards and tests read them). Keys a judging helper sets that
no field declares go to ``extra`` (and out with the rest).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

_DECLARED: dict[type, tuple[frozenset[str], tuple[str, ...]]] = {}


def _declared(cls: type) -> tuple[frozenset[str], tuple[str, ...]]:
    """A counters class's field names but ``extra``, as a set and in declaration order (read
    once per class: counters are indexed like a dict many times a phase)."""
    found = _DECLARED.get(cls)
    if found is None:
        names = tuple(f.name for f in fields(cls) if f.name != "extra")
        found = _DECLARED[cls] = (frozenset(names), names)
    return found


@dataclass
class Counters:
    # Notes this phase would have retired and the blast-radius guard held back (set only when
    # it tripped): every phase says so in the same counter, for a dashboard to sum.
    notes_held: int | None = field(default=None, kw_only=True)
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)

    def _names(self) -> frozenset[str]:
        return _declared(type(self))[0]

    def __getitem__(self, key: str) -> Any:
        if key in self._names():
            return getattr(self, key)
        return self.extra[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self._names():
            setattr(self, key, value)
        else:
            self.extra[key] = value

    def __contains__(self, key: str) -> bool:
        return (key in self._names() and getattr(self, key) is not None) or key in self.extra

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self:
            return default
        return self[key]

    def update(self, values: dict[str, Any] | None = None, **more: Any) -> None:
        for k, v in {**(values or {}), **more}.items():
            self[k] = v

    def items(self) -> list[tuple[str, Any]]:
        return list(self.as_dict().items())

    def as_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in _declared(type(self))[1]
               if getattr(self, name) is not None}
        out.update(self.extra)
        return out

    def ints(self) -> dict[str, int]:
        """The integer counters, for a log line."""
        return {k: v for k, v in self.as_dict().items()
                if isinstance(v, int) and not isinstance(v, bool)}
