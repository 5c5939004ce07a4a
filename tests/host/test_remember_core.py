"""Pure parts of the host API: remember policy, derived ids, tokens, metrics text (grounding:
tests/text/test_grounding.py)."""

from __future__ import annotations

import json

import pytest

from worker.api.auth import Principal, authenticate, bearer, parse_tokens
from worker.api.metrics import render
from worker.config import ConfigError
from worker.domain.types import Scope
from worker.host.note_ids import derived_id
from worker.host.remember import decide


@pytest.mark.parametrize(("best", "new_len", "old_len", "action"), [
    (None, 10, 0, "ADD"),
    (0.85, 10, 10, "NOOP"),      # at the noop threshold
    (0.84, 12, 10, "UPDATE"),    # exactly 20% longer
    (0.84, 11, 10, "ADD"),       # similar but not 20% longer: keep both
    (0.50, 30, 10, "UPDATE"),    # at the update threshold
    (0.49, 30, 10, "ADD"),
    (1.00, 5, 50, "NOOP"),       # a shorter restatement of a known note
])
def test_remember_policy_table(best: float | None, new_len: int, old_len: int, action: str) -> None:
    """NOOP at ≥ noop threshold; UPDATE at ≥ update threshold and ≥ 1.2× length; else ADD."""
    got, reason = decide(best, new_len, old_len, noop_threshold=0.85, update_threshold=0.5)
    assert got == action and reason


@pytest.mark.parametrize(("best", "reason"), [
    (None, "no active Preference notes in the scope"),
    # before: "most similar note 0.11 < …", though a near-duplicate of another type existed
    (0.11, "most similar of the scope's Preference notes 0.11 < update threshold 0.50"),
])
def test_an_add_names_the_type_it_compared_within(best: float | None, reason: str) -> None:
    """Only notes of the write's type are compared; an ADD's reason says which."""
    assert decide(best, 10, 10, noop_threshold=0.85, update_threshold=0.5,
                  note_type="Preference") == ("ADD", reason)


def test_derived_ids_depend_on_key_salt_scope_text_and_attempt() -> None:
    """Same key, salt, scope and normalised text → same id; another key (another database),
    salt (the scope's after an erasure), scope, text or attempt → another id."""
    a, b = Scope("a"), Scope("a", "u")
    k, s = "0f" * 32, "5a" * 32
    one = derived_id(k, a, "x y", salt=s)
    assert one == derived_id(k, a, "x y", salt=s) and len(one) == 64
    assert len({one, derived_id(k, b, "x y", salt=s), derived_id(k, a, "x z", salt=s),
                derived_id(k, a, "x y", 1, salt=s), derived_id("1e" * 32, a, "x y", salt=s),
                derived_id(k, a, "x y", salt="a5" * 32)}) == 6


def test_tokens_parse_admin_and_scoped_and_compare_all() -> None:
    """Admin and scoped grants parse; the right token finds its principal, others find none."""
    tokens = parse_tokens(json.dumps({"a" * 16: {"role": "admin"},
                                      "b" * 16: {"agent_id": "ag", "user_id": 7}}))
    assert authenticate(tokens, "a" * 16) == Principal(None)
    assert authenticate(tokens, "b" * 16) == Principal(Scope("ag", "7", None))
    assert authenticate(tokens, "c" * 16) is None and authenticate(tokens, None) is None
    assert authenticate([], "a" * 16) is None
    assert bearer("Bearer  tok ") == "tok" and bearer("Basic tok") is None and bearer(None) is None


@pytest.mark.parametrize("raw", ["{", "[]", '{"short": {"role": "admin"}}',
                                 '{"0123456789abcdefg": {"role": "root"}}',
                                 '{"0123456789abcdefg": "admin"}'])
def test_bad_token_config_is_one_line_without_the_token(raw: str) -> None:
    """Malformed DREAM_API_TOKENS fails with a one-line ConfigError that never echoes a token."""
    with pytest.raises(ConfigError) as err:
        parse_tokens(raw)
    assert "\n" not in str(err.value) and "0123456789abcdefg" not in str(err.value)


def test_metrics_text_format() -> None:
    """Counts render as Prometheus families with HELP/TYPE lines and escaped labels."""
    text = render({"runs": {"succeeded": 2, "failed": 1}, "notes": {"active": 5},
                   "phases": {"consolidate": {"calls": 3, "tokens_in": 100, "tokens_out": 40,
                                              "duration_ms_sum": 1500, "duration_count": 2}}})
    assert '# TYPE dream_runs gauge\n' in text and 'dream_runs{status="failed"} 1\n' in text
    assert 'dream_model_calls_total{phase="consolidate"} 3' in text
    assert 'dream_model_tokens_total{direction="in",phase="consolidate"} 100' in text
    assert 'dream_phase_duration_seconds_sum{phase="consolidate"} 1.5' in text
    assert text.endswith("\n")


def test_feature_cache_finds_known_hashes_and_evicts_least_recent_scopes() -> None:
    """Rows are found by full sha256 (unknown → -1) and the cache keeps at most max_scopes /
    max_rows, dropping the least recently used scope first."""
    import numpy as np

    from worker.domain.types import content_hash
    from worker.host.remember_cache import RememberCache, hash_words

    cache = RememberCache(max_scopes=2, max_rows=10)
    feats = cache.features(("s1", "Context", "jaccard"), 0, live=1)
    hashes = [content_hash(t) for t in ("alpha", "beta", "gamma")]
    for h, t in zip(hashes[:2], ("alpha", "beta"), strict=True):
        feats.add(h, t, cache.token_ids({t}), None)
    rows = feats.rows(hash_words("".join(hashes)))
    assert rows.tolist() == [0, 1, -1]
    near = hashes[0][:16] + "0" * 48  # same first word, different digest
    assert feats.rows(hash_words(near)).tolist() == [-1]
    cache.features(("s2", "Context", "jaccard"), 0, live=1)
    cache.features(("s3", "Context", "jaccard"), 0, live=1)
    assert list(cache.scopes) == [("s2", "Context", "jaccard"), ("s3", "Context", "jaccard")]
    assert np.array_equal(hash_words(hashes[0])[0], hash_words(hashes[0]).ravel())
