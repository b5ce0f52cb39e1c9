"""Keeping the resident size of a long run flat: hand freed heap memory back to the OS.

Why this is needed. Every biLM batch has its own shapes (rows, tokens, distinct words,
and, inside the LSTM loop, the rows still running at each step), so every batch
allocates and frees tensors of sizes no earlier batch used. glibc serves a large block
with its own `mmap` and returns it to the OS on `free`, but after freeing such a block it
raises its mmap threshold to that block's size (up to 32 MiB), so later blocks of up to
that size come from the heap instead. The heap keeps freed space for reuse, and with
ever-changing sizes the holes between live blocks rarely fit the next request: the
resident size grows with the number of batches, although nothing stays alive. Without
this module, with the shipped model and `elmo embed --layers top`: 0.74 GB after
151k tokens of enwiki text, 0.93 GB after 319k, 1.39 GB after the same 319k three times
(0.67 GB with `MALLOC_MMAP_THRESHOLD_=65536`). Pretraining grew from 1.1 to 3.0 GB the
same way.

The fix has two parts, both here:

- Every face (the `embed` functions and so `elmo embed`, the spaCy component's `pipe`,
  the Hugging Face feature-extraction pipeline, and the pretraining loop) calls
  `release_free_memory()` after each batch (the pretraining loop every `RELEASE_EVERY`
  = 25 steps): glibc's `malloc_trim(0)`, which returns every whole free page of every
  heap arena to the OS (`madvise(MADV_DONTNEED)`). Live memory is untouched and no
  allocator setting changes, so it is safe inside a user's own program. This keeps the
  resident size flat over any number of batches.
- The `elmo` command, which owns its process (also under torchrun), calls
  `use_mmap_for_large_blocks()` once at start: glibc's `mallopt(M_MMAP_THRESHOLD)` with
  a fixed 256 kB, which also switches the raising of the threshold off. Every tensor of
  256 kB or more then gets its own mapping and goes back to the OS when freed, so the
  shapes of one batch cannot fragment the heap either, and the peak inside a batch is
  close to what is alive. `elmo train` keeps every block in the heap instead
  (`use_heap_for_every_block`): a training step allocates far more than an inference
  batch, afresh each step. A 256 kB threshold with a trim after every step trains slower
  than glibc's largest threshold (32 MiB), and that slower than
  the heap alone (`benchmarks/bench_train.py --allocator`, docs/results/speed-memory.md).
  The price is memory: the resident size of an hour's training, sampled each minute,
  moved between 1.1 and 3.2 GB (a sawtooth between trims, not growing), against
  1.3-1.4 GB with the 32 MiB threshold. A library does not change a process-wide
  allocator setting of the program it runs in, so the faces used from Python do not
  call this; a user who wants it can.

`benchmarks/bench_memory.py` measures the peaks (`elmo embed` on 100k and on 1M tokens).

A process that loads, uses and drops models many times (per tenant, per request, in a
test suite) frees each model's tensors, but their heap stays with the process in the
same way. A model that sits in a reference cycle (as a spaCy pipeline does) is freed by
Python's cyclic collector, at a moment no face chooses. So every loader marks the models
it builds (`release_when_collected`): once such a model has been
freed, the end of the next garbage collection hands the heap back. Nothing runs for
programs that never build a model, and nothing runs per collection beyond a flag check.

On systems without glibc (macOS, Windows, musl) it does nothing: their allocators
return memory differently.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading
import weakref

__all__ = ["release_free_memory"]


MMAP_THRESHOLD = 256 * 1024
"""Bytes from which `use_mmap_for_large_blocks` makes glibc map each block on its own."""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -3, -4  # glibc's mallopt parameter numbers (malloc.h)
_GLIBC_MMAP_MAX = 65536  # glibc's default M_MMAP_MAX


def _load_glibc(name: str, argtypes: list):  # noqa: ANN202
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        function = getattr(libc, name)
    except (OSError, AttributeError, TypeError):  # not glibc
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


_MALLOC_TRIM = _load_glibc("malloc_trim", [ctypes.c_size_t])
_MALLOPT = _load_glibc("mallopt", [ctypes.c_int, ctypes.c_int])


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS (glibc `malloc_trim(0)`; no-op elsewhere).

    Safe to call from any thread at any time; live objects are never affected.

    Returns:
        True if memory was handed back, False if nothing was (or no glibc).
    """
    if _MALLOC_TRIM is None:
        return False
    return bool(_MALLOC_TRIM(0))


def release_when_collected(model: object) -> None:
    """Hand the heap back to the OS once `model` has been freed (see the module docstring).

    When `model` is freed, a flag is set: its tensors are freed just after that, so the
    trim waits for the end of the next garbage collection (the one that freed a model in a
    reference cycle, or the next of any generation), which runs `release_free_memory()`.
    The collector's callback is installed on the first call, so a program that builds no
    model gets none. Marking a model twice marks it once.
    """
    if _MALLOC_TRIM is None or model in _MARKED:
        return
    _MARKED.add(model)
    weakref.finalize(model, _FREED.set)
    with _INSTALL_LOCK:
        if _after_collection not in gc.callbacks:
            gc.callbacks.append(_after_collection)


_MARKED: weakref.WeakSet[object] = weakref.WeakSet()
_FREED = threading.Event()  # a marked model was freed since the last trim
_INSTALL_LOCK = threading.Lock()


def _after_collection(phase: str, info: dict[str, int]) -> None:
    if phase == "stop" and _FREED.is_set():
        _FREED.clear()
        release_free_memory()


def use_mmap_for_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Make glibc give every block of `threshold` bytes or more its own mapping, for good.

    Changes how the whole process allocates (see the module docstring): for programs
    that own their process, such as the `elmo` command. Blocks that size are then
    returned to the OS when freed and never fragment the heap; the cost is a system call
    and fresh pages per such block.

    Returns:
        True if the setting was applied, False without glibc.
    """
    if _MALLOPT is None:
        return False
    return bool(_MALLOPT(_M_MMAP_THRESHOLD, int(threshold)))


def use_heap_for_every_block(enabled: bool = True) -> bool:
    """Make glibc serve every block from its heap, however large (`elmo train`), or undo it.

    glibc maps a block over its largest mmap threshold (32 MiB)
    on its own whatever the setting, so a training step's largest tensors (the softmax's
    [predictions, classes] logits, 58 MB in bf16 for a 4,096-position batch of the default
    shape; the LSTMs' [2, steps, rows, 4D] gate inputs) would have their pages faulted in
    afresh every step (`benchmarks/bench_train.py` measures the cost, docs/results/speed-memory.md).
    `mallopt(M_MMAP_MAX, 0)` stops that; `M_TRIM_THRESHOLD` at 1 GiB keeps a `free` from
    handing the top of the heap back between steps, which the trainer does every
    `RELEASE_EVERY` steps instead (`release_free_memory`). For programs that own their
    process, as `use_mmap_for_large_blocks`.

    Args:
        enabled: False restores glibc's defaults for both settings.

    Returns:
        True if the settings were applied, False without glibc.
    """
    if _MALLOPT is None:
        return False
    mmap_max, trim = (0, 1 << 30) if enabled else (_GLIBC_MMAP_MAX, 128 * 1024)
    return bool(_MALLOPT(_M_MMAP_MAX, mmap_max)) and bool(_MALLOPT(_M_TRIM_THRESHOLD, trim))
