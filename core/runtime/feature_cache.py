"""FeatureCache: a frozen biLM's layers of a sentence, computed once and reused across epochs."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import NamedTuple

import numpy as np

from ..model.checks import check_int

__all__ = ["FeatureCache"]


class CacheStats(NamedTuple):
    """Counters of a `FeatureCache` since it was made (or last cleared)."""

    hits: int
    misses: int
    entries: int
    nbytes: int
    max_bytes: int


class FeatureCache:
    """A least-recently-used map from a key (a token tuple) to a read-only copy of an array.

        cache = FeatureCache(max_bytes=1 << 30)
        layers = cache.get(tokens)          # None on a miss
        if layers is None:
            layers = cache.put(tokens, compute(tokens))

    Args:
        max_bytes: Budget for the arrays' `nbytes`. 0 stores nothing. A sentence of n tokens
            costs `(n_layers + 1) * n * dim * 4` bytes: 3 KB per token for the default model.

    Raises:
        ValueError: if `max_bytes` is negative or not an integer.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = check_int("max_bytes", max_bytes, minimum=0, meaning="0 = no cache")
        self._entries: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._nbytes = 0
        self._hits = 0
        self._misses = 0

    def get(self, key: Hashable) -> np.ndarray | None:
        """The array stored under `key` (read-only), or None."""
        value = self._entries.get(key)
        if value is None:
            self._misses += 1
            return None
        self._entries.move_to_end(key)
        self._hits += 1
        return value

    def put(self, key: Hashable, value: np.ndarray) -> np.ndarray:
        """Store a read-only copy of `value` under `key`, evicting the oldest entries.

        Returns:
            The stored copy, or `value` itself when it does not fit the budget.
        """
        if key in self._entries:
            self._nbytes -= self._entries.pop(key).nbytes
        if value.nbytes > self.max_bytes:
            return value
        stored = np.array(value, copy=True)
        stored.setflags(write=False)
        while self._entries and self._nbytes + stored.nbytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._nbytes -= evicted.nbytes
        self._entries[key] = stored
        self._nbytes += stored.nbytes
        return stored

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        self._entries.clear()
        self._nbytes = self._hits = self._misses = 0

    @property
    def nbytes(self) -> int:
        """Bytes of array data held now (never more than `max_bytes`)."""
        return self._nbytes

    @property
    def stats(self) -> CacheStats:
        return CacheStats(self._hits, self._misses, len(self._entries), self._nbytes, self.max_bytes)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __deepcopy__(self, memo: dict) -> FeatureCache:
        # A copied model (thinc's Model.copy) gets an empty cache, not a copy of every array.
        return FeatureCache(self.max_bytes)

    def __repr__(self) -> str:
        s = self.stats
        return (
            f"FeatureCache(entries={s.entries}, nbytes={s.nbytes}, max_bytes={s.max_bytes}, "
            f"hits={s.hits}, misses={s.misses})"
        )
