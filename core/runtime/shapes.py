"""Row counts of a training step's matrix products, rounded up so that their kernels are reused.

On a CPU, torch runs bf16 matrix products through oneDNN, which generates a kernel for
each new shape (its "primitive") and keeps the last 1,024 in a cache. Every training
batch has its own number of positions, distinct words and predictions, so nearly every
large product of a step would have a shape no earlier step had. With the default shape on
a CPU with AMX, most of a step's products are then created anew, and creating them costs
a large part of what running them does (`ONEDNN_VERBOSE=2` shows it;
`benchmarks/bench_train.py` draws fresh batches for each repeat, docs/results/speed-memory.md).
float32 products go to MKL, which creates nothing per shape.

The training path therefore computes its large products over rows padded up to
`bucket_rows(n)`: 16 sizes per power of two, so at most 6.25% of the rows are padding
(3% on average) and a run meets a few dozen row counts per product, each created once.
The padding rows hold zeros (or a padding word) and receive zero gradient, so the values
and gradients of the real rows are those of the unpadded products up to float rounding
(the shapes: `tests/core/test_shapes.py`; the values: the softmax's, char CNN's and paired
recurrence's own tests, at row counts that are padded).

A long run still meets more shapes than oneDNN's cache holds: the per-step products of the
LSTM loop have one shape per number of rows still running, and with the bucketed large
ones a run of the default shape created 583 kernels in its first 80 steps, still growing.
Once the shapes outnumber the cache, it evicts the kernels it needs next, and each
product pays for its kernel's creation again. `elmo train`, which owns its
process, therefore calls `reserve_kernel_cache()` first: oneDNN's
`ONEDNN_PRIMITIVE_CACHE_CAPACITY` at 4,096 kernels unless the user set it.
"""

from __future__ import annotations

import os

import torch

__all__ = ["BUCKETS_PER_OCTAVE", "KERNEL_CACHE_CAPACITY", "bucket_rows", "pad_rows", "reserve_kernel_cache"]

BUCKETS_PER_OCTAVE = 16
"""Row counts per power of two that `bucket_rows` rounds to (2**4: at most 1/16 padding)."""

KERNEL_CACHE_CAPACITY = 4096
"""oneDNN kernels `reserve_kernel_cache` makes room for (oneDNN's default: 1,024)."""


def bucket_rows(n: int) -> int:
    """`n` rounded up to a multiple of 2**(floor(log2 n) - 4): the next of 16 sizes per power of two.

    Counts up to 32 stay as they are; above, the padding is less than n / 16 (e.g. 7,060
    -> 7,168, 4,095 -> 4,096, 141 -> 144).

    Raises:
        ValueError: for n < 0.
    """
    if n < 0:
        raise ValueError(f"a row count must be >= 0; got {n}.")
    unit = 1 << max(0, n.bit_length() - 1 - (BUCKETS_PER_OCTAVE.bit_length() - 1))  # 2**(floor(log2 n) - 4)
    return -(-n // unit) * unit


def pad_rows(x: torch.Tensor, rows: int, value: float = 0) -> torch.Tensor:
    """`x` with rows of `value` appended along dim 0 up to `rows` (`x` itself when it has them).

    Differentiable: the padding rows' gradient is dropped.

    Shape: x [n, ...] -> [rows, ...]

    Raises:
        ValueError: if `rows` < n.
    """
    n = x.shape[0]
    if rows < n:
        raise ValueError(f"cannot pad {n} rows to {rows}: rows must be >= {n}.")
    if rows == n:
        return x
    return torch.cat([x, x.new_full((rows - n, *x.shape[1:]), value)])


def reserve_kernel_cache(capacity: int = KERNEL_CACHE_CAPACITY) -> bool:
    """Room for `capacity` kernels in oneDNN's cache, unless `ONEDNN_PRIMITIVE_CACHE_CAPACITY`
    is already set (the user's value is kept).

    oneDNN reads the variable once, when it creates its first kernel: call this before any
    matrix product of the process (`elmo train` and `benchmarks/bench_train.py` do, first
    thing). A process-wide setting: for programs that own their process, as
    `elmo_core.runtime.memory.use_heap_for_every_block`.

    Returns:
        True if the variable was set here, False if it was set before.
    """
    if "ONEDNN_PRIMITIVE_CACHE_CAPACITY" in os.environ:
        return False
    os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(capacity)
    return True
