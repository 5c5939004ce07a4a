"""Readiness of the database a server answers from: what the API's and the MCP server's
``/healthz`` report, so a load balancer takes neither into service on a store it cannot use."""

from __future__ import annotations

import structlog
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from worker.errors import ConfigError
from worker.store.errors import database_error
from worker.store.schema import require_current_schema

log = structlog.get_logger(__name__)

OK = "ok"
NO_SCHEMA = "no schema"  # reachable, but no one ran `dream db upgrade` (or not since an update)
DOWN = "down"


def database_state(engine: Engine, probe: str) -> str:
    """``OK``, ``NO_SCHEMA`` or ``DOWN``, from one round trip that reads the schema's revision
    (a database no one upgraded, or one at another revision than this code's migrations, is no
    more usable than one that is down). ``probe`` names the server in the warning logged when
    it is not OK."""
    try:
        require_current_schema(engine)  # an older or newer schema is no more usable
    except Exception as exc:  # any driver error means "not ready", never a 500
        found = database_error(exc) if isinstance(exc, SQLAlchemyError) else exc
        state = NO_SCHEMA if isinstance(found, ConfigError) and "upgrade" in str(found) else DOWN
        log.warning(f"{probe}.health_failed", error_type=type(exc).__name__, database=state)
        return state
    return OK


def health_body(state: str) -> tuple[dict[str, str], int]:
    """The JSON body and status code both servers answer ``/healthz`` with."""
    if state == OK:
        return {"status": "ok", "database": OK}, 200
    return {"status": "unavailable", "database": state}, 503
