"""Lazily loaded state, loaded once however many threads ask for it at once.

Each lazy part loads so:

    if self._part is None:
        with first_use_lock(self):
            if self._part is None:
                self._part = load()
"""

from __future__ import annotations

import threading
import weakref

_guard = threading.Lock()
_locks: weakref.WeakKeyDictionary[object, threading.RLock] = weakref.WeakKeyDictionary()


def first_use_lock(owner: object) -> threading.RLock:
    """The re-entrant lock of `owner`'s first-use loads, one per object (weakly referenced)."""
    with _guard:
        return _locks.setdefault(owner, threading.RLock())
