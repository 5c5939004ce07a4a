"""Bearer tokens (R24): admin or scoped to one (agent, user, company); constant-time comparison."""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass

from worker.config import ConfigError
from worker.domain.limits import json_syntax_problem
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
        spec = json.loads(raw)
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
        if grant.get("role") == "admin":
            out.append((token.encode(), Principal(None)))
            continue
        agent = grant.get("agent_id")
        if not isinstance(agent, str) or not agent:
            raise ConfigError(f'{where}: give "role": "admin" or an "agent_id" (with optional '
                              '"user_id" and "company_id")')
        user, company = grant.get("user_id"), grant.get("company_id")
        out.append((token.encode(), Principal(Scope(agent, _opt(user), _opt(company)))))
    return out


def _opt(value: object) -> str | None:
    return None if value is None else str(value)


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
