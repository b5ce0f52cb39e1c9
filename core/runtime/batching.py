"""Batching by a token budget after sorting by length: little padding, and bounded tensors."""

from __future__ import annotations

from collections.abc import Sequence

from ..model.checks import check_int

DEFAULT_BATCH_TOKENS = 4096
"""Default budget of padded positions per batch. Lower it on small machines, raise it on a GPU."""


def batches_by_token_budget(
    lengths: Sequence[int],
    max_tokens: int,
    *,
    max_batch_size: int | None = None,
    tokens_per_sentence_extra: int = 2,
    chunk_steps: int | None = None,
) -> list[list[int]]:
    """Group sentence indices into batches of at most `max_tokens` padded positions.

    Sentences are sorted longest first (stable) and cut greedily. A batch costs
    `rows * (longest + 2)`: the biLM adds `<S>` and `</S>`. With `chunk_steps`, a row counts
    at most that many steps: the biLM steps longer rows a chunk at a time.

    Returns:
        Lists of indices into `lengths`, each index once.

    Raises:
        ValueError: if `max_tokens` or `max_batch_size` is not a positive integer.
    """
    max_tokens = check_int("max_tokens", max_tokens)
    max_batch_size = check_int("max_batch_size", max_batch_size, none_ok=True)
    most = check_int("chunk_steps", chunk_steps, none_ok=True)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        cost = lengths[i] + tokens_per_sentence_extra
        cost = cost if most is None else min(cost, most)
        full = max_batch_size is not None and len(current) >= max_batch_size
        if current and (full or max(longest, cost) * (len(current) + 1) > max_tokens):
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, cost)
    if current:
        batches.append(current)
    return batches
