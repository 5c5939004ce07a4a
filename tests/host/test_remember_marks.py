"""`remember` and imports keep a fact that differs from a stored one by a mark that carries a
value (a decimal point, a comparison sign, "ß"): before, the identity hash folded it away and
`remember` answered NOOP ("identical content already in the scope"), an import skipped the
line as already present. Migration 0017 recomputes the stored hashes."""

from __future__ import annotations

import importlib.util
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, text

from tests.store.test_migrate import _migrate
from worker.app import App
from worker.domain.types import Scope, content_hash, normalise_text
from worker.host.remember import remember
from worker.ingest import import_notes

SCOPE = Scope("agent-1")
TEXTS = ["User takes 5 mg of melatonin at night", "User takes .5 mg of melatonin at night",
         "Budget: < $1500", "Budget: > $1500", "Nutzer trinkt Alkohol in Maßen",
         "Nutzer trinkt Alkohol in Massen", "Status: ❌", "Status: ✅", "Blood type O-"]


def test_remember_adds_a_fact_that_differs_by_a_mark(app: App) -> None:
    for first, second in [(TEXTS[0], TEXTS[1]), (TEXTS[2], TEXTS[3]), (TEXTS[4], TEXTS[5])]:
        a = remember(app, SCOPE, first)
        b = remember(app, SCOPE, second)
        assert (a.action, b.action) == ("ADD", "ADD") and a.id != b.id, second
    again = remember(app, SCOPE, "budget: > $1500.")  # what carries no value still folds
    assert again.action == "NOOP"


def test_migration_0017_rehashes_the_stored_notes(app: App) -> None:
    """A store hashed by revision 0015's rule: after the upgrade every note holds the hash of
    today's rule, a re-import of its lines adds nothing, and the line the old fold took for
    present (".5 mg" beside "5 mg") is added."""
    lines = [json.dumps({"id": f"n{i}", "agent_id": "agent-1", "content": t})
             for i, t in enumerate(TEXTS)]
    assert import_notes(app, lines).inserted == len(TEXTS)
    _migrate(app, "downgrade", "0016")
    with app.engine.begin() as conn:
        old = _hashes(conn)
    assert old["n0"] == old["n1"] and old["n2"] == old["n3"] and old["n4"] == old["n5"]
    _migrate(app, "upgrade", "head")
    with app.engine.begin() as conn:
        new = _hashes(conn)
    assert new == {f"n{i}": content_hash(t) for i, t in enumerate(TEXTS)}
    assert import_notes(app, [json.dumps({"agent_id": "agent-1", "content": t})
                              for t in TEXTS]).inserted == 0


def _hashes(conn: Connection) -> dict[str, str]:
    return {r.id: r.content_hash for r in conn.execute(text("SELECT id, content_hash FROM notes"))}


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from("aZß ẞ.5-–−+<>=≤❌✅°O,:/'\"!?…\u00ad\ufe0fिं_ 9"), max_size=24))
def test_migration_0017_folds_as_the_code_does(sample: str) -> None:
    """The migration holds a copy of the rule (a later change needs its own migration): the
    copy and ``normalise_text`` agree."""
    from worker.store.migrate import MIGRATIONS_DIR

    spec = importlib.util.spec_from_file_location(
        "m0017", MIGRATIONS_DIR / "versions" / "0017_value_marks_hashes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for t in [sample, *TEXTS]:
        assert module._new(t) == normalise_text(t)
