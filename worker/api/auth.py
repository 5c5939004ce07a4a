"""Bearer tokens (R24): admin or scoped to one (agent, user, company); constant-time comparison."""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass

from worker.config import ConfigError
from worker.domain.limits import DuplicateKey, json_syntax_problem, scope_problem, unique_keys
from worker.domain.types import Scope


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


def authenticate(tokens: list[tuple[bytes, Principal]], given: str | None) -> Principal | None:
    """Compare against every configured token (no early exit) so timing reveals nothing."""
    if not given:
        return None
    candidate = given.encode()
    found: Principal | None = None
    for token, principal in tokens:
        if hmac.compare_digest(candidate, token) and found is None:
            found = principal
    return found


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None
