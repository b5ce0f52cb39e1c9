"""Dropout for the training step, its mask drawn from 16 random bits per element.

`F.dropout` on the CPU draws one double per element. Here each element reads 16 bits of
a random 64-bit word. The rate is `p` rounded to a multiple of 2**-16, and kept elements
are scaled to keep the expectation. Same generator as `F.dropout`, other masks.
"""

from __future__ import annotations

import torch

DROPOUT_LEVELS = 1 << 16
"""The dropout rate is a multiple of 1 / DROPOUT_LEVELS."""


def fast_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """`F.dropout(x, p, training)` with a mask of 16 random bits per element.

    Args:
        x: Any shape, floating dtype, any device.
        p: Probability of zeroing an element, in [0, 1], rounded to a multiple of 2**-16.
        training: Off (or p == 0): `x` itself is returned.

    Returns:
        Zero where dropped, `x / (1 - p')` elsewhere (p' the rounded rate). Differentiable.

    Raises:
        ValueError: if `p` is outside [0, 1].
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    dropped = round(p * DROPOUT_LEVELS)
    if not training or dropped == 0:
        return x
    if dropped == DROPOUT_LEVELS:
        return x * 0
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_(-(1 << 63), (1 << 63) - 1)
    bits = words.view(torch.int16)[:n].view(x.shape)  # uniform over [-2**15, 2**15)
    keep = bits >= dropped - DROPOUT_LEVELS // 2  # P(keep) = 1 - dropped / 2**16
    return x * keep * (DROPOUT_LEVELS / (DROPOUT_LEVELS - dropped))
