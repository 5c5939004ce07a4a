"""A keep-apart recorded while a run's write waits for the scope's lock still binds that write
(PostgreSQL; SQLite has one writer). The write's first UPDATE reads the scope's keep-aparts with
the snapshot its statement began with, then waits for the lock: one committed meanwhile went
unseen and the run merged notes a person had just kept apart."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text, update

from tests.phases.kit.test_write_hosts import SCOPE, _known, _write
from tests.support.factories import NOW, add_notes, claimed_phase_context, days_ago
from worker.app import App
from worker.domain.types import fingerprint_notes
from worker.errors import Conflict
from worker.host.fusion import keep_apart
from worker.phases.kit import ItemStatus, supersede
from worker.phases.kit.snapshot import KEEP_APART, Memory
from worker.store.models import NoteRow
from worker.store.scope_locks import lock_scopes

pytestmark = pytest.mark.postgres

TWINS = [{"id": "t1", "content": "User owns a red bicycle"},
         {"id": "t2", "content": "User owns a red bicycle"}]


def _waiting_for_a_scope_lock(app: App) -> bool:
    with app.engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"))
            .scalar_one())


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["value"] = call()
        except Exception as e:  # noqa: BLE001 - handed to the test to assert on
            out["error"] = e

    thread = threading.Thread(target=body)
    thread.start()
    return thread, out


def _until_waiting(app: App, thread: threading.Thread) -> None:
    deadline = time.monotonic() + 10
    while thread.is_alive() and not _waiting_for_a_scope_lock(app) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_keep_apart_committed_while_the_run_waits_for_the_lock_binds_it(pg_app: App) -> None:
    """The host holds the scope's lock and records the keep-apart of a contradiction pair; the
    run's write (one UPDATE row: the loser) starts and waits for the lock; the host commits:
    the pair is stale, nothing written (before: the loser was revoked into the winner). A
    write of several rows saw it already: each row of an executemany is a statement of its own,
    the rows after the first read after the lock."""
    ctx, parent = claimed_phase_context(pg_app, SCOPE)
    add_notes(pg_app, {"id": "old", "content": "User lives in Oslo", "created_at": days_ago(9)},
              {"id": "new", "content": "User lives in Rome", "created_at": days_ago(1)})
    known = _known(pg_app)
    notes = {n.id: n for n in known.notes.notes}
    change = supersede("pair", [notes["old"]], into=notes["new"], relation="superseded",
                       reason="contradictions.conflict", comment="[superseded]",
                       append_comment=True)
    known.memory = Memory({}, [])
    with pg_app.uow() as host:
        lock_scopes(host.session, [SCOPE.key])
        host.judgements.record(SCOPE, KEEP_APART, fingerprint_notes(list(notes.values())),
                               ["new", "old"], KEEP_APART, "host said keep apart", None, NOW)
        thread, out = _in_thread(lambda: _write(ctx, parent, [change], known))
        _until_waiting(pg_app, thread)
        assert thread.is_alive(), out
        host.commit()
    thread.join(30)
    assert "error" not in out, out
    (result,) = out["value"]
    assert result.status == ItemStatus.STALE and sorted(result.stale_ids) == ["new", "old"]
    with pg_app.uow() as uow:
        assert {n.id: n.status for n in uow.notes.get_many(["old", "new"])} == \
            {"old": "active", "new": "active"}


def test_a_keep_apart_waits_for_a_write_on_its_scope_and_sees_what_it_did(pg_app: App) -> None:
    """A write holds the scope's lock and retires t1; the host keeps t1 and t2 apart meanwhile:
    it waits for the write, then refuses, naming t1 (before: it answered kept apart at once, for
    a note the write was retiring)."""
    add_notes(pg_app, *TWINS)
    with pg_app.uow() as writer:
        lock_scopes(writer.session, [SCOPE.key])
        writer.session.execute(update(NoteRow).where(NoteRow.id == "t1")
                               .values(status="revoked", version=NoteRow.version + 1))
        thread, out = _in_thread(lambda: keep_apart(pg_app, ["t1", "t2"]))
        _until_waiting(pg_app, thread)
        assert thread.is_alive(), out
        writer.commit()
    thread.join(30)
    assert isinstance(out.get("error"), Conflict), out
    assert "note t1 is revoked" in str(out["error"])


def test_a_decline_waits_for_a_write_on_its_scope(pg_app: App) -> None:
    """Sibling: a reviewer's decline (which records a keep-apart) waits for a write holding the
    scope's lock, as the host's keep-apart does, so a write waiting for the lock after it sees
    the decline (before: it recorded at once, unseen by a write that had begun)."""
    from tests.review.test_declined_apart import SCOPE as REVIEWED
    from tests.review.test_declined_apart import _decline
    from worker.review.items import ChangeKind

    add_notes(pg_app, {"id": "d1", "content": "User likes tea"},
              {"id": "d2", "content": "User likes tea."})
    with pg_app.uow() as writer:
        lock_scopes(writer.session, [REVIEWED.key])
        thread, out = _in_thread(lambda: _decline(pg_app, ChangeKind.MERGE, ["d1", "d2"]))
        _until_waiting(pg_app, thread)
        assert thread.is_alive(), out
        writer.commit()
    thread.join(30)
    assert "error" not in out, out
