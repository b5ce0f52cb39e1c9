"""Kernels of the gradient paths: element-wise functions fused by `torch.compile`, and bucketed row counts.

The char CNN's training path (`elmo_core.model.char_cnn_training`), the paired recurrence's
written-out backward (`elmo_core.model.recurrence.paired_bptt`) and the trainer's softmax share them.

## Fused element-wise kernels

A training step of the biLM runs a few dozen element-wise operators per LSTM step and
direction (the gates' sigmoids and tanhs, the cell update, their derivatives). Run one
by one, each reads and writes its [2, rows, 4D] operands again and pays a launch; on a
2-core CPU that was most of a bf16 training step (`benchmarks/bench_train.py`). Compiled
by TorchInductor (`torch.compile`, which generates one C++/OpenMP loop per function on
the CPU and one Triton kernel on CUDA), each function here becomes one pass over its
operands. The compiled code computes the same float32 expressions, so it agrees with
the eager operators up to float rounding (`tests/core/model/recurrence/test_paired_bptt.py`).

Compilation needs a C++ compiler on the CPU (Triton on CUDA). Where it cannot build a
kernel, that call warns (once per process) and every fused function, this one and those
not built yet, runs on torch's eager operators from then on: the same numbers, slower.
`ELMO_COMPILE=0` in the environment chooses the eager operators from the start (e.g. to
debug, or where compiling is not wanted); `1`, empty or unset compiles; any other value is
refused (`ELMO_COMPILE=false` would otherwise compile).

## Bucketed row counts

Row counts of a training step's matrix products are rounded up so that their kernels are reused.

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
(the shapes: `tests/core/model/test_kernels_buckets.py`; the values: the softmax's, char CNN's and paired
recurrence's own tests, at row counts that are padded).

torch keeps what it compiles in its compile cache folder (`TORCHINDUCTOR_CACHE_DIR`); the
`elmo` commands make sure it is writable first (`elmo_core.apps.cli.process`).
"""

from __future__ import annotations

import functools
import getpass
import os
import re
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from .environment import environment_value

CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
"""The environment variable that names torch's compile cache folder."""

F = TypeVar("F", bound=Callable[..., Any])

_BUILD_FAILED: list[str] = []  # the first kernel torch.compile could not build, once one failed


def compile_enabled() -> bool:
    """False when `ELMO_COMPILE=0` asks for torch's eager operators; True for 1, empty or unset.

    Raises:
        ElmoError: for any other value of `ELMO_COMPILE` (`elmo_core.model.environment`).
    """
    return bool(environment_value("ELMO_COMPILE"))


def compile_cache_folder() -> Path:
    """torch's compile cache folder: `TORCHINDUCTOR_CACHE_DIR`, else torch's default
    (`torchinductor_<user>` in the temporary folder), as `torch._inductor` finds it."""
    folder = environment_value(CACHE_VARIABLE)
    if folder is None:
        try:
            user = getpass.getuser()
        except (KeyError, ModuleNotFoundError, OSError):
            user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
        folder = os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    return Path(os.path.abspath(folder))


def fused_kernel(fn: F, *, dynamic: bool | None = None) -> F:
    """`fn` compiled by `torch.compile` on first use, or `fn` itself where that fails.

    The compiled function specializes on its inputs' shapes and becomes dynamic in a
    dimension once it has seen two sizes of it (torch's automatic dynamic shapes), so a
    training run compiles each kernel about twice, a few seconds each. `dynamic=True`
    compiles one kernel for every shape from the start (torch.compile's `dynamic`), for
    a function called with many shapes in one pass (e.g. one per char CNN bank).

    Raises:
        Whatever `fn` raises for its inputs; a failure to *build* the kernel (at the first
        call, or at a later one whose new shape makes torch compile it again) is not
        raised but warned about once per process (`RuntimeWarning`), and `fn` and every
        other fused function run on the eager operators from then on (a missing compiler
        fails them all alike: one warning, not one per kernel, and no time spent on
        builds that cannot succeed).
    """
    return _compiled_or_eager(fn, dynamic=dynamic)  # type: ignore[return-value]


def fused_rowwise(block_rows: int) -> Callable[[F], F]:
    """`fused_kernel` for a function of rows, every argument a tensor with the rows on its
    first axis, that writes its result into its last argument and returns nothing (e.g.
    a log-sum-exp over the columns of each row).

    Compiled, it runs once over all rows: one pass that never holds more than a row's
    intermediates. On torch's eager operators it runs on blocks of `block_rows` rows (the
    wrapper's `block_rows` attribute), so that its float32 intermediates stay the size of
    a block (a [rows, classes] softmax would otherwise be materialized whole).
    """

    def wrap(fn: F) -> F:
        def in_blocks(*args: torch.Tensor) -> None:
            block = call.block_rows  # type: ignore[attr-defined]
            for start in range(0, args[0].shape[0], block):
                fn(*(a[start : start + block] for a in args))

        call = _compiled_or_eager(fn, eager=in_blocks)  # a failed build's call runs in blocks too
        call.block_rows = block_rows  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap


def _compiled_or_eager(
    fn: Callable[..., Any], eager: Callable[..., Any] | None = None, dynamic: bool | None = None
) -> Callable[..., Any]:
    """A caller that runs `fn` compiled (built on first use), or `eager` (default `fn`)
    while compiling is off and once any build has failed."""
    run_eager = fn if eager is None else eager
    compiled: list[Callable[..., Any]] = []  # torch.compile(fn), made on first use

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        if _BUILD_FAILED or not compile_enabled():
            return run_eager(*args)
        if not compiled:
            compiled.append(torch.compile(fn, dynamic=dynamic))
        try:  # every call: a new shape makes torch compile the kernel again, which can fail too
            return compiled[0](*args)
        except Exception as error:  # noqa: BLE001  (no compiler, unsupported platform, ...)
            _BUILD_FAILED.append(fn.__qualname__)
            if isinstance(error, OSError):  # a file of the compile cache could not be written
                fix = f"Set {CACHE_VARIABLE} to a writable folder (now {compile_cache_folder()}) for the fused kernels"
            else:
                fix = "Install a C++ compiler (gcc or clang) for the fused kernels"
            warnings.warn(
                f"torch.compile could not build the fused kernel {fn.__qualname__} "
                f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
                "training goes on with torch's eager operators: the same numbers, slower. "
                f"{fix}, or set ELMO_COMPILE=0 to silence this.",
                RuntimeWarning,
                stacklevel=2,
            )
            return run_eager(*args)

    return call


BUCKETS_PER_OCTAVE = 16
"""Row counts per power of two that `bucket_rows` rounds to (2**4: at most 1/16 padding)."""


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
