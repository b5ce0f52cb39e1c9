"""Element-wise kernels of the training step, fused by `torch.compile` where it can build them.

A training step of the biLM runs a few dozen element-wise operators per LSTM step and
direction (the gates' sigmoids and tanhs, the cell update, their derivatives). Run one
by one, each reads and writes its [2, rows, 4D] operands again and pays a launch; on a
2-core CPU that was most of a bf16 training step (`benchmarks/bench_train.py`). Compiled
by TorchInductor (`torch.compile`, which generates one C++/OpenMP loop per function on
the CPU and one Triton kernel on CUDA), each function here becomes one pass over its
operands. The compiled code computes the same float32 expressions, so it agrees with
the eager operators up to float rounding (`tests/core/test_paired_bptt.py`).

Compilation needs a C++ compiler on the CPU (Triton on CUDA). Where it cannot build a
kernel, that call warns (once per process) and every fused function, this one and those
not built yet, runs on torch's eager operators from then on: the same numbers, slower.
`ELMO_COMPILE=0` in the environment chooses the eager operators from the start (e.g. to
debug, or where compiling is not wanted); `1`, empty or unset compiles; any other value is
refused (`ELMO_COMPILE=false` would otherwise compile).

torch keeps what it compiles in its compile cache folder (`TORCHINDUCTOR_CACHE_DIR`, by
default `torchinductor_<user>` in the temporary folder), and creates that folder when it
loads its compiler, which every torch optimizer does, compiled kernels or not. The `elmo`
commands check the folder first (`use_writable_compile_cache`): where it cannot be written
(a read-only file system, a path below a file), a run warns once and keeps the cache in a
temporary folder of its own instead of stopping on a bare `[Errno 30]`.
"""

from __future__ import annotations

import atexit
import functools
import getpass
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from ..model.errors import ElmoError

__all__ = [
    "CACHE_VARIABLE",
    "compile_cache_folder",
    "compile_enabled",
    "fused_kernel",
    "fused_rowwise",
    "use_writable_compile_cache",
]

CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
"""The environment variable that names torch's compile cache folder."""

F = TypeVar("F", bound=Callable[..., Any])

_BUILD_FAILED: list[str] = []  # the first kernel torch.compile could not build, once one failed


def compile_enabled() -> bool:
    """False when `ELMO_COMPILE=0` asks for torch's eager operators; True for 1, empty or unset.

    Raises:
        ValueError: for any other value of `ELMO_COMPILE` (the `elmo` command checks it
            before any work, as `ELMO_THREADS`).
    """
    value = os.environ.get("ELMO_COMPILE", "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(
            f"ELMO_COMPILE must be 0 (torch's eager operators) or 1 (the fused kernels, the default); got {value!r}."
        )
    return value != "0"


def compile_cache_folder() -> Path:
    """torch's compile cache folder: `TORCHINDUCTOR_CACHE_DIR`, else torch's default
    (`torchinductor_<user>` in the temporary folder), as `torch._inductor` finds it."""
    folder = os.environ.get(CACHE_VARIABLE)
    if folder is None:
        try:
            user = getpass.getuser()
        except (KeyError, ModuleNotFoundError, OSError):
            user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
        folder = os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    return Path(os.path.abspath(folder))


def use_writable_compile_cache() -> None:
    """For the `elmo` commands, which own their process: a compile cache folder they can write.

    torch creates its compile cache folder when it loads its compiler (every torch
    optimizer does, even with `ELMO_COMPILE=0`), and stops with a bare OSError where it
    cannot. When the folder cannot be created or written, this points
    `TORCHINDUCTOR_CACHE_DIR` at a new temporary folder, deleted when the process ends, and
    warns once (`RuntimeWarning`) naming the folder and the ways out; with `ELMO_COMPILE=0`
    nothing is compiled, and the switch is silent.

    Raises:
        ElmoError: if no temporary folder can be made either (one line: which folder, and
            how to point `TORCHINDUCTOR_CACHE_DIR` at a writable one).
    """
    folder = compile_cache_folder()
    problem = _unwritable(folder)
    if problem is None:
        return
    try:
        spare = tempfile.mkdtemp(prefix="elmo-compile-cache-")
    except OSError as err:
        raise ElmoError(
            f"the compile cache folder {folder} ({CACHE_VARIABLE}) is not writable ({problem}), and no temporary "
            f"folder can be made instead ({err.strerror or err}). torch needs one to train, even with ELMO_COMPILE=0: "
            f"set {CACHE_VARIABLE} to a writable folder (e.g. one inside --out)."
        ) from None
    atexit.register(shutil.rmtree, spare, ignore_errors=True)
    os.environ[CACHE_VARIABLE] = spare
    if compile_enabled():
        warnings.warn(
            f"the compile cache folder {folder} ({CACHE_VARIABLE}) is not writable ({problem}); this run keeps "
            f"torch's compiled kernels in the temporary folder {spare}, deleted at the end. Set {CACHE_VARIABLE} "
            "to a writable folder to keep them between runs, or ELMO_COMPILE=0 to train without compiling.",
            RuntimeWarning,
            stacklevel=2,
        )


def _unwritable(folder: Path) -> str | None:
    """Why `folder` cannot be created or written (the OS's words), or None when it can."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return f"{err.strerror or err}" if err.errno else str(err)
    return None


def fused_kernel(fn: F) -> F:
    """`fn` compiled by `torch.compile` on first use, or `fn` itself where that fails.

    The compiled function specializes on its inputs' shapes and becomes dynamic in a
    dimension once it has seen two sizes of it (torch's automatic dynamic shapes), so a
    training run compiles each kernel about twice, a few seconds each.

    Raises:
        Whatever `fn` raises for its inputs; a failure to *build* the kernel (at the first
        call, or at a later one whose new shape makes torch compile it again) is not
        raised but warned about once per process (`RuntimeWarning`), and `fn` and every
        other fused function run on the eager operators from then on (a missing compiler
        fails them all alike: one warning, not one per kernel, and no time spent on
        builds that cannot succeed).
    """
    return _compiled_or_eager(fn)  # type: ignore[return-value]


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


def _compiled_or_eager(fn: Callable[..., Any], eager: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """A caller that runs `fn` compiled (built on first use), or `eager` (default `fn`)
    while compiling is off and once any build has failed."""
    run_eager = fn if eager is None else eager
    compiled: list[Callable[..., Any]] = []  # torch.compile(fn), made on first use

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        if _BUILD_FAILED or not compile_enabled():
            return run_eager(*args)
        if not compiled:
            compiled.append(torch.compile(fn))
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
