from __future__ import annotations

import copy

import numpy as np
import pytest

from elmo_core import FeatureCache


def array(n: int, value: float = 1.0) -> np.ndarray:
    return np.full((3, n, 4), value, dtype="float32")  # [layers, tokens, dim]: 48 bytes per token


def test_feature_cache_returns_what_was_put_and_counts_hits_and_misses():
    cache = FeatureCache(10_000)
    assert cache.get(("a", "b")) is None
    cache.put(("a", "b"), array(2, 7.0))
    np.testing.assert_array_equal(cache.get(("a", "b")), array(2, 7.0))
    assert cache.stats == (1, 1, 1, 96, 10_000)


def test_feature_cache_never_holds_more_than_its_budget_and_evicts_the_least_recent():
    cache = FeatureCache(48 * 10)  # room for 10 tokens
    for i in range(4):
        cache.put((str(i),), array(3, i))  # 144 bytes each: three fit
        assert cache.nbytes <= cache.max_bytes
    assert len(cache) == 3 and ("0",) not in cache
    cache.get(("1",))  # now the most recent
    cache.put(("4",), array(3))
    assert ("1",) in cache and ("2",) not in cache
    assert cache.nbytes == 3 * 144 <= cache.max_bytes


def test_feature_cache_does_not_store_an_array_larger_than_its_budget():
    cache = FeatureCache(100)
    value = array(3)
    assert cache.put(("big",), value) is value
    assert len(cache) == 0 and cache.nbytes == 0


def test_feature_cache_hits_are_read_only_and_independent_of_the_callers_array():
    cache = FeatureCache(10_000)
    value = array(2, 1.0)
    cache.put(("a",), value)
    value[:] = 5.0  # the caller changes its own array afterwards
    hit = cache.get(("a",))
    np.testing.assert_array_equal(hit, array(2, 1.0))
    with pytest.raises(ValueError, match="read-only"):
        hit[0, 0, 0] = 9.0


def test_feature_cache_copies_start_empty_and_clear_resets():
    cache = FeatureCache(10_000)
    cache.put(("a",), array(2))
    assert len(copy.deepcopy(cache)) == 0 and copy.deepcopy(cache).max_bytes == 10_000
    cache.clear()
    assert cache.stats == (0, 0, 0, 0, 10_000)


@pytest.mark.parametrize("budget", [-1, 1.5, True])
def test_feature_cache_rejects_a_bad_budget(budget):
    with pytest.raises(ValueError, match="max_bytes must be a non-negative integer"):
        FeatureCache(budget)
