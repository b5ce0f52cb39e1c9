"""Lazily loaded state, loaded once however many threads ask for it at once.

A server that starts under traffic sends many first requests at the same moment. Each
object of ours that loads something on first use (a spaCy component's biLM, a tokenizer's
splitter, a hand-built model's runtime) takes its own lock for the load: the first caller
loads, the others wait and then find it loaded.

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
    """The lock that `owner`'s first-use loads hold.

    One lock per object, kept as long as the object lives, so loads of different objects
    do not wait for each other. Re-entrant: a load may reach another lazily loaded part of
    the same object.

    Args:
        owner: The object whose state is loaded; it must take weak references.
    """
    with _guard:
        return _locks.setdefault(owner, threading.RLock())
