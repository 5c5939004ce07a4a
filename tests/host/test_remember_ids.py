"""A remembered note's id does not give its text away. It was sha256(scope key + normalised
text), with no secret: anyone holding the id (a host's records, an erasure's answer) could
confirm a guess at what the note said, after the note itself was erased. It is now keyed with
the database's own secret, made at random by the migration."""

from __future__ import annotations

import hashlib
from pathlib import Path

from sqlalchemy import delete

from tests.conftest import make_sqlite_app
from worker.app import App
from worker.domain.types import Scope, normalise_text
from worker.host.remember import remember
from worker.safety.erase import erase
from worker.store.models import InstanceKeyRow
from worker.store.repositories.keys import NOTE_IDS

SCOPE = Scope("agent-1", "u-7")
SECRET = "The user's salary is 93,000 euros a year"


def _unkeyed(text: str) -> str:
    return hashlib.sha256(f"{SCOPE.key}\n{normalise_text(text)}".encode()).hexdigest()


def test_an_erased_notes_id_confirms_no_guess_at_its_text(app: App, tmp_path: Path) -> None:
    first = remember(app, SCOPE, SECRET)
    assert first.action == "ADD" and first.id != _unkeyed(SECRET)
    assert remember(app, SCOPE, SECRET).id == first.id  # still idempotent in one database
    assert erase(app, note_id=first.id).note_ids == [first.id]
    other = make_sqlite_app(tmp_path / "other")
    try:
        assert remember(other, SCOPE, SECRET).id not in {first.id, _unkeyed(SECRET)}
    finally:
        other.dispose()


def test_a_database_whose_key_row_was_deleted_makes_a_new_one(app: App) -> None:
    with app.uow() as uow:
        uow.session.execute(delete(InstanceKeyRow))
        uow.commit()
    app.remember_cache = None  # a process started after the row went
    made = remember(app, SCOPE, SECRET)
    with app.uow() as uow:
        (row,) = uow.session.query(InstanceKeyRow).filter(InstanceKeyRow.name == NOTE_IDS).all()
    assert made.action == "ADD" and len(row.value) == 64
