"""A bounded LRU cache of biLM layer 0 (the char CNN's token vectors), per word type.

Layer 0 has no context: a word's char CNN vector is the same in every sentence, so at
inference it only needs computing once per distinct word. In running text a few thousand
word types cover most positions (measured in `benchmarks/bench_core.py`), so after a
warm-up most of the char CNN's work, the largest part of the cost for small models, is a
table lookup.

The cache is keyed by a word's character ids (so two strings with the same ids, e.g. two
tokens cut to the same first 48 bytes, share an entry, exactly as they share a vector)
and holds the vectors in one preallocated tensor of `max_words` rows (on the CPU, a row's
memory becomes resident when it is first used); the least recently used words are
evicted first.

Correctness rules, enforced by `BiLM`:
- The cache is only used when the char CNN is not being trained: none of its parameters
  has `requires_grad`, or the biLM is in eval mode under `torch.no_grad` (inference, a
  downstream task training its scalar mix over a frozen or partly frozen biLM, an
  evaluation between fine-tuning steps). While the char CNN trains, every word is
  recomputed.
- Entries are dropped whenever the char CNN's parameters change: the cache remembers a
  fingerprint of them (each tensor's identity, storage and in-place version counter,
  which every optimizer step, `load_state_dict`, `.to()` and weight import changes, and
  a checksum of its values, which also catches edits through `.data`) and the compute
  dtype (autocast), and starts afresh when it differs.
- A hit returns the same value a miss computes, up to the rounding of a batched
  convolution (tested at atol 1e-6 against the uncached model).

A model under `torch.compile` looks its words up outside the compiled graph (a graph
break), under `torch.inference_mode` and `torch.no_grad` alike.

Thread-safe (one lock per cache); pickling and `copy.deepcopy` keep the settings and
drop the entries.
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
"""Default bound, in word types: ~100 MB of float32 for the original model
(`projection_dim` 512), ~25 MB for the shipped default model (128)."""

_PADDING_ID = PADDING_CHARACTER + CHAR_ID_OFFSET


class TokenCache:
    """LRU map from a word's char ids to its layer-0 vector.

    Args:
        max_words: Most word types kept (> 0). Memory is `max_words * projection_dim`
            values of the compute dtype at most, resident as the cache fills (on the CPU).

    Attributes:
        hits, misses: Word lookups answered from the cache / computed, since the last
            `clear()` or `reset_stats()` (distinct words per batch, not positions).
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
        """hits / (hits + misses); 0.0 before any lookup."""
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
        """Vectors for distinct words: cached rows where present, `compute` for the rest.

        The cache empties itself first whenever `compute`'s parameters or the autocast
        dtype differ from those of the cached vectors (`parameter_fingerprint`), so it
        never serves a vector of older weights.

        Args:
            words: Distinct char-id rows (e.g. from `torch.unique(..., dim=0)`).
            compute: The char CNN: [n, chars] int64 -> [n, P].

        Returns:
            [num_words, P] on the device and in the dtype that `compute` returns.

        Shape:
            words: [num_words, chars] int64 -> [num_words, P]
        """
        if torch.compiler.is_compiling():
            # Inside `torch.compile(model)`: the lookup runs in Python, out of the graph. Its
            # numpy keys and its table, written outside inference mode, are state across
            # calls, and traced they became guards that failed under `torch.inference_mode`.
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
        """Insert `len(keys) <= max_words` new rows, evicting least recently used words.

        The table is always an ordinary tensor, even when filled under
        `torch.inference_mode` (an inference tensor could not be updated in place by a
        later call outside it, e.g. a training step after `embed`).
        """
        with torch.inference_mode(False):
            self._store_rows(keys, vectors.detach())

    def _store_rows(self, keys: list[bytes], vectors: torch.Tensor) -> None:
        table = self._table
        if table is None or table.dtype != vectors.dtype or table.device != vectors.device:
            # All `max_words` rows at once, never grown: `new_empty` writes nothing, so on
            # the CPU a row's memory becomes resident only when a word is stored in it
            # (rows are used in order). Growing by doubling instead held the old and the
            # new table at once, a step in the peak memory of a long run at every growth.
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
    """One hashable key per char-id row: its int16 bytes (ids are < 262) up to the last
    id that is not padding. Every row ends in padding after its end-of-word id, so this
    is still one key per row, and a typical key is 20 bytes instead of 100 (a full cache
    holds 50,000 of them)."""
    rows = np.ascontiguousarray(words.detach().to("cpu", torch.int16).numpy())
    if rows.size == 0:
        return [row.tobytes() for row in rows]
    real = rows != _PADDING_ID
    ends = rows.shape[1] - np.argmax(real[:, ::-1], axis=1)  # one past the last non-padding id
    return [row[:end].tobytes() for row, end in zip(rows, ends.tolist())]


def parameter_fingerprint(parameters: Iterable[torch.Tensor], dtype: torch.dtype | None) -> tuple:
    """What `TokenCache` compares to know that cached vectors are still valid.

    Per parameter: its identity, storage, device and in-place version counter (changed
    by optimizer steps, `load_state_dict`, `.to()`, weight import and any in-place
    operation on the parameter itself), and a float64 sum of its values plus of every
    97th value, which also notices in-place edits through `.data`, which the version
    counter does not see. The sums cost one pass over the char CNN's weights per batch
    (a few ms for the original model, whose batches take seconds).
    """
    parameters = list(parameters)
    with torch.no_grad():
        sums = tuple(
            x for p in parameters for x in (float64_sum(p), float(p.reshape(-1)[::97].sum(dtype=torch.float64)))
        )
    return (dtype, sums) + tuple((id(p), p.data_ptr(), p._version, p.device) for p in parameters)


_SUM_BLOCK = 2**20


def float64_sum(tensor: torch.Tensor) -> float:
    """The sum of a tensor's values, accumulated in float64, `_SUM_BLOCK` values at a time.

    `tensor.sum(dtype=torch.float64)` first makes a float64 copy of the whole tensor on
    the CPU (128 MB for a 64 MB weight); blocks bound that copy at 8 MB.
    """
    flat = tensor.detach().reshape(-1)
    return sum(float(block.sum(dtype=torch.float64)) for block in flat.split(_SUM_BLOCK))
