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
"""

from __future__ import annotations

from typing import NamedTuple

from .checks import check_int

__all__ = ["DEFAULT_WINDOW_TOKENS", "Window", "default_context", "plan_windows"]

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
