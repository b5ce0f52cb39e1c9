"""Keeping the resident size of a long run flat: hand freed heap memory back to the OS.

Why this is needed. Every biLM batch has its own shapes (rows, tokens, distinct words,
and, inside the LSTM loop, the rows still running at each step), so every batch
allocates and frees tensors of sizes no earlier batch used. glibc serves a large block
with its own `mmap` and returns it to the OS on `free`, but after freeing such a block it
raises its mmap threshold to that block's size (up to 32 MiB), so later blocks of up to
that size come from the heap instead. The heap keeps freed space for reuse, and with
ever-changing sizes the holes between live blocks rarely fit the next request: the
resident size grows with the number of batches, although nothing stays alive. Measured
with the shipped model and `elmo embed --layers top`: 0.74 GB after 151k tokens of
enwiki text, 0.93 GB after 319k, 1.39 GB after the same 319k three times (0.67 GB with
`MALLOC_MMAP_THRESHOLD_=65536`). Pretraining grew from 1.1 to 3.0 GB the same way.

The fix, used by every face (the `embed` functions and `elmo embed`, the spaCy
component's `pipe`, the Hugging Face feature-extraction pipeline, and the pretraining
loop): after each batch, `release_free_memory()` calls glibc's `malloc_trim(0)`, which
returns every whole free page of every heap arena to the OS (`madvise(MADV_DONTNEED)`).
Live memory is untouched, and no process-wide allocator setting is changed (unlike
`mallopt`, which would also change how the rest of the user's program allocates). The
cost is a few milliseconds per batch, most of it the page faults of memory that is
reused afterwards; `benchmarks/bench_memory.py` measures it.

On systems without glibc (macOS, Windows, musl) it does nothing: their allocators
return memory differently.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["release_free_memory"]


def _load_malloc_trim():  # noqa: ANN202
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _load_malloc_trim()


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS (glibc `malloc_trim(0)`; no-op elsewhere).

    Safe to call from any thread at any time; live objects are never affected.

    Returns:
        True if memory was handed back, False if nothing was (or no glibc).
    """
    if _MALLOC_TRIM is None:
        return False
    return bool(_MALLOC_TRIM(0))
