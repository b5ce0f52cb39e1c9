"""Highway layers (Srivastava et al., 2015) as bilm-tf applies them (docs/bilm_tf.md §3, item 5)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import torch
from torch import nn

from .precision import WEIGHT_DTYPE, bf16_linear, cpu_bf16_active

__all__ = ["Highway"]


class Highway(nn.Module):
    """A stack of highway layers with a ReLU candidate.

    For each layer, with `x` of width F::

        candidate = relu(x @ W_transform + b_transform)
        gate      = sigmoid(x @ W_carry + b_carry)
        y         = gate * candidate + (1 - gate) * x

    Despite its name, bilm-tf's "carry" matrix produces the gate that admits the
    *transformed* value. Both matrices are held in one `Linear(F, 2F)` per layer so that
    a layer costs one matrix product: rows `[:F]` are the candidate (`W_transform`), rows
    `[F:]` the gate (`W_carry`). The non-linearity is ReLU whatever the char CNN's
    activation option says, as in bilm-tf.

    Args:
        size: F, the width of the input and output (the char CNN's `n_filters`).
        n_highway: How many highway layers are stacked (bilm-tf's option `n_highway`;
            2 in the published models). 0 makes the stack the identity.

    Shape:
        x: [..., F] -> [..., F]
    """

    def __init__(self, size: int, n_highway: int) -> None:
        super().__init__()
        self.size = size
        self.layers = nn.ModuleList(nn.Linear(size, 2 * size, dtype=WEIGHT_DTYPE) for _ in range(n_highway))
        for layer in cast(Iterable[nn.Linear], self.layers):  # torch types a ModuleList's items as Module
            self.init_carry_bias(layer)

    def init_carry_bias(self, layer: nn.Linear) -> None:
        """Set b_carry (the gate half of `layer`'s bias, rows [F:]) to its starting value, -2.

        bilm-tf initialised b_carry to -2 so that a new layer starts by mostly passing
        its input through; it only matters when training from scratch. The rest of the
        layer keeps torch's default initialisation.
        """
        nn.init.constant_(layer.bias[self.size :], -2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bf16 = cpu_bf16_active(x)  # bf16 products, float32 gating (elmo_core.model.precision)
        for layer in cast(Iterable[nn.Linear], self.layers):
            candidate, gate = (bf16_linear(x, layer) if bf16 else layer(x)).chunk(2, dim=-1)  # 2 x [..., F]
            gate = torch.sigmoid(gate)
            x = gate * torch.relu(candidate) + (1 - gate) * x
        return x
