"""Scope keys: the canonical compact JSON every stored row carries, cached per instance
without changing what a scope equals, hashes or sorts as."""

from __future__ import annotations

import json

import pytest

from worker.domain.types import Scope

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("scope", "key"), [
    (Scope("a"), '["a",null,null]'),  # None is a value: it is written, not left out
    (Scope("a", "u", "c"), '["a","u","c"]'),
    (Scope('a"b', None, "c"), '["a\\"b",null,"c"]'),  # quotes escaped, never split
    (Scope("agent-é"), '["agent-\\u00e9",null,null]'),  # ASCII only, as json.dumps writes
])
def test_key_is_compact_json_and_reads_back(scope: Scope, key: str) -> None:
    """The key is the fields as compact JSON, and from_key gives the same scope back."""
    assert scope.key == key
    assert json.loads(key) == [scope.agent_id, scope.user_id, scope.company_id]
    assert Scope.from_key(scope.key) == scope


def test_a_read_key_changes_no_comparison() -> None:
    """Reading (and so caching) the key leaves equality, hashing and order to the fields."""
    read, fresh = Scope("a", "u"), Scope("a", "u")
    assert read.key == fresh.key
    assert read == fresh and hash(read) == hash(fresh) and not read < fresh
    assert sorted([Scope("b", "u"), read, Scope("a", "t")]) == [Scope("a", "t"), fresh, Scope("b", "u")]
    assert {read: 1}[fresh] == 1


def test_scopes_sort_when_one_has_an_id_another_lacks() -> None:
    """``dream gate`` sorts every known scope: None and an id of the same agent compare (None
    first), and a scope equal to another is neither before nor after it."""
    scopes = {Scope("a", "u1"), Scope("a"), Scope("a", None, "c1"), Scope("a", "u1", "c1"),
              Scope("b")}
    assert sorted(scopes) == [Scope("a"), Scope("a", None, "c1"), Scope("a", "u1"),
                              Scope("a", "u1", "c1"), Scope("b")]
    assert not Scope("a", "u") < Scope("a", "u") and Scope("a", "u") <= Scope("a", "u")
