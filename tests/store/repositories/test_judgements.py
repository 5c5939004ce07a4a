"""Verdict memory reads on SQLite and PostgreSQL: the rows of the asked kinds in the asked
scope, oldest first, whatever else is stored."""

from __future__ import annotations

from tests.support.factories import NOW
from worker.app import App
from worker.domain.types import Scope

A, B = Scope("a", "u"), Scope("b", "u")


def test_of_kinds_reads_the_scope_s_rows_of_those_kinds_oldest_first(app: App) -> None:
    """Another scope's rows and other kinds are left out; an unknown kind reads nothing."""
    with app.uow() as uow:
        for scope, kind, fp in [(A, "cluster", "f1"), (A, "pair", "f2"), (B, "cluster", "f3"),
                                (A, "host", "f4"), (A, "cluster", "f5")]:
            uow.judgements.record(scope, kind, fp, ["n2", "n1"], "keep_separate", f"r-{fp}",
                                  None, NOW)
        uow.commit()
    with app.uow() as uow:
        rows = uow.judgements.of_kinds(A, ["cluster", "host"])
        assert [(r.kind, r.fingerprint) for r in rows] == [("cluster", "f1"), ("host", "f4"),
                                                          ("cluster", "f5")]
        assert rows[0].note_ids == ["n1", "n2"] and rows[0].reason == "r-f1"
        assert uow.judgements.of_kinds(A, ["nothing"]) == []
        assert [r.fingerprint for r in uow.judgements.of_kinds(B, ["cluster"])] == ["f3"]
