"""Process-wide resources (settings, engine, embedder, model client), built once per process."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from worker.config import Settings, load_settings
from worker.embeddings.base import Embedder, make_embedder
from worker.llm.base import LLMClient
from worker.llm.fanout import shutdown_pool
from worker.privacy import OutboundEmbedder, OutboundLLM, outbound
from worker.store.db import Waits, make_engine, make_session_factory
from worker.store.uow import UnitOfWork

if TYPE_CHECKING:
    from worker.host.remember_cache import RememberCache
    from worker.references import ReferenceChecker


@dataclass
class App:
    settings: Settings
    engine: Engine
    session_factory: sessionmaker[Session]
    embedder: Embedder
    llm: LLMClient | None = None
    # A host's own reference checker (prune), made fresh per run; None: the configured built-in.
    reference_checker: Callable[[App], ReferenceChecker] | None = None
    # Per-process state the services keep between calls (never note text across scopes).
    remember_cache: RememberCache | None = field(default=None, repr=False)
    threads: list[threading.Thread] = field(default_factory=list, repr=False)  # runs started here

    def __setattr__(self, name: str, value: Any) -> None:
        # The one outbound boundary (R29): a model client or embedder reaches the phases and
        # host paths only behind worker.privacy's wrappers, however it was set (here, or a test
        # or shell assigning ``app.llm`` later), so no caller can forget to redact.
        if name == "llm":
            value = outbound(value, self, OutboundLLM)
        elif name == "embedder":
            value = outbound(value, self, OutboundEmbedder)
        super().__setattr__(name, value)

    def uow(self) -> UnitOfWork:
        return UnitOfWork(self.session_factory)

    def dispose(self) -> None:
        self.engine.dispose()
        shutdown_pool()  # the model fan-out's threads (worker.llm.fanout)


def make_llm(settings: Settings) -> LLMClient | None:
    """None means the rule-based judge (no model calls)."""
    if settings.llm_provider == "openai":
        from worker.llm.openai_compat import OpenAICompatibleLLM

        return OpenAICompatibleLLM.from_settings(settings)
    if settings.llm_provider == "fake":
        from worker.llm.fake import FakeLLM

        return FakeLLM.from_settings(settings)
    return None


def build_app(
    settings: Settings | None = None, *, llm: LLMClient | None = None,
    embedder: Embedder | None = None, create_database: bool = True,
) -> App:
    settings = settings or load_settings()
    engine = make_engine(settings.database_url, create=create_database,
                         waits=Waits.of(settings))
    return App(
        settings=settings,
        engine=engine,
        session_factory=make_session_factory(engine),
        embedder=embedder or make_embedder(settings),
        llm=llm if llm is not None else make_llm(settings),
    )


# Young collections every 50,000 allocations instead of 700: a phase builds many short-lived
# objects per note (words, tokens, rows), and at the default the collector took about 40 % of
# the tokeniser's time in a run, promoting each scope's notes to be scanned again; the older
# generations keep their defaults. On the bench (100-note scopes) the peak grew by under 5 MB
# and the phases' CPU fell by a few per cent.
YOUNG_COLLECTION_EVERY = 50_000


def settle_process() -> None:
    """Once a process that runs dreams has built its App: what lives as long as the process (the
    App, imported modules, prebuilt statements) is frozen out of every later collection, and
    young collections run less often (``YOUNG_COLLECTION_EVERY``)."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)
