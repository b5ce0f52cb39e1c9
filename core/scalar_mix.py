"""The task-specific weighting of biLM layers (Peters et al. 2018, equation 1)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["ScalarMix"]


class ScalarMix(nn.Module):
    """ELMo_task = gamma * sum_k softmax(w)_k * h_k  (paper equation 1).

    Args:
        num_layers: Number of layers mixed (`n_layers + 1`: the token layer and every
            LSTM layer).
        do_layer_norm: Normalise each layer before mixing with *one* mean and variance
            over all real positions and features of the batch (bilm-tf's
            `use_layer_norm`, eps 1e-12, computed after the sentence boundaries are
            removed). Off by default, as the authors recommend.
        initial_scalar_parameters: Starting values of w (default zeros: equal weights).
        trainable: Whether w and gamma are learned. With `False` the mix is fixed at
            its initial values (for instance `[0, 0, 1]` with a large scale to take the
            top layer only, or the weights learned by an earlier run).
        gamma: Starting value of the scale gamma (default 1).

    Attributes:
        scalar_weights: w, shape [num_layers].
        gamma: shape [1].

    Shape:
        activations: [num_layers, batch, tokens, dim]; mask: [batch, tokens] bool
        output: [batch, tokens, dim]

    Raises:
        ValueError: if the number of layers given to `forward` differs from `num_layers`.
    """

    def __init__(
        self,
        num_layers: int,
        do_layer_norm: bool = False,
        initial_scalar_parameters: Sequence[float] | None = None,
        trainable: bool = True,
        gamma: float = 1.0,
    ) -> None:
        super().__init__()
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * num_layers
        if len(initial_scalar_parameters) != num_layers:
            raise ValueError(
                f"initial_scalar_parameters must have one value per layer ({num_layers}); got "
                f"{len(initial_scalar_parameters)}: {list(initial_scalar_parameters)}."
            )
        self.num_layers = num_layers
        self.do_layer_norm = do_layer_norm
        self.scalar_weights = nn.Parameter(
            torch.tensor([float(v) for v in initial_scalar_parameters]), requires_grad=trainable
        )
        self.gamma = nn.Parameter(torch.tensor([float(gamma)]), requires_grad=trainable)

    @property
    def normalized_weights(self) -> torch.Tensor:
        """softmax(w): the weight given to each layer, [num_layers], detached."""
        return torch.softmax(self.scalar_weights.detach(), dim=0)

    def forward(self, activations: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if activations.shape[0] != self.num_layers:
            raise ValueError(
                f"ScalarMix was built for {self.num_layers} layers but got {activations.shape[0]} "
                f"(activations of shape {tuple(activations.shape)}); build it with "
                "num_layers = n_layers + 1."
            )
        if self.do_layer_norm:
            if mask is None:
                raise ValueError("ScalarMix with do_layer_norm=True needs the mask of real positions.")
            activations = _masked_layer_norm(activations, mask)
        weights = torch.softmax(self.scalar_weights, dim=0).to(activations.dtype)
        mixed = torch.tensordot(weights, activations, dims=([0], [0]))  # [batch, tokens, dim]
        return self.gamma.to(mixed.dtype) * mixed


def _masked_layer_norm(activations: torch.Tensor, mask: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Each layer normalised by one mean/variance over all real positions and features."""
    m = mask[None, :, :, None].to(activations.dtype)  # [1, batch, tokens, 1]
    count = m.sum() * activations.shape[-1]
    if count == 0:
        return activations
    mean = (activations * m).sum(dim=(1, 2, 3), keepdim=True) / count  # [layers, 1, 1, 1]
    var = (((activations - mean) * m) ** 2).sum(dim=(1, 2, 3), keepdim=True) / count
    return (activations - mean) / torch.sqrt(var + eps)
