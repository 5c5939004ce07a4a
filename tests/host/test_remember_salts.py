"""An erased note's id confirms no guess at what the note said. Remember derived an id from the
database's key, the scope and the text alone, and erasure deleted the row: remembering the same
text again in the scope returned exactly the id `dream erase` had printed (a wrong guess another
one), so anyone who may remember in the scope could test guesses against it. Each scope's ids
now derive from a salt that every erasure of notes of the scope deletes, in its transaction."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from tests.support.at_once import both_at_once
from worker.app import App, build_app
from worker.domain.types import Scope, normalise_text
from worker.host.note_ids import derived_id, id_key, scope_salt
from worker.host.remember import RememberResult, remember
from worker.safety.erase import erase
from worker.store.models import InstanceKeyRow, NoteRow
from worker.store.repositories.keys import NOTE_IDS, SALT_PREFIX, salt_name

remember_module = importlib.import_module("worker.host.remember")  # the package's name: a function
SCOPE = Scope("ag", "u9")
PIN = "My PIN code is 4831 for the bank."


@pytest.fixture
def second(app: App) -> Iterator[App]:
    """Another process on the same database: an App of its own, with its own caches."""
    other = build_app(app.settings)
    yield other
    other.engine.dispose()


def _ids(app: App) -> set[str]:
    with app.uow() as uow:
        return set(uow.session.scalars(select(NoteRow.id)))


def _key_names(app: App) -> set[str]:
    with app.uow() as uow:
        return set(uow.session.scalars(select(InstanceKeyRow.name)))


@pytest.mark.parametrize("subject", ["conversation", "note", "user"])
def test_the_erased_text_remembered_again_gets_an_unrelated_id(app: App, subject: str) -> None:
    """The audit's reproduction (`dream notes add` = remember): the same text remembered after
    the erasure was ADD under the erased id again, a confirmed guess."""
    first = remember(app, SCOPE, PIN, conversation_id="c1")
    assert first.action == "ADD"
    remember(app, SCOPE, "The user likes green tea", conversation_id="c2")  # kept (but: user)
    subjects: dict[str, dict[str, str | None]] = {
        "conversation": {"conversation_id": "c1"}, "note": {"note_id": first.id},
        "user": {"user_id": SCOPE.user_id}}
    by = subjects[subject]
    assert first.id in erase(app, **by).note_ids and first.id not in _ids(app)
    again = remember(app, SCOPE, PIN)
    assert again.action == "ADD" and again.id != first.id
    # As a fresh text's is: derived from the scope's new salt, as any id remember makes now.
    key = id_key(app)
    with app.uow() as uow:
        salt = scope_salt(uow, key, SCOPE)
    assert again.id == derived_id(key, SCOPE, normalise_text(PIN), salt=salt)


def test_erasing_a_user_leaves_no_salt_named_by_the_user(app: App) -> None:
    """The salt rows are named by keyed hashes of the scope and its user (no id in clear);
    erasing the user deletes every one of the user's scopes, one without notes left too."""
    other = Scope("ag", "u10")
    remember(app, SCOPE, PIN)
    remember(app, Scope("ag2", "u9", "co"), "The user works nights", conversation_id="c7")
    remember(app, other, "The user likes chess")
    erase(app, conversation_id="c7")  # its scope's salt went; made again by the next write:
    remember(app, Scope("ag2", "u9", "co"), "The user has a cat")
    key = id_key(app)
    with app.uow() as uow:  # a write that made its scope's salt and failed: no note there
        scope_salt(uow, key, Scope("ag3", "u9"))
    assert {salt_name(key, s.key) for s in (SCOPE, Scope("ag3", "u9"))} <= _key_names(app)
    erase(app, user_id="u9")
    names = _key_names(app)
    assert names == {NOTE_IDS, salt_name(key, other.key)}
    assert all(len(n) <= 64 and (n == NOTE_IDS or n.startswith(SALT_PREFIX)) for n in names)


def test_another_process_remembers_under_the_salt_an_erasure_made_new(
        app: App, second: App) -> None:
    """The salt is read in each write, never kept by a process: the App that did not erase
    (its caches warm) derives the erased text's id from the new salt too."""
    first = remember(app, SCOPE, PIN, conversation_id="c1")
    remember(app, SCOPE, "The user likes green tea")  # this process read the scope twice
    assert erase(second, conversation_id="c1").note_ids == [first.id]
    again = remember(app, SCOPE, PIN)
    assert again.action == "ADD" and again.id != first.id
    assert remember(second, SCOPE, PIN) == RememberResult(
        "NOOP", again.id, "identical content already in the scope", 1.0)


def test_an_erasure_between_the_read_and_the_write_makes_the_write_decide_again(
        app: App, second: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that read the salt before an erasure of the scope committed does not insert
    under it: the salt is read again in the write's transaction, and the write decides again
    (on the store as the erasure left it)."""
    kept = remember(app, SCOPE, PIN, conversation_id="c1")
    real = remember_module.scope_salt
    erased: list[str] = []

    def then_erased(uow: Any, key: str, scope: Scope) -> str:
        salt: str = real(uow, key, scope)
        if not erased:  # once: the erasure commits after this write read the salt
            erased.extend(erase(second, conversation_id="c1").note_ids)
        return salt

    monkeypatch.setattr(remember_module, "scope_salt", then_erased)
    made = remember(app, SCOPE, PIN, conversation_id="c2")  # c1's note cannot stand in
    assert erased == [kept.id] and made.action == "ADD"
    key = id_key(app)
    with app.uow() as uow:
        salt = real(uow, key, SCOPE)
    assert made.id == derived_id(key, SCOPE, normalise_text(PIN), salt=salt)
    assert _ids(app) == {made.id}


def test_identical_remembers_at_once_in_a_new_scope_are_one_note(app: App) -> None:
    """Both make the scope's salt at once: the first maker's stands, both derive one id, and
    the second insert collides on the primary key (a NOOP), as before the salts."""
    id_key(app)  # the database key is read once per process: both threads wait on the notes
    outcomes = both_at_once(app, lambda: remember(app, SCOPE, PIN))
    assert all(isinstance(o, RememberResult) for o in outcomes), outcomes
    assert sorted(o.action for o in outcomes) == ["ADD", "NOOP"]
    assert len({o.id for o in outcomes}) == 1 and _ids(app) == {outcomes[0].id}
