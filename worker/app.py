"""Process-wide resources (settings, engine, embedder, model client), built once per process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from worker.config import Settings, load_settings
from worker.embeddings.base import Embedder, make_embedder
from worker.llm.base import LLMClient
from worker.store.db import make_engine, make_session_factory
from worker.store.uow import UnitOfWork


@dataclass
class App:
    settings: Settings
    engine: Engine
    session_factory: sessionmaker[Session]
    embedder: Embedder
    llm: LLMClient | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def uow(self) -> UnitOfWork:
        return UnitOfWork(self.session_factory)

    def dispose(self) -> None:
        self.engine.dispose()


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
    embedder: Embedder | None = None,
) -> App:
    settings = settings or load_settings()
    engine = make_engine(settings.database_url)
    return App(
        settings=settings,
        engine=engine,
        session_factory=make_session_factory(engine),
        embedder=embedder or make_embedder(settings),
        llm=llm if llm is not None else make_llm(settings),
    )
