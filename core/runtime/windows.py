"""Overlapping windows over sequences too long for one biLM pass.

A sequence longer than `window_tokens` is read in windows that each keep a stretch with
`context` tokens on both sides, so memory is bounded:

    window 0   [=======kept=======|-context-]
    window 1             [-context-|=======kept=======|-context-]

Each window starts from a zero state, so the LSTM layers differ from a whole run near
the cuts. Every face cuts with `plan_windows`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator, Iterable, Sequence
from functools import partial
from typing import NamedTuple

import numpy as np
import torch

from ..model.checks import check_int
from ..model.recurrence.time_chunks import CHUNK_STEPS
from .batching import DEFAULT_BATCH_TOKENS, batches_by_token_budget
from .memory import release_free_memory

DEFAULT_WINDOW_TOKENS = 1024
"""Longest sequence read in one pass: any real sentence, or a 600-token paragraph."""


class Window(NamedTuple):
    """One biLM pass over `tokens[start:end]`, keeping the vectors of `tokens[keep_start:keep_end]`."""

    start: int
    end: int
    keep_start: int
    keep_end: int


def default_context(window_tokens: int) -> int:
    """Context tokens on each side of a window when none is given."""
    return window_tokens // 8


def _check_window(window_tokens: int, context: int | None) -> int:
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
    """The windows that cover a sequence of `num_tokens` tokens, in order.

    Their kept stretches tile `[0, num_tokens)`. `context` defaults to `window_tokens // 8`.

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
    """Check the window settings up front. Returns `window_tokens`, with 0 (read whole) as None.

    Raises:
        ValueError: for a bad `window_tokens`, or a `window_context` not in `[0, window_tokens / 2)`.
    """
    if window_tokens == 0 and not isinstance(window_tokens, bool):
        return None
    if window_tokens is None:
        return None
    _check_window(window_tokens, window_context)
    return check_int("window_tokens", window_tokens)  # checked: the int it holds (a numpy integer's)


PlanBatches = Callable[[list[int]], Iterable[Sequence[int]]]
"""Groups pieces by their lengths into batches: lists of indices, each index once."""


def window_batches(batch_tokens: int = DEFAULT_BATCH_TOKENS, batch_size: int | None = None) -> PlanBatches:
    """Every face's batching: pieces longest first, under `batch_tokens` padded positions.

    A piece counts at most `CHUNK_STEPS`: the biLM steps longer rows a chunk at a time.

    Raises:
        ValueError: if `batch_tokens` or `batch_size` is not a positive integer.
    """
    batch_tokens = check_int("batch_tokens", batch_tokens)
    batch_size = check_int("batch_size", batch_size, none_ok=True)
    return partial(batches_by_token_budget, max_tokens=batch_tokens, max_batch_size=batch_size, chunk_steps=CHUNK_STEPS)


ReadPieces = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""`(char_ids [pieces, tokens, chars], mask [pieces, tokens])` -> `[..., pieces, tokens (+ 2), dim]`."""


def read_in_windows(
    read: ReadPieces,
    char_ids: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    batches: PlanBatches | None = None,
    window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
    window_context: int | None = None,
    boundaries: bool = False,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Read a padded batch of char ids in windows, keeping autograd (hf_elmo's `ElmoModel`).

    In training every window's graph is kept until backward: memory is not bounded then.

    Args:
        read: See `ReadPieces`.
        char_ids: [batch, tokens, chars], right-padded.
        mask: [batch, tokens] bool. None: any char id non-zero.
        batches: Groups piece lengths into batches (`window_batches`). None: one batch.
        window_tokens, window_context: As `run_in_windows`.
        boundaries: `read` returns `<S>`/`</S>` too.

    Returns:
        None when no row needs cutting. Else the output `[..., batch, tokens (+ 2), dim]`,
        zero at padding, and its mask.
    """
    window_tokens = check_window_settings(window_tokens, window_context)
    to_cut = _rows_to_cut(char_ids, mask, window_tokens)
    if to_cut is None or window_tokens is None:
        return None
    mask, lengths = to_cut
    pieces = [(i, w) for i, n in enumerate(lengths) for w in plan_windows(n, window_tokens, window_context)]
    kept: dict[int, torch.Tensor] = {}  # piece -> its kept output
    edge = int(boundaries)  # read output rows before a piece's first token
    piece_lengths = [w.end - w.start for _, w in pieces]
    for batch in batches(piece_lengths) if batches is not None else [list(range(len(pieces)))]:
        out = read(*_piece_inputs(char_ids, mask, [pieces[k] for k in batch]))  # [..., pieces, longest (+ 2), dim]
        for row, k in enumerate(batch):
            kept[k] = out[..., row, _kept_span(pieces[k][1], lengths[pieces[k][0]], edge), :]  # [..., kept, dim]
    rows = [torch.cat([kept[k] for k, (j, _) in enumerate(pieces) if j == i], dim=-2) for i in range(len(lengths))]
    return _assemble(rows, char_ids.shape[1] + 2 * edge)


def _rows_to_cut(
    char_ids: torch.Tensor, mask: torch.Tensor | None, window_tokens: int | None
) -> tuple[torch.Tensor, list[int]] | None:
    """The bool mask [batch, tokens] and row lengths of a batch with a row to cut, else None."""
    if not isinstance(char_ids, torch.Tensor) or char_ids.dim() != 3 or window_tokens is None:
        return None  # read whole (ids of the wrong kind get `read`'s error)
    if char_ids.shape[1] <= window_tokens:
        return None
    if mask is not None and (not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(char_ids.shape[:2])):
        return None  # `read` names the mask's problem
    mask = (char_ids != 0).any(dim=-1) if mask is None else mask.bool()
    lengths_tensor = mask.sum(dim=1)  # [batch]
    if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths_tensor[:, None]):
        raise ValueError(
            "padding must be on the right: every row of the mask (or of non-zero char_ids) must be True "
            "for its first n positions and False after. Build inputs with words_to_char_ids()."
        )
    lengths = [int(n) for n in lengths_tensor.tolist()]
    return None if max(lengths, default=0) <= window_tokens else (mask, lengths)


def _piece_inputs(
    char_ids: torch.Tensor, mask: torch.Tensor, pieces: list[tuple[int, Window]]
) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(w.end - w.start for _, w in pieces)
    piece_ids = char_ids.new_zeros((len(pieces), longest, char_ids.shape[-1]))  # [pieces, longest, chars]
    piece_mask = mask.new_zeros((len(pieces), longest))
    for row, (i, w) in enumerate(pieces):
        piece_ids[row, : w.end - w.start] = char_ids[i, w.start : w.end]
        piece_mask[row, : w.end - w.start] = True
    return piece_ids, piece_mask


def _kept_span(w: Window, length: int, edge: int) -> slice:
    first = 0 if edge and w.keep_start == 0 else w.keep_start - w.start + edge  # 0: the row's <S>
    last = w.keep_end - w.start + edge + (edge if w.keep_end == length else 0)  # + 1: the row's </S>
    return slice(first, last)


def _assemble(rows: list[torch.Tensor], num_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows [..., length, dim] zero-padded and stacked: [..., batch, num_steps, dim], and the mask."""
    padded = [torch.cat([r, r.new_zeros((*r.shape[:-2], num_steps - r.shape[-2], r.shape[-1]))], dim=-2) for r in rows]
    output = torch.stack(padded, dim=-3)  # [..., batch, tokens (+ 2), dim]
    positions = torch.arange(num_steps, device=output.device)  # the mask goes where `read` put the output
    lengths = torch.tensor([r.shape[-2] for r in rows], device=output.device)
    return output, positions[None, :] < lengths[:, None]


RunBatch = Callable[[list[Sequence[str]]], Sequence[np.ndarray] | np.ndarray]
"""Reads a batch of token lists. Returns one array `[..., tokens, dim]` per row (may be padded)."""

OnWindow = Callable[[int, int], None]
"""Told `(index, kept tokens)` after each window of a long sequence: a progress bar's step."""


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

    Memory is bounded by one batch. Each array is a float32 copy: a view would keep its batch
    alive. `window_tokens` None or 0 reads every sequence whole.

    Raises:
        ValueError: for a bad budget, batch size or window setting.
    """
    window_tokens = check_window_settings(window_tokens, window_context)
    pieces = [(i, w) for i, tokens in enumerate(sequences) for w in _pieces(len(tokens), window_tokens, window_context)]
    lengths = [w.end - w.start for _, w in pieces]  # a piece counts at most CHUNK_STEPS (window_batches)
    batches = window_batches(batch_tokens, batch_size)(lengths)
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
    if i not in assembling:
        assembling[i] = np.empty((*kept.shape[:-2], length, kept.shape[-1]), dtype=np.float32)
    assembling[i][..., w.keep_start : w.keep_end, :] = kept
    if on_window is not None:
        on_window(i, w.keep_end - w.keep_start)


def _pieces(num_tokens: int, window_tokens: int | None, window_context: int | None) -> list[Window]:
    if window_tokens is None:
        return [Window(0, num_tokens, 0, num_tokens)]
    return plan_windows(num_tokens, window_tokens, window_context)
