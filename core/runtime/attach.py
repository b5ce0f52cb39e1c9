"""Handing a model its runtime: the recurrence path with the thread rule, the layer-0 cache,
the char CNN's training path.

The model (`elmo_core.model`) is the computation alone: a `BiLM` built by itself runs the
step loop with torch's threads and no cache. Every loader and face of this project gives
it the runtime with `attach_runtime` (`load_model_folder`, `load_elmo`, hf_elmo's
`ElmoModel`, the spaCy component, the trainer), and `embed_sentences` does for a model
that has none yet. None of these changes a value: each path equals the step loop up to
float rounding (`elmo_core.model.recurrence`); the cache returns the char CNN's own
vectors (`elmo_core.runtime.token_cache`), and the training path the char CNN's own
function (`elmo_core.model.char_cnn_training`).
"""

from __future__ import annotations

import torch

from ..model.bilm import BiLM
from ..model.char_cnn_training import encode_for_training
from ..model.checks import check_setting
from ..model.recurrence import Recurrence
from .memory import release_when_collected
from .threads import THREAD_RULE, watch_forks
from .token_cache import DEFAULT_TOKEN_CACHE_WORDS, TokenCache

__all__ = ["attach_runtime", "set_recurrence", "set_token_cache"]


def attach_runtime(
    module: torch.nn.Module, *, recurrence: str = "auto", token_cache_words: int = DEFAULT_TOKEN_CACHE_WORDS
) -> torch.nn.Module:
    """Hand every `BiLM` inside `module` a `Recurrence(recurrence)` with the runtime's thread
    rule (`elmo_core.runtime.threads.THREAD_RULE`), a fresh layer-0 cache, and its char CNN
    the training path (`elmo_core.model.char_cnn_training.encode_for_training`).

    Each biLM is also marked so that, once it is dropped and freed, its heap goes back to
    the OS (`elmo_core.runtime.memory.release_when_collected`).

    Args:
        module: An `Elmo`, `BiLM`, `BiLMLanguageModel` or anything containing a `BiLM`.
        recurrence: One of `RECURRENCES` ("auto": see `elmo_core.model.recurrence`).
        token_cache_words: Bound of each biLM's `TokenCache` in word types; 0: no cache.

    Returns:
        `module`, changed in place.

    Raises:
        ValueError: for an unknown recurrence or a bad `token_cache_words`.
    """
    Recurrence(recurrence)  # both settings are checked before any biLM changes
    _check_words(token_cache_words)
    watch_forks()  # a process forked after this load can run the model (elmo_core.runtime.threads)
    for bilm in _bilms(module):
        bilm.recurrence = Recurrence(recurrence, THREAD_RULE)  # one each: captured graphs are per model
        bilm.char_cnn.training_path = encode_for_training
        bilm.token_cache = TokenCache(token_cache_words) if token_cache_words else None
        release_when_collected(bilm)  # a dropped model's heap goes back to the OS
    return module


def set_token_cache(module: torch.nn.Module, max_words: int) -> torch.nn.Module:
    """Replace the layer-0 cache of every `BiLM` inside `module` by an empty one of
    `max_words` word types (0: none).

    A biLM that has no runtime yet (built by hand) is also handed the default recurrence
    (`Recurrence("auto")`, which changes no value) and the char CNN's training path, so
    that `embed_sentences`, which hands the whole runtime to a model without one, keeps the
    cache chosen here.

    Raises:
        ValueError: if `max_words` is not an integer >= 0.
    """
    _check_words(max_words)
    for bilm in _bilms(module):
        bilm.token_cache = TokenCache(max_words) if max_words else None
        if bilm.recurrence is None:
            bilm.recurrence = Recurrence("auto", THREAD_RULE)
            bilm.char_cnn.training_path = encode_for_training
    return module


def set_recurrence(module: torch.nn.Module, mode: str = "auto") -> torch.nn.Module:
    """Hand every `BiLM` inside `module` a `Recurrence(mode)` with the runtime's thread rule
    (the paths: `elmo_core.model.recurrence`).

    A biLM that has no runtime yet (built by hand) also gets the default layer-0 cache.

    Args:
        module: An `Elmo`, `BiLM`, `BiLMLanguageModel` or anything containing a `BiLM`.
        mode: One of RECURRENCES. "auto" is the default. "step" runs the cell's own loop
            everywhere, with every faster path off.

    Returns:
        `module`, changed in place.

    Raises:
        ValueError: for an unknown mode.
    """
    Recurrence(mode)  # an unknown mode is refused before any biLM changes
    for bilm in _bilms(module):
        if bilm.recurrence is None and bilm.token_cache is None:  # no runtime yet: the default cache too
            bilm.token_cache = TokenCache(DEFAULT_TOKEN_CACHE_WORDS)
        bilm.recurrence = Recurrence(mode, THREAD_RULE)  # one each: its captured graphs are its own
    return module


def has_runtime(module: torch.nn.Module) -> bool:
    """Whether every `BiLM` inside `module` has been handed a recurrence."""
    return all(bilm.recurrence is not None for bilm in _bilms(module))


def _bilms(module: torch.nn.Module) -> list[BiLM]:
    return [m for m in module.modules() if isinstance(m, BiLM)]


def _check_words(value: object) -> None:
    check_setting("token_cache_words", value, minimum=0, meaning="0 switches the cache off")
