"""The parts a biLM runs with on this machine: the recurrence with the thread rule, the
layer-0 cache and the char CNN's training path. None changes a value beyond rounding.
"""

from __future__ import annotations

from typing import Any

from ..model.char_cnn_training import encode_for_training
from ..model.checks import check_setting
from ..model.recurrence import Recurrence
from .threads import THREAD_RULE, watch_forks
from .token_cache import DEFAULT_TOKEN_CACHE_WORDS, TokenCache

__all__ = ["serving_parts"]


def serving_parts(*, recurrence: str = "auto", token_cache_words: int = DEFAULT_TOKEN_CACHE_WORDS) -> dict[str, Any]:
    """The keyword arguments that build an `Elmo` or `BiLM` with the runtime's parts.

    `recurrence` is one of `RECURRENCES`. `token_cache_words` bounds the `TokenCache` (0: none).

    Raises:
        ValueError: for an unknown recurrence or a bad `token_cache_words`.
    """
    check_setting("token_cache_words", token_cache_words, minimum=0, meaning="0 switches the cache off")
    parts = {
        "recurrence": Recurrence(recurrence, THREAD_RULE),  # one per model: captured graphs are per model
        "token_cache": TokenCache(token_cache_words) if token_cache_words else None,
        "char_cnn_training": encode_for_training,
    }
    watch_forks()  # a process forked after this load can run the model (elmo_core.runtime.threads)
    return parts
