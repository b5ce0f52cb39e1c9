"""Keeping the resident size of a long run flat: hand freed heap memory back to the OS.

Every batch has new shapes, and glibc's heap keeps their freed holes, so the resident
size would grow with every batch. glibc only. See docs/guides/memory.md.
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
    """Return the heap's free pages to the OS (glibc `malloc_trim(0)`). Safe from any thread.

    Returns:
        True if memory was handed back.
    """
    if _MALLOC_TRIM is None:
        return False
    return bool(_MALLOC_TRIM(0))


def release_when_collected(model: object) -> None:
    """Hand the heap back at the end of the garbage collection that frees `model` (a spaCy pipeline is in a cycle)."""
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
    """Make glibc map every block of `threshold` bytes or more on its own, so it goes back to the OS when freed.

    Process-wide: for programs that own their process, as the `elmo` command does.
    Returns False without glibc.
    """
    if _MALLOPT is None:
        return False
    return bool(_MALLOPT(_M_MMAP_THRESHOLD, int(threshold)))


def use_heap_for_every_block(enabled: bool = True) -> bool:
    """Make glibc serve every block from its heap (`elmo train`), or undo it with `enabled=False`.

    Else a training step's tensors over 32 MiB are mapped and faulted in afresh each step.
    The trainer trims every `RELEASE_EVERY` steps instead. Process-wide. Returns False without glibc.
    """
    if _MALLOPT is None:
        return False
    mmap_max, trim = (0, 1 << 30) if enabled else (_GLIBC_MMAP_MAX, 128 * 1024)
    return bool(_MALLOPT(_M_MMAP_MAX, mmap_max)) and bool(_MALLOPT(_M_TRIM_THRESHOLD, trim))
