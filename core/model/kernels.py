"""Fused element-wise kernels and bucketed row counts, for the gradient paths and bf16 inference.

`fused_kernel` compiles a function with `torch.compile` into one pass over its operands.
If a build fails, one warning, then torch's eager operators: the same numbers, slower.
`ELMO_COMPILE=0` chooses them from the start. `bucket_rows` pads row counts to few
sizes, so that oneDNN reuses its per-shape bf16 kernels across training batches.
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
    """False when `ELMO_COMPILE=0` asks for torch's eager operators.

    Raises:
        ElmoError: for a value other than 0, 1 or empty.
    """
    return bool(environment_value("ELMO_COMPILE"))


def compile_cache_folder() -> Path:
    """torch's compile cache folder: `TORCHINDUCTOR_CACHE_DIR`, else torch's default in the temporary folder."""
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

    `dynamic=True` compiles one kernel for every shape. None: a dimension turns dynamic
    once it has seen two sizes.

    Raises:
        Whatever `fn` raises. A failed build warns once, and every fused function runs eagerly from then on.
    """
    return _compiled_or_eager(fn, dynamic=dynamic)  # type: ignore[return-value]


def fused_rowwise(block_rows: int) -> Callable[[F], F]:
    """`fused_kernel` for a function of rows (first axis) that writes into its last argument.

    Eager, it runs `block_rows` rows at a time, so its intermediates stay a block's size.
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
    """`n` rounded up to one of 16 sizes per power of two (padding under n / 16, e.g. 141 -> 144).

    Raises:
        ValueError: for n < 0.
    """
    if n < 0:
        raise ValueError(f"a row count must be >= 0; got {n}.")
    unit = 1 << max(0, n.bit_length() - 1 - (BUCKETS_PER_OCTAVE.bit_length() - 1))  # 2**(floor(log2 n) - 4)
    return -(-n // unit) * unit


def pad_rows(x: torch.Tensor, rows: int, value: float = 0) -> torch.Tensor:
    """`x` with rows of `value` appended up to `rows`. The padding's gradient is dropped.

    Raises:
        ValueError: if `rows` < n.
    """
    n = x.shape[0]
    if rows < n:
        raise ValueError(f"cannot pad {n} rows to {rows}: rows must be >= {n}.")
    if rows == n:
        return x
    return torch.cat([x, x.new_full((rows - n, *x.shape[1:]), value)])
