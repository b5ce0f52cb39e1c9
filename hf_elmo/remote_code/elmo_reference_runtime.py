"""What hf_elmo's modules use of elmo_core's runtime and files layers, plainly: windows read all at
once, raw text split by spaCy's English rules, and no-ops for the runtime's other parts."""

from __future__ import annotations

import os
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import torch

from .elmo_reference import BiLMOptions, ElmoError, WeightFileError, check_int

# ---- windows (elmo_core/runtime/windows.py): a long row read in overlapping windows
DEFAULT_WINDOW_TOKENS = 1024


def check_window_settings(window_tokens: int | None, window_context: int | None) -> int | None:
    if window_tokens is None or (window_tokens == 0 and not isinstance(window_tokens, bool)):
        return None  # read every row whole
    window_tokens = check_int("window_tokens", window_tokens)
    if window_context is not None and 2 * check_int("window_context", window_context, minimum=0) >= window_tokens:
        raise ValueError(f"window_context ({window_context}) must be less than half of window_tokens.")
    return window_tokens


def plan_windows(n: int, window_tokens: int, context: int) -> list[tuple[int, int, int, int]]:
    """(start, end, keep_start, keep_end) of each window over a row of `n` tokens."""
    windows: list[tuple[int, int, int, int]] = []
    keep_start = 0
    while True:
        start = max(0, keep_start - context)
        if start + window_tokens >= n:  # the last window: the final window_tokens tokens
            return [*windows, (max(0, n - window_tokens), n, keep_start, n)]
        windows.append((start, start + window_tokens, keep_start, start + window_tokens - context))
        keep_start = start + window_tokens - context


def read_in_windows(
    read: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    char_ids: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    batches: Any = None,
    window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
    window_context: int | None = None,
    boundaries: bool = False,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`read` over windows of the rows longer than `window_tokens`, all at once. None: read whole."""
    window_tokens = window_tokens or None  # the config checked the settings, and the model the char ids
    if window_tokens is None or char_ids.shape[1] <= window_tokens:
        return None
    if mask is not None and mask.shape != char_ids.shape[:2]:
        return None  # `read` names a bad mask
    mask = (char_ids != 0).any(dim=-1) if mask is None else mask.bool()
    lengths = mask.sum(dim=1).tolist()
    if not torch.equal(mask, torch.arange(mask.shape[1])[None, :] < mask.sum(dim=1)[:, None]):
        raise ValueError("padding must be on the right: each mask row is True for its first n positions.")
    if max(lengths, default=0) <= window_tokens:
        return None
    context = window_tokens // 8 if window_context is None else window_context
    pieces = [(i, w) for i, n in enumerate(lengths) for w in plan_windows(n, window_tokens, context)]
    longest = max(end - start for _, (start, end, _, _) in pieces)
    ids = char_ids.new_zeros((len(pieces), longest, char_ids.shape[-1]))  # [pieces, longest, chars]
    piece_mask = mask.new_zeros((len(pieces), longest))
    for row, (i, (start, end, _, _)) in enumerate(pieces):
        ids[row, : end - start], piece_mask[row, : end - start] = char_ids[i, start:end], True
    out, edge = read(ids, piece_mask), int(boundaries)  # [..., pieces, longest (+ 2), dim]
    rows: list[list[torch.Tensor]] = [[] for _ in lengths]
    for row, (i, (start, _, keep_start, keep_end)) in enumerate(pieces):
        first = 0 if edge and keep_start == 0 else keep_start - start + edge  # 0: the row's <S>
        last = keep_end - start + edge + (edge if keep_end == lengths[i] else 0)  # + 1: the row's </S>
        rows[i].append(out[..., row, first:last, :])
    num_steps = char_ids.shape[1] + 2 * edge
    kept = [torch.cat(r, dim=-2) for r in rows]
    padded = [torch.cat([r, r.new_zeros((*r.shape[:-2], num_steps - r.shape[-2], r.shape[-1]))], -2) for r in kept]
    n_kept = torch.tensor([r.shape[-2] for r in kept])
    return torch.stack(padded, dim=-3), torch.arange(num_steps)[None, :] < n_kept[:, None]


# ---- text (elmo_core/files/tokenizers.py): spaCy's English rules, as the pretraining data
DEFAULT_TOKENIZER = "spacy-en"


def check_sentences(sentences: object) -> None:
    if isinstance(sentences, (str, bytes)) or not isinstance(sentences, Sequence):
        raise TypeError(f"sentences must be a list of token lists; got {type(sentences).__name__}.")
    for k, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)) or not isinstance(sentence, Sequence):
            raise TypeError(f"sentence {k} must be a list of token strings; got {type(sentence).__name__}.")
        for token in sentence:
            if not isinstance(token, str):
                raise TypeError(f"sentence {k} holds a {type(token).__name__} ({token!r}); every token must be a str.")


def spacy_word_splitter(nlp: Any) -> Callable[[str], list[str]]:
    lock = threading.Lock()

    def split(text: str) -> list[str]:
        zone = getattr(nlp, "memory_zone", None)  # spaCy keeps nothing per word inside a memory zone
        with lock, zone() if zone is not None else nullcontext():
            doc = nlp.tokenizer(re.sub("[\ud800-\udfff]", "\u0436", text))  # a letter for each lone surrogate
            return [text[t.idx : t.idx + len(t.text)] for t in doc if not t.is_space]

    return split


def token_offsets(text: str, tokens: Sequence[str]) -> list[tuple[int, int]]:
    offsets, position = [], 0
    for token in tokens:
        start = text.find(token, position)
        if start < 0:
            raise ValueError(f"token {token!r} is not in the text after position {position}; it has no offsets.")
        offsets.append((start, start + len(token)))
        position = start + len(token)
    return offsets


_guard = threading.Lock()
_locks: weakref.WeakKeyDictionary[object, threading.RLock] = weakref.WeakKeyDictionary()


def first_use_lock(owner: object) -> threading.RLock:
    with _guard:
        return _locks.setdefault(owner, threading.RLock())


def tokenizer_settings(options: BiLMOptions) -> dict[str, Any]:
    return {"max_characters_per_token": options.char_cnn.max_characters_per_token}


# ---- the files layer's weight checks (elmo_core/files/weights.py)
NON_FINITE_FIX = "The file is damaged or came from a diverged training run; save or download the model again."


def count_non_finite(values: torch.Tensor) -> int:
    return int(torch.isfinite(values).logical_not().sum()) if values.is_floating_point() else 0


def non_finite_error(source: object, what: str, count: int, fix: str) -> WeightFileError:
    return WeightFileError(f"{source}: {what} holds {count} NaN or infinite values, so the vectors would be NaN. {fix}")


# ---- the runtime's parts and the files layer stand in as no-ops: the plain forward, transformers' own saving
def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


window_batches = _nothing  # all windows at once
release_when_collected = _nothing


def serving_parts() -> dict[str, Any]:
    return {}  # Elmo's reference step loop: no fast recurrence, token cache or thread rule


def get_tokenizer(name: str) -> Callable[[str], list[str]]:
    raise ElmoError(f"text_tokenizer {name!r} is a plug-in of elmo-bilm, not installed here: pip install elmo-bilm.")


def note_which_code_runs(folder: object) -> bool:
    return False  # this is the folder's own code


def save_atomically(save: Callable[..., Any], folder: Any, *code: str) -> Callable[..., Any]:
    return save  # transformers' save_pretrained copies this folder's code files itself


def read_as_the_core_reads(load: Callable[..., Any], source: object, model_class: Any) -> Callable[..., Any]:
    # The core's check of a folder's sizes, plainly: transformers compares the shapes only after building the model.
    def read(*args: Any, **kwargs: Any) -> Any:
        folder = os.fspath(source) if isinstance(source, (str, os.PathLike)) else ""
        weights = os.path.join(folder, "model.safetensors")
        if folder and os.path.isfile(weights) and not kwargs.get("ignore_mismatched_sizes"):
            from safetensors import safe_open

            config, config_class = kwargs.get("config"), model_class.config_class
            config = config if isinstance(config, config_class) else config_class.from_pretrained(folder)
            with torch.device("meta"):
                expected = {k: tuple(v.shape) for k, v in model_class(config).state_dict().items()}
            prefix = f"{model_class.base_model_prefix}."
            with safe_open(weights, framework="pt") as f:
                for key in f.keys():
                    name = next((n for n in (key, prefix + key, key.removeprefix(prefix)) if n in expected), None)
                    shape = tuple(f.get_slice(key).get_shape())
                    if name is not None and shape != expected[name]:
                        raise ValueError(
                            f"{weights}: tensor '{key}' has shape {shape}, but config.json implies {expected[name]}. "
                            "Use the config.json saved with these weights."
                        )
        return load(*args, **kwargs)

    return read
