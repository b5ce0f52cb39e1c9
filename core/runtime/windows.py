"""The windowed, batched inference loop: `run_in_windows`.

It plans the windows of every sequence with the model's `plan_windows`
(`elmo_core.model.windows`, where windows and what they do to the vectors are
described), cuts them into batches by a token budget, runs each batch through a
caller's function (the core's `iter_embeddings` runs the `Elmo`; the spaCy layer runs
its thinc wrapper) and assembles each sequence from its windows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Sequence

import numpy as np

from ..model.windows import DEFAULT_WINDOW_TOKENS, Window, check_window_settings, plan_windows
from .batching import batches_by_token_budget
from .memory import release_free_memory

__all__ = ["OnWindow", "RunBatch", "run_in_windows"]


RunBatch = Callable[[list[Sequence[str]]], Sequence[np.ndarray] | np.ndarray]
"""Reads one batch of token lists; returns one array `[..., tokens, dim]` per row (token
axis -2), holding at least that row's tokens (positions after them are ignored)."""

OnWindow = Callable[[int, int], None]
"""Told `(index, kept tokens)` after each window of a sequence read in windows, in batch
order, before the sequence is complete: a progress bar's step inside a long sequence."""


def run_in_windows(
    sequences: Sequence[Sequence[str]],
    run_batch: RunBatch,
    *,
    batch_tokens: int,
    batch_size: int | None = None,
    window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
    window_context: int | None = None,
    on_window: OnWindow | None = None,
) -> Generator[tuple[int, np.ndarray], None, None]:
    """Plan windows, run them in batches, assemble: yield `(index, array)` as each sequence completes.

    A sequence of at most `window_tokens` tokens is one piece, read whole; a longer one is
    cut by `plan_windows`. Pieces are batched by `batches_by_token_budget`, longest first,
    and a sequence is yielded when its last piece has been read (not in input order).

    Memory is bounded by one batch (and one window, plus a long sequence being assembled).
    Every yielded array is a fresh copy, never a view, which would keep the whole batch's
    array alive for as long as the caller keeps one sequence. After each batch its arrays
    are dropped and the freed heap goes back to the OS (`elmo_core.runtime.memory`): every batch
    has new shapes, and without the trim the resident size creeps up over a long run.

    Args:
        sequences: Token lists (empty ones give arrays with 0 tokens).
        run_batch: See `RunBatch`; it gets `sequences[i][start:end]` for each piece.
        batch_tokens: Budget of padded positions per batch.
        batch_size: Optional cap on pieces per batch.
        window_tokens: Longest piece; None or 0 reads every sequence whole.
        window_context: Context tokens on each side of a kept stretch (default `window_tokens // 8`).
        on_window: See `OnWindow`; not told of sequences read whole (they are yielded at once).

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
    kept: np.ndarray | None = None  # a view of the current batch's arrays
    for batch in batches:
        texts = [sequences[i][w.start : w.end] for i, w in (pieces[k] for k in batch)]
        arrays = run_batch(texts)
        for row, k in enumerate(batch):
            i, w = pieces[k]
            kept = arrays[row][..., w.keep_start - w.start : w.keep_end - w.start, :]
            if (w.start, w.end) == (0, len(sequences[i])):  # read whole
                yield i, np.array(kept, dtype=np.float32, order="C", copy=True)
                continue
            _add_window(assembling, i, len(sequences[i]), w, kept, on_window)
            windows_left[i] -= 1
            if windows_left[i] == 0:
                yield i, assembling.pop(i)
        del arrays, texts  # before the next batch, not when it replaces them
        kept = None
        release_free_memory()


def _add_window(
    assembling: dict[int, np.ndarray], i: int, length: int, w: Window, kept: np.ndarray, on_window: OnWindow | None
) -> None:
    """Copy a window's kept vectors into sequence `i`'s array, made at its first window; tell `on_window`."""
    if i not in assembling:
        assembling[i] = np.empty((*kept.shape[:-2], length, kept.shape[-1]), dtype=np.float32)
    assembling[i][..., w.keep_start : w.keep_end, :] = kept
    if on_window is not None:
        on_window(i, w.keep_end - w.keep_start)


def _pieces(num_tokens: int, window_tokens: int | None, window_context: int | None) -> list[Window]:
    """The biLM passes over one sequence: the whole of it, or its windows."""
    if window_tokens is None:
        return [Window(0, num_tokens, 0, num_tokens)]
    return plan_windows(num_tokens, window_tokens, window_context)
