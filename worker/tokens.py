"""``DREAM_API_TOKENS`` read into grants (R24): admin, or scoped to one (agent, user, company).

Below the API so that settings can check the variable as they load (``worker.config``), as
every other one: a malformed value stops any `dream` command with one line, not only a server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from worker.domain.limits import DuplicateKey, json_syntax_problem, scope_problem, unique_keys
from worker.domain.types import Scope
from worker.errors import ConfigError


@dataclass(frozen=True)
class Principal:
    """Who is calling. ``scope`` None means admin (every scope)."""

    scope: Scope | None

    @property
    def admin(self) -> bool:
        return self.scope is None

    @property
    def label(self) -> str:
        """Safe to log: the role or scope, never the token."""
        return "admin" if self.scope is None else self.scope.key


def parse_tokens(raw: str | None) -> list[tuple[bytes, Principal]]:
    """``DREAM_API_TOKENS`` JSON → (token, principal) pairs. No tokens means nobody gets in."""
    if not raw:
        return []
    try:
        spec = json.loads(raw, object_pairs_hook=unique_keys)
    except DuplicateKey:  # a token listed twice would get whichever grant came last
        raise ConfigError("DREAM_API_TOKENS names a token (or a key of one grant) twice; give "
                          "each token one grant") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"DREAM_API_TOKENS is not valid JSON ({json_syntax_problem(exc)}); expected "
                          '{"<token>": {"role": "admin"} | {"agent_id": "..."}}') from None
    if not isinstance(spec, dict):
        raise ConfigError("DREAM_API_TOKENS must be a JSON object of token → grant")
    out: list[tuple[bytes, Principal]] = []
    for number, (token, grant) in enumerate(spec.items(), start=1):
        where = f"DREAM_API_TOKENS entry {number}"  # never the token itself
        if not isinstance(token, str) or len(token) < 16:
            raise ConfigError(f"{where}: tokens must be strings of at least 16 characters")
        if not isinstance(grant, dict):
            raise ConfigError(f"{where}: the grant must be an object")
        out.append((token.encode(), _principal(grant, where)))
    return out


_GRANT = ('{"role": "admin"} (every scope) or {"agent_id": ..., "user_id": ..., '
          '"company_id": ...} (one scope)')
_SCOPE_KEYS = ("agent_id", "user_id", "company_id")


def _principal(grant: dict[str, object], where: str) -> Principal:
    """The grant's principal. Every key is checked: a misspelt one ("user" for "user_id")
    would bind the token to the agent's shared scope, and "role": "admin" beside a scope
    would make an admin of a token meant for one tenant."""
    unknown = sorted(set(grant) - {"role", *_SCOPE_KEYS})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; a grant is {_GRANT}")
    if "role" in grant:
        if grant["role"] != "admin" or len(grant) > 1:
            raise ConfigError(f"{where}: a grant is {_GRANT}, not both")
        return Principal(None)
    parts = [_part(grant.get(key), key, where) for key in _SCOPE_KEYS]
    if parts[0] is None:
        raise ConfigError(f'{where}: give "role": "admin" or an "agent_id" (with optional '
                          '"user_id" and "company_id")')
    scope = Scope(parts[0], parts[1], parts[2])
    if problem := scope_problem(scope):
        raise ConfigError(f"{where}: {problem}")
    return Principal(scope)


def _part(value: object, key: str, where: str) -> str | None:
    """A scope part as stored: a string, or a whole number (``7`` and ``"7"`` are one id)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ConfigError(f"{where}: {key} must be a string, a whole number or null")
