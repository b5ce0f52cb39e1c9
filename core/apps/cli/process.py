"""What the `elmo` commands set up in their own process before any work: a writable compile
cache folder for torch (every command), and room in oneDNN's kernel cache (`elmo train`).

Both are process-wide settings, so the library never makes them: only the commands,
which own their process, and `benchmarks/bench_train.py`.

torch keeps what it compiles in its compile cache folder (`TORCHINDUCTOR_CACHE_DIR`, by
default `torchinductor_<user>` in the temporary folder), and creates that folder when it
loads its compiler, which every torch optimizer does, compiled kernels or not. The `elmo`
commands check the folder first (`use_writable_compile_cache`): where it cannot be written
(a read-only file system, a path below a file), a run warns once and keeps the cache in a
temporary folder of its own instead of stopping on a bare `[Errno 30]`.

A training step computes its large products over bucketed row counts
(`elmo_core.model.kernels.bucket_rows`), so that bf16 products on the CPU reuse oneDNN's
kernels. A long run still meets more shapes than oneDNN's cache holds: the per-step products of the
LSTM loop have one shape per number of rows still running, and with the bucketed large
ones a run of the default shape created 583 kernels in its first 80 steps, still growing.
Once the shapes outnumber the cache, it evicts the kernels it needs next, and each
product pays for its kernel's creation again. `elmo train` therefore calls
`reserve_kernel_cache()` first: oneDNN's `ONEDNN_PRIMITIVE_CACHE_CAPACITY` at 4,096 kernels
unless the user set it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import warnings
from pathlib import Path

from ...model.environment import environment_value
from ...model.errors import ElmoError
from ...model.kernels import CACHE_VARIABLE, compile_cache_folder, compile_enabled

KERNEL_CACHE_CAPACITY = 4096
"""oneDNN kernels `reserve_kernel_cache` makes room for (oneDNN's default: 1,024)."""


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


def reserve_kernel_cache(capacity: int = KERNEL_CACHE_CAPACITY) -> bool:
    """Room for `capacity` kernels in oneDNN's cache, unless `ONEDNN_PRIMITIVE_CACHE_CAPACITY`
    is already set (the user's value is kept; empty means unset).

    oneDNN reads the variable once, when it creates its first kernel: call this before any
    matrix product of the process (`elmo train` and `benchmarks/bench_train.py` do, first
    thing). A process-wide setting: for programs that own their process, as
    `elmo_core.runtime.memory.use_heap_for_every_block`.

    Returns:
        True if the variable was set here, False if it was set before.
    """
    if environment_value("ONEDNN_PRIMITIVE_CACHE_CAPACITY") is not None:
        return False
    os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(capacity)
    return True
