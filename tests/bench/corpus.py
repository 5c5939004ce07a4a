"""Deterministic benchmark corpus: S scopes × n notes with planted structure, bulk-loaded.

Each scope holds duplicate clusters (paraphrased variants, one exact repeat), dated contradicting
pairs, complementary pairs, notes citing deleted conversations (stale references, with registry
rows), expired notes, manual and protected notes, and unrelated filler. Same seed → same store.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import insert, text

from worker.app import App
from worker.domain.types import Scope, content_hash
from worker.store.models import AgentRow, CompanyRow, ConversationRow, SessionRow, UserRow

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

_SYLLABLES = [
    "ka", "lo", "mi", "ren", "tu", "sa", "vo", "ne", "pi", "dar", "gel", "hu", "zo", "qui",
    "bra", "fen", "mol", "tri", "wex", "yul", "cor", "den", "fal", "gor", "jin", "lek",
]
_SUBJECTS = ["editor", "language", "database", "framework", "shell", "browser", "cloud",
             "laptop", "keyboard", "terminal", "notebook", "linter", "formatter", "queue"]
_VALUES = ["Vim", "Emacs", "Python", "Rust", "Go", "PostgreSQL", "SQLite", "Django", "Flask",
           "zsh", "fish", "Firefox", "Chromium", "AWS", "GCP", "Azure", "ThinkPad", "MacBook"]
_PARAPHRASES = [
    "User prefers {v} for {s}",
    "The user prefers {v} for {s}.",
    "prefers {v} for {s}, always",
    "For {s} the user prefers {v}",
    "User prefers {v} for {s} whenever possible",
]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))


@dataclass
class Planted:
    """What the generator planted, so the bench can check what the phases found."""

    duplicate_clusters: int = 0
    duplicate_notes: int = 0
    contradicting_pairs: int = 0
    complementary_pairs: int = 0
    stale_notes: int = 0
    expired_notes: int = 0
    manual_notes: int = 0
    protected_notes: int = 0
    unused_notes: int = 0
    filler_notes: int = 0

    def add(self, other: Planted) -> None:
        for k, v in vars(other).items():
            setattr(self, k, getattr(self, k) + v)


@dataclass
class Corpus:
    scopes: list[Scope]
    notes: int
    planted: Planted
    conversations: list[dict[str, Any]] = field(default_factory=list)


def scope_for(index: int) -> Scope:
    return Scope(f"agent-{index % 10}", f"user-{index}", None if index % 3 else f"co-{index % 7}")


def _scope_rows(rng: random.Random, scope: Scope, n: int, tag: str
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Planted]:
    """Rows for one scope (without embeddings) and the deleted conversations they cite."""
    planted = Planted()
    rows: list[dict[str, Any]] = []
    convs: list[dict[str, Any]] = []

    def note(content: str, age_days: float, **extra: Any) -> None:
        created = NOW - timedelta(days=age_days)
        row = {
            "id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "scope_key": scope.key, "agent_id": scope.agent_id, "user_id": scope.user_id,
            "company_id": scope.company_id, "source_conversation_id": None, "type": "Context",
            "content": content, "content_hash": content_hash(content), "status": "active",
            "is_auto_generated": True, "protection": "standard", "importance": 0.5,
            "access_count": rng.randint(1, 5), "created_at": created,
            "last_accessed_at": max(created, NOW - timedelta(days=rng.uniform(0, 30))),
            "updated_at": created, "expires_at": None, "valid_from": created, "valid_to": None,
            "consolidation_generation": 0, "version": 1,
        }
        row.update(extra)
        rows.append(row)

    # Per 100 notes: 3 duplicate clusters of 4-5 (≈14), 3 contradicting pairs (6), 2 complementary
    # pairs (4), 3 stale (3), 4 expired (4), 3 manual (3), 2 protected (2); the rest filler.
    units = max(1, n // 100)
    for c in range(3 * units):
        s = f"{_word(rng)} {_word(rng)} {rng.choice(_SUBJECTS)}"
        v = f"{rng.choice(_VALUES)} {_word(rng)}"
        variants = rng.sample(_PARAPHRASES, rng.randint(3, 4))
        for tmpl in variants:
            note(tmpl.format(s=s, v=v), age_days=rng.uniform(5, 200), type="Preference")
        note(variants[0].format(s=s, v=v).upper(), age_days=rng.uniform(1, 5), type="Preference")
        planted.duplicate_clusters += 1
        planted.duplicate_notes += len(variants) + 1
        if c % 3 == 0:  # a protected twin: must never be retired (R23)
            note(variants[1].format(s=s, v=v) + " (pinned)", age_days=30, protection="protected")
            planted.protected_notes += 1
    for _ in range(3 * units):
        s = f"{_word(rng)} {_word(rng)} {rng.choice(_SUBJECTS)} {_word(rng)}"
        old, new = rng.sample(_VALUES, 2)
        d_old = (NOW - timedelta(days=rng.randint(120, 600))).date().isoformat()
        d_new = (NOW - timedelta(days=rng.randint(1, 60))).date().isoformat()
        note(f"The {s} of the user is {old} since {d_old}", age_days=rng.uniform(100, 300))
        note(f"The {s} of the user is {new} since {d_new}", age_days=rng.uniform(1, 30))
        planted.contradicting_pairs += 1
    for _ in range(2 * units):
        s = _word(rng)
        s = f"{_word(rng).title()} {_word(rng).title()}"
        note(f"{s}, the user's dog, is a beagle", age_days=rng.uniform(10, 100))
        note(f"{s} eats at 7 pm", age_days=rng.uniform(1, 10))
        planted.complementary_pairs += 1
    for _ in range(3 * units):
        conv = f"conv-{tag}-{_word(rng)}-{rng.getrandbits(32):08x}"
        convs.append({"id": conv, "status": "deleted", "deleted_at": NOW - timedelta(days=3),
                      "deleted_reason": "user_request"})
        note(f"Asked about {_word(rng)} {_word(rng)} {_word(rng)} in that chat",
             age_days=rng.uniform(5, 50), source_conversation_id=conv)
        planted.stale_notes += 1
    for _ in range(4 * units):
        note(f"{_word(rng).title()} {_word(rng)} {_word(rng)} reminder",
             age_days=rng.uniform(20, 60), expires_at=NOW - timedelta(days=rng.uniform(1, 10)),
             protection="ephemeral")
        planted.expired_notes += 1
    for _ in range(3 * units):
        note(f"Manual note: {_word(rng)} {_word(rng)} {_word(rng)}", age_days=rng.uniform(1, 90),
             is_auto_generated=False)
        planted.manual_notes += 1
    for _ in range(2 * units):
        note(f"Company policy {_word(rng)}: never {_word(rng)} the {_word(rng)}",
             age_days=rng.uniform(1, 400), protection=rng.choice(["protected", "immutable"]),
             importance=0.9)
        planted.protected_notes += 1
    while len(rows) < n:
        words = " ".join(_word(rng) for _ in range(rng.randint(5, 9)))
        if rng.random() < 0.03:  # never used since written, older than retention: archived
            note(f"Fact {words}", age_days=rng.uniform(120, 365), last_accessed_at=None,
                 access_count=0)
            planted.unused_notes += 1
        else:
            note(f"Fact {words}", age_days=rng.uniform(0, 365))
            planted.filler_notes += 1
    return rows[:n], convs, planted


def generate(seed: int, scopes: int, notes_per_scope: int, scope_offset: int = 0
             ) -> Iterator[tuple[Scope, list[dict[str, Any]], list[dict[str, Any]], Planted]]:
    """Rows scope by scope (so a million notes never sit in memory at once)."""
    for s in range(scope_offset, scope_offset + scopes):
        rng = random.Random(seed * 1_000_003 + s)
        scope = scope_for(s)
        rows, convs, planted = _scope_rows(rng, scope, notes_per_scope, f"{seed}-{s}")
        yield scope, rows, convs, planted


def load(app: App, seed: int, scopes: int, notes_per_scope: int, batch_notes: int = 20000
         ) -> Corpus:
    """Generate, embed with the app's embedder and bulk-load; returns what was planted."""
    planted = Planted()
    all_scopes: list[Scope] = []
    pending: list[dict[str, Any]] = []
    pending_convs: list[dict[str, Any]] = []
    pending_sessions: list[dict[str, Any]] = []
    total = 0
    with app.uow() as uow:  # the registry knows every agent and company (prune must keep them)
        uow.session.execute(insert(AgentRow), [{"id": f"agent-{i}", "status": "active"}
                                               for i in range(10)])
        uow.session.execute(insert(CompanyRow), [{"id": f"co-{i}", "status": "active"}
                                                 for i in range(7)])
        uow.commit()
    for scope, rows, convs, p in generate(seed, scopes, notes_per_scope):
        planted.add(p)
        all_scopes.append(scope)
        pending.extend(rows)
        pending_convs.extend(convs)
        pending_sessions.extend(
            {"id": f"sess-{seed}-{scope.user_id}-{i}", "scope_key": scope.key,
             "agent_id": scope.agent_id, "user_id": scope.user_id,
             "company_id": scope.company_id, "started_at": NOW - timedelta(hours=i),
             "ended_at": None}
            for i in range(5)
        )
        if len(pending) >= batch_notes:
            total += _flush(app, pending, pending_convs, pending_sessions)
            pending, pending_convs, pending_sessions = [], [], []
    if pending or pending_convs:
        total += _flush(app, pending, pending_convs, pending_sessions)
    return Corpus(all_scopes, total, planted)


def _flush(app: App, rows: list[dict[str, Any]], convs: list[dict[str, Any]],
           sessions: list[dict[str, Any]]) -> int:
    vectors = app.embedder.embed([r["content"] for r in rows])
    model = app.embedder.model_name
    for r, v in zip(rows, vectors, strict=True):
        r["embedding"] = v
        r["embedding_model"] = model
    if app.engine.dialect.name == "postgresql":
        _copy_postgres(app, rows)
    else:
        with app.uow() as uow:
            uow.notes.insert_many(rows)
            uow.commit()
    users = sorted({r["user_id"] for r in rows if r["user_id"]})
    with app.uow() as uow:
        if users:
            uow.session.execute(insert(UserRow), [{"id": u, "status": "active"} for u in users])
        if convs:
            uow.session.execute(insert(ConversationRow), convs)
        if sessions:
            uow.session.execute(insert(SessionRow), sessions)
        uow.commit()
    return len(rows)


_COPY_COLUMNS = [
    ("id", "text"), ("scope_key", "text"), ("agent_id", "text"), ("user_id", "text"),
    ("company_id", "text"), ("source_conversation_id", "text"), ("type", "text"),
    ("content", "text"), ("content_hash", "text"), ("embedding", "vector"),
    ("embedding_model", "text"), ("status", "text"), ("is_auto_generated", "bool"),
    ("protection", "text"), ("importance", "float8"), ("access_count", "int4"),
    ("last_accessed_at", "timestamptz"), ("created_at", "timestamptz"),
    ("updated_at", "timestamptz"), ("expires_at", "timestamptz"), ("valid_from", "timestamptz"),
    ("valid_to", "timestamptz"), ("consolidation_generation", "int4"), ("version", "int4"),
]


def _copy_postgres(app: App, rows: list[dict[str, Any]]) -> None:
    """COPY … FROM STDIN in binary with pgvector's adapter: ~10× a text executemany."""
    from pgvector.psycopg import register_vector

    raw = app.engine.raw_connection()
    try:
        conn = raw.driver_connection
        assert conn is not None, "a pooled connection without its driver connection"
        register_vector(conn)
        cols = ", ".join(c for c, _ in _COPY_COLUMNS)
        with conn.cursor() as cur, cur.copy(
            f"COPY notes ({cols}) FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types([t for _, t in _COPY_COLUMNS])
            for r in rows:
                copy.write_row([
                    np.asarray(r[c], dtype=np.float32) if t == "vector" else r.get(c)
                    for c, t in _COPY_COLUMNS
                ])
        conn.commit()
    finally:
        raw.close()


def analyze(app: App) -> None:
    """Fresh planner statistics after a bulk load (PostgreSQL would otherwise guess)."""
    if app.engine.dialect.name == "postgresql":
        with app.engine.begin() as conn:
            conn.execute(text("ANALYZE"))
    else:
        with app.engine.begin() as conn:
            conn.execute(text("ANALYZE"))
