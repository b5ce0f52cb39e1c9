"""Overlapping windows over sequences too long to read in one biLM pass.

A sentence (or a spaCy Doc without sentence boundaries, or one line given to
`elmo embed`) is read whole when it has at most `window_tokens` tokens. A longer one
is read in overlapping windows of `window_tokens` tokens, each with `context` tokens
of context on both sides of the stretch it keeps, so memory stays bounded by the
window (and the batch budget), not by the length of the input:

    tokens     0 ........................................................... n
    window 0   [=============================kept=============|--context--]
    window 1                              [--context--|=======kept=======|--context--]
    window 2                                                  [--context--|====kept====]
               stride = window_tokens - 2 * context kept tokens per middle window

Each token's vectors come from the one window that keeps it: there it has at least
`context` tokens on each side (fewer only at the true ends of the input), which is the
most left-and-right context any window offers it up to the `stride` boundary.

What windowing does to the vectors: the biLM adds `<S>` and `</S>` around every
sequence and starts its LSTMs from zero, so a window reads as if a sentence began
`context` tokens before its first kept token. Layer 0 (the char CNN) depends on the
token alone and is unchanged. The LSTM layers differ from a whole-sequence run by an
amount that shrinks with the distance to the cut; with the default `context` the kept
tokens are at least 128 tokens away from any cut. Inputs no longer than
`window_tokens` are never cut, so their vectors are exactly those of a run without
windows. `tests/core/test_windows.py` measures the differences on a small model.

`run_in_windows` is the one windowed, batched inference loop of the project: it plans
the windows of every sequence, cuts them into batches by a token budget, runs each
batch through a caller's function (the core's `iter_embeddings` runs the `Elmo`; the
spaCy layer runs its thinc wrapper) and assembles each sequence from its windows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from .batching import batches_by_token_budget
from .checks import check_int
from .memory import release_free_memory

__all__ = [
    "DEFAULT_WINDOW_TOKENS",
    "Window",
    "check_window_settings",
    "default_context",
    "plan_windows",
    "run_in_windows",
]

DEFAULT_WINDOW_TOKENS = 1024
"""Longest sequence read in one pass. Long enough for any real sentence and for a
600-token paragraph; a 100,000-token document becomes about 130 windows."""


class Window(NamedTuple):
    """One biLM pass over `tokens[start:end]`, keeping the vectors of `tokens[keep_start:keep_end]`."""

    start: int
    end: int
    keep_start: int
    keep_end: int


def default_context(window_tokens: int) -> int:
    """Context tokens on each side of a window when none is given: `window_tokens // 8`."""
    return window_tokens // 8


def _check_window(window_tokens: object, context: object) -> int:
    check_int(
        "window_tokens",
        window_tokens,
        meaning="None reads every sequence whole",
        hint=f"{DEFAULT_WINDOW_TOKENS} is a good value.",
    )
    if context is None:
        return default_context(window_tokens)
    check_int("window_context", context, minimum=0)
    if 2 * context >= window_tokens:
        raise ValueError(
            f"window_context ({context}) must be less than half of window_tokens ({window_tokens}): "
            "each window keeps window_tokens - 2 * window_context tokens. Lower the context or "
            "raise window_tokens."
        )
    return context


def plan_windows(
    num_tokens: int, window_tokens: int = DEFAULT_WINDOW_TOKENS, context: int | None = None
) -> list[Window]:
    """The windows that cover a sequence of `num_tokens` tokens (see the module docstring).

    Args:
        num_tokens: Length of the sequence (>= 0).
        window_tokens: Most tokens one pass reads. A sequence of at most this many
            tokens is one window, read whole.
        context: Tokens of context on each side of a window's kept stretch
            (default `window_tokens // 8`). 0 cuts the sequence into disjoint pieces.

    Returns:
        Windows in order; their kept stretches tile `[0, num_tokens)` exactly, and
        every window reads at most `window_tokens` tokens.

    Raises:
        ValueError: if `window_tokens` is not positive, or `2 * context >= window_tokens`.
    """
    context = _check_window(window_tokens, context)
    if num_tokens <= window_tokens:
        return [Window(0, num_tokens, 0, num_tokens)]
    windows = []
    keep_start = 0
    while True:
        start = max(0, keep_start - context)
        end = start + window_tokens
        if end >= num_tokens:  # the last window: read the final window_tokens tokens
            windows.append(Window(max(0, num_tokens - window_tokens), num_tokens, keep_start, num_tokens))
            return windows
        windows.append(Window(start, end, keep_start, end - context))
        keep_start = end - context


def check_window_settings(window_tokens: int | None, window_context: int | None) -> int | None:
    """Check the window settings up front; return `window_tokens`, with 0 read as None.

    None, or 0 (as on the command line and in spaCy configs), reads every sequence
    whole, however long.

    Raises:
        ValueError: if `window_tokens` is not a positive integer, 0 or None, or
            `window_context` is negative or at least half of `window_tokens`.
    """
    if window_tokens == 0 and not isinstance(window_tokens, bool):
        return None
    if window_tokens is not None:
        _check_window(window_tokens, window_context)
    return window_tokens


RunBatch = Callable[[list[Sequence[str]]], Sequence[np.ndarray]]
"""Reads one batch of token lists; returns one array `[..., tokens, dim]` per row (token
axis -2), holding at least that row's tokens (positions after them are ignored)."""


def run_in_windows(
    sequences: Sequence[Sequence[str]],
    run_batch: RunBatch,
    *,
    batch_tokens: int,
    batch_size: int | None = None,
    window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
    window_context: int | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Plan windows, run them in batches, assemble: yield `(index, array)` as each sequence completes.

    A sequence of at most `window_tokens` tokens is one piece, read whole; a longer one is
    cut by `plan_windows`. Pieces are batched by `batches_by_token_budget`, longest first,
    and a sequence is yielded when its last piece has been read (not in input order).

    Memory is bounded by one batch (and one window, plus a long sequence being assembled).
    Every yielded array is a fresh copy, never a view, which would keep the whole batch's
    array alive for as long as the caller keeps one sequence. After each batch its arrays
    are dropped and the freed heap goes back to the OS (`elmo_core.memory`): every batch
    has new shapes, and without the trim the resident size creeps up over a long run.

    Args:
        sequences: Token lists (empty ones give arrays with 0 tokens).
        run_batch: See `RunBatch`; it gets `sequences[i][start:end]` for each piece.
        batch_tokens: Budget of padded positions per batch.
        batch_size: Optional cap on pieces per batch.
        window_tokens: Longest piece; None or 0 reads every sequence whole.
        window_context: Context tokens on each side of a kept stretch (default `window_tokens // 8`).

    Yields:
        `(index into sequences, array)`, the array float32, C-ordered, shaped as
        `run_batch`'s rows with the token axis cut to the sequence's own tokens.

    Raises:
        ValueError: for a bad budget, batch size or window setting.
    """
    window_tokens = check_window_settings(window_tokens, window_context)
    pieces = [(i, w) for i, tokens in enumerate(sequences) for w in _pieces(len(tokens), window_tokens, window_context)]
    batches = batches_by_token_budget([w.end - w.start for _, w in pieces], batch_tokens, max_batch_size=batch_size)
    windows_left = Counter(i for i, _ in pieces)
    assembling: dict[int, np.ndarray] = {}  # long sequences being assembled: index -> arrays so far
    for batch in batches:
        texts = [sequences[i][w.start : w.end] for i, w in (pieces[k] for k in batch)]
        arrays = run_batch(texts)
        for row, k in enumerate(batch):
            i, w = pieces[k]
            kept = arrays[row][..., w.keep_start - w.start : w.keep_end - w.start, :]
            if (w.start, w.end) == (0, len(sequences[i])):  # read whole
                yield i, np.array(kept, dtype=np.float32, order="C", copy=True)
                continue
            if i not in assembling:
                shape = (*kept.shape[:-2], len(sequences[i]), kept.shape[-1])
                assembling[i] = np.empty(shape, dtype=np.float32)
            assembling[i][..., w.keep_start : w.keep_end, :] = kept
            windows_left[i] -= 1
            if windows_left[i] == 0:
                yield i, assembling.pop(i)
        del arrays, texts  # before the next batch, not when it replaces them
        kept = None
        release_free_memory()


def _pieces(num_tokens: int, window_tokens: int | None, window_context: int | None) -> list[Window]:
    """The biLM passes over one sequence: the whole of it, or its windows."""
    if window_tokens is None:
        return [Window(0, num_tokens, 0, num_tokens)]
    return plan_windows(num_tokens, window_tokens, window_context)
