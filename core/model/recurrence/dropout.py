"""Dropout for the training step, its mask drawn from 16 random bits per element.

`torch.nn.functional.dropout` on the CPU draws its mask with `bernoulli_`, one double
from the generator per element. A training step draws three such masks (both LSTM
layers' inputs and the top layer before the softmax), each over a million elements in a
4,096-position batch: a visible part of a bf16 step of the default shape
(`benchmarks/bench_train.py --breakdown`, docs/results/speed-memory.md). Here the generator
fills 64-bit words, and each element reads 16 of their bits, a fraction of the work.

The dropout rate is `p` rounded to a multiple of 2**-16 (0.1 becomes 6554 / 65536 =
0.1000061), and the kept elements are scaled by the reciprocal of that rounded keep
rate, so the output's expectation is the input, as with `F.dropout`. Same generator as
`F.dropout` (torch's default, or the device's), so `torch.manual_seed` and the training
checkpoint's saved RNG state make it reproducible; not the same masks as `F.dropout`.
"""

from __future__ import annotations

import torch

DROPOUT_LEVELS = 1 << 16
"""The dropout rate is a multiple of 1 / DROPOUT_LEVELS (16 random bits per element)."""


def fast_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """`F.dropout(x, p, training)` with a mask of 16 random bits per element.

    Args:
        x: Any shape, floating dtype, any device.
        p: Probability of zeroing an element, in [0, 1]; rounded to a multiple of
            2**-16 (module docstring).
        training: Off (or p == 0): `x` itself is returned.

    Returns:
        A new tensor shaped and typed as `x` (or `x` itself, see `training`):
        zero where dropped, `x / (1 - p')` elsewhere, p' the rounded rate.
        Differentiable in `x`; the backward keeps a bool mask (1 byte per element).

    Raises:
        ValueError: if `p` is outside [0, 1] (as `F.dropout`).
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
