"""Bearer tokens (R24): admin or scoped to one (agent, user, company); constant-time comparison."""

from __future__ import annotations

import hmac

from worker.tokens import Principal, parse_tokens

__all__ = ["Principal", "authenticate", "bearer", "parse_tokens"]


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
