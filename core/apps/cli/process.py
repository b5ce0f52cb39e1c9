"""What the `elmo` commands set up in their own process before any work.

A writable compile cache folder for torch (every command), and room in oneDNN's kernel cache
(`elmo train`). Both are process-wide settings, so the library never makes them: only the
commands, which own their process, and `benchmarks/bench_train.py`.
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
    """Point `TORCHINDUCTOR_CACHE_DIR` at a temporary folder where torch's cannot be written.

    torch creates the folder when it loads its compiler, as every torch optimizer does, and
    stops with a bare OSError where it cannot. The temporary folder is deleted at exit. A
    `RuntimeWarning` names the ways out, unless `ELMO_COMPILE=0` (nothing is compiled).

    Raises:
        ElmoError: if no temporary folder can be made either.
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
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return f"{err.strerror or err}" if err.errno else str(err)
    return None


def reserve_kernel_cache(capacity: int = KERNEL_CACHE_CAPACITY) -> bool:
    """Room for `capacity` kernels in oneDNN's cache, unless `ONEDNN_PRIMITIVE_CACHE_CAPACITY` is set.

    A training run meets more shapes than the default cache holds (the LSTM loop has one per
    number of rows still running), and an evicted kernel is created again at each use. oneDNN
    reads the variable at its first kernel: call this before any matrix product.

    Returns:
        True if the variable was set here, False if it was set before.
    """
    if environment_value("ONEDNN_PRIMITIVE_CACHE_CAPACITY") is not None:
        return False
    os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(capacity)
    return True
