"""A bounded LRU cache of biLM layer 0 (the char CNN's token vectors), per word type.

Layer 0 has no context, so a word's vector is computed once. `BiLM` uses the cache only
while the char CNN is frozen. A change to its parameters or the autocast dtype empties it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

import numpy as np
import torch

from ..model.characters import CHAR_ID_OFFSET, PADDING_CHARACTER
from ..model.checks import check_int

DEFAULT_TOKEN_CACHE_WORDS = 50_000
"""Default bound, in word types: ~25 MB of float32 for the default model, ~100 MB for the original."""

_PADDING_ID = PADDING_CHARACTER + CHAR_ID_OFFSET


class TokenCache:
    """LRU map from a word's char ids to its layer-0 vector.

    Args:
        max_words: Most word types kept (> 0): at most `max_words * projection_dim` values.

    Attributes:
        hits, misses: Distinct words per batch answered from the cache / computed.
    """

    def __init__(self, max_words: int = DEFAULT_TOKEN_CACHE_WORDS) -> None:
        self.max_words = check_int(
            "max_words",
            max_words,
            meaning="word types to keep",
            hint="To switch the cache off, load with token_cache_words=0 or build the model with token_cache=None.",
        )
        self._lock = threading.Lock()
        self.clear()

    # ------------------------------------------------------------------ bookkeeping
    def clear(self) -> None:
        """Drop every entry and the statistics."""
        self._slots: OrderedDict[bytes, int] = OrderedDict()  # key -> row of _table, LRU first
        self._table: torch.Tensor | None = None  # [rows, P]
        self._free: list[int] = []  # rows of _table not holding a word
        self._fingerprint: tuple | None = None
        self.hits = 0
        self.misses = 0

    def reset_stats(self) -> None:
        """Zero `hits` and `misses`, keeping the entries."""
        self.hits = 0
        self.misses = 0

    @property
    def hit_rate(self) -> float:
        """hits / (hits + misses), 0.0 before any lookup."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def __len__(self) -> int:
        return len(self._slots)

    def __repr__(self) -> str:
        return f"TokenCache(max_words={self.max_words}, words={len(self)}, hit_rate={self.hit_rate:.3f})"

    def __getstate__(self) -> dict:
        return {"max_words": self.max_words}  # no lock (unpicklable), no entries

    def __setstate__(self, state: dict) -> None:
        self.max_words = state["max_words"]
        self._lock = threading.Lock()
        self.clear()

    # ------------------------------------------------------------------ lookup
    def lookup(self, words: torch.Tensor, compute: torch.nn.Module) -> torch.Tensor:
        """Vectors for distinct words: cached rows where present, `compute` (the char CNN) for the rest.

        Shape:
            words: [num_words, chars] int64 -> [num_words, P], as `compute` returns it
        """
        if torch.compiler.is_compiling():
            # Inside `torch.compile(model)`: look up out of the graph. The keys and the table
            # are state across calls: traced, they would be guards that fail under inference_mode.
            return torch.compiler.disable(self.lookup)(words, compute)
        keys = _row_keys(words)
        device_type = words.device.type
        dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
        fingerprint = parameter_fingerprint(compute.parameters(), dtype)
        with self._lock:
            if fingerprint != self._fingerprint:
                self.clear()
                self._fingerprint = fingerprint
            if not keys or len(keys) > self.max_words:  # nothing to look up, or wider than the cache
                self.misses += len(keys)
                return compute(words)
            missing = [i for i, key in enumerate(keys) if key not in self._slots]
            for key in keys:  # hits become the most recently used
                if key in self._slots:
                    self._slots.move_to_end(key)
            self.hits += len(keys) - len(missing)
            self.misses += len(missing)
            if missing:
                index = torch.tensor(missing, dtype=torch.long, device=words.device)
                self._store([keys[i] for i in missing], compute(words.index_select(0, index)))
            table = self._table
            assert table is not None  # internal invariant: filled by _store above
            slots = torch.tensor([self._slots[key] for key in keys], dtype=torch.long, device=table.device)
            return table.index_select(0, slots)

    def _store(self, keys: list[bytes], vectors: torch.Tensor) -> None:
        with torch.inference_mode(False):  # an inference tensor could not be updated outside it later
            self._store_rows(keys, vectors.detach())

    def _store_rows(self, keys: list[bytes], vectors: torch.Tensor) -> None:
        table = self._table
        if table is None or table.dtype != vectors.dtype or table.device != vectors.device:
            # All `max_words` rows at once, never grown (growing holds two tables at once).
            # `new_empty` writes nothing: on the CPU a row becomes resident when first used.
            table = vectors.new_empty(self.max_words, vectors.shape[1])
            self._slots.clear()
            self._free = list(range(self.max_words - 1, -1, -1))  # pop() gives row 0 first
        while len(self._free) < len(keys):  # full: evict the least recently used
            _, slot = self._slots.popitem(last=False)
            self._free.append(slot)
        slots = [self._free.pop() for _ in keys]
        table.index_copy_(0, torch.tensor(slots, dtype=torch.long, device=table.device), vectors)
        self._slots.update(zip(keys, slots))
        self._table = table


def _row_keys(words: torch.Tensor) -> list[bytes]:
    """One key per char-id row: its int16 bytes up to the last id that is not padding (20 bytes, not 100)."""
    rows = np.ascontiguousarray(words.detach().to("cpu", torch.int16).numpy())
    if rows.size == 0:
        return [row.tobytes() for row in rows]
    real = rows != _PADDING_ID
    ends = rows.shape[1] - np.argmax(real[:, ::-1], axis=1)  # one past the last non-padding id
    return [row[:end].tobytes() for row, end in zip(rows, ends.tolist())]


def parameter_fingerprint(parameters: Iterable[torch.Tensor], dtype: torch.dtype | None) -> tuple:
    """What `TokenCache` compares to know that cached vectors are still valid.

    Identity, storage and version counter per parameter, and sums of its values: they catch
    edits through `.data`, which the version counter misses.
    """
    parameters = list(parameters)
    with torch.no_grad():
        sums = tuple(
            x for p in parameters for x in (float64_sum(p), float(p.reshape(-1)[::97].sum(dtype=torch.float64)))
        )
    return (dtype, sums) + tuple((id(p), p.data_ptr(), p._version, p.device) for p in parameters)


_SUM_BLOCK = 2**20


def float64_sum(tensor: torch.Tensor) -> float:
    """The float64 sum of a tensor's values, in blocks (a float64 copy would double it)."""
    flat = tensor.detach().reshape(-1)
    return sum(float(block.sum(dtype=torch.float64)) for block in flat.split(_SUM_BLOCK))
