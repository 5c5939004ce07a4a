"""An erasure leaves nothing of the erased notes in the process that ran it: remember's feature
cache (content hashes, vectors, the words of every text it compared against) is dropped, and the
next write reads the scope again. SQLite and PostgreSQL."""

from __future__ import annotations

from worker.app import App
from worker.domain.types import Scope
from worker.host.remember import remember
from worker.safety.erase import erase

USER = "person-5r8w"
SCOPE = Scope("agent-1", USER)
OTHER = Scope("agent-1", "person-3c1n")


def _cached_words(app: App) -> set[str]:
    cache = app.remember_cache
    return set() if cache is None else set(cache.vocab)


def test_erasing_a_user_drops_what_remember_cached_of_their_notes(app: App) -> None:
    remember(app, SCOPE, "User keeps an axolotl called Quibbleworth")
    # The second write compares against the first, which loads it into the cache.
    remember(app, SCOPE, "User rides a unicycle to the office on Fridays")
    assert "quibbleworth" in _cached_words(app)

    erase(app, user_id=USER)

    assert "quibbleworth" not in _cached_words(app)
    # Remember still works after the cache went, in another scope and in the erased one.
    remember(app, OTHER, "User reads crime novels")
    assert remember(app, OTHER, "User reads crime novels").action == "NOOP"
    assert remember(app, SCOPE, "User keeps an axolotl called Quibbleworth").action == "ADD"
