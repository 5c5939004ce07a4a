"""URLs as settings take them: whether Celery can use one, whether one is an HTTP endpoint (a
model's or an embedder's), and one shown without its password (in error lines and logs)."""

from __future__ import annotations

from urllib.parse import urlsplit


def broker_url_problem(url: str) -> str | None:
    """Why Celery's transport (kombu) cannot use ``url``, or None."""
    from kombu.transport import TRANSPORT_ALIASES

    return _scheme_problem(url, set(TRANSPORT_ALIASES), "redis://, rediss://, amqp://, amqps://, "
                           "sqs:// or another kombu transport")


def backend_url_problem(url: str) -> str | None:
    """Why Celery cannot use ``url`` as its result backend, or None."""
    from celery.app.backends import BACKEND_ALIASES

    return _scheme_problem(url, set(BACKEND_ALIASES), "redis://, rediss://, rpc://, "
                           "db+postgresql://, or another Celery result backend")


def http_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an OpenAI-compatible endpoint (``http(s)://host[:port]/...``), or
    None. Checked at start-up: the client would only say "APIConnectionError" on each call,
    after the run was written. (The caller shows the URL, its password masked.)"""
    example = "use e.g. http://localhost:11434/v1"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"its port is not a number from 1 to 65535; {example}"
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return f"not an http:// or https:// URL with a host; {example}"
    if port == 0 or any(ch.isspace() for ch in url):
        return f"not a URL a client can reach (a space, or port 0); {example}"
    return None


def memory_database_problem(url: str) -> str | None:
    """Why ``url`` cannot be the store: an in-memory SQLite database (``sqlite://``,
    ``sqlite:///:memory:``, a ``mode=memory`` URI) is gone when its command ends, so `dream db
    upgrade` built a schema nothing after it found, and every later command said to run it."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None  # the engine's own parse says what is wrong with it
    if parts.scheme.partition("+")[0].lower() != "sqlite":
        return None
    if parts.path in ("", "/", "/:memory:") or "mode=memory" in parts.query:
        return ("an in-memory SQLite database lasts one command (`dream db upgrade` would build "
                "a schema nothing after it finds); use sqlite:///PATH")
    return None


def _scheme_problem(url: str, known: set[str], accepted: str) -> str | None:
    """Each URL of a Celery URL (a ``;`` list of fail-over URLs) needs a scheme Celery knows
    (before a ``+``: ``sqla+postgresql://``; a dotted name is a class path) and a numeric port."""
    for part in filter(None, (p.strip() for p in url.split(";") or [url])):
        scheme, sep, _ = part.partition("://")
        if not sep or not scheme:
            return f"{masked_url(part)!r} is not a URL; use {accepted}"
        transport = scheme.partition("+")[0].lower()
        if transport not in known and "." not in transport:
            return f"unknown scheme {scheme + '://'!r}; use {accepted}"
        try:
            _ = urlsplit(part).port
        except ValueError:
            return f"the port of {masked_url(part)!r} is not a number from 0 to 65535"
    return None


def masked_url(url: str) -> str:
    """``url`` as given, with a password (and only one that is there) replaced by ``**``."""
    parts = []
    for part in url.split(";"):
        try:
            password = urlsplit(part).password
        except ValueError:
            password = None
        if password:
            scheme, _, rest = part.partition("://")
            auth, _, host = rest.rpartition("@")
            user = auth.partition(":")[0]
            part = f"{scheme}://{user}:**@{host}"
        parts.append(part)
    return ";".join(parts)
