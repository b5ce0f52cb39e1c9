"""The task-specific weighting of biLM layers (Peters et al. 2018, equation 1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

__all__ = ["LAYER_NORM_SCOPES", "ScalarMix"]

LAYER_NORM_SCOPES = ("sentence", "batch")
"""Values of `ScalarMix(layer_norm_scope=...)`: whose tokens share the layer-norm statistics."""


class ScalarMix(nn.Module):
    """ELMo_task = gamma * sum_k softmax(w)_k * h_k  (paper equation 1).

    Args:
        num_layers: Number of layers mixed (`n_layers + 1`: the token layer and every
            LSTM layer).
        do_layer_norm: Normalise each layer before mixing (bilm-tf's `use_layer_norm`:
            one mean and variance over real positions and features, eps 1e-12, computed
            after the sentence boundaries are removed). Off by default, as the authors
            recommend.
        layer_norm_scope: Which positions share those statistics. "sentence" (the
            default): each sentence's own tokens, so a sentence's vectors do not depend
            on what it is batched with. "batch": every real token of the batch, as
            bilm-tf did; a sentence's vectors then change with its batch mates (use it
            only to reproduce the original's numbers on the original's batches).
        initial_scalar_parameters: Starting values of w (default zeros: equal weights).
        trainable: Whether w and gamma are learned. With `False` the mix is fixed at
            its initial values (for instance `[0, 0, 1]` with a large scale to take the
            top layer only, or the weights learned by an earlier run).
        gamma: Starting value of the scale gamma (default 1).

    Attributes:
        scalar_weights: w, shape [num_layers].
        gamma: shape [1].

    Shape:
        activations: [num_layers, batch, tokens, dim], or a sequence of num_layers
            tensors [batch, tokens, dim]; mask: [batch, tokens] bool
        output: [batch, tokens, dim]

    Raises:
        ValueError: if the number of layers given to `forward` differs from `num_layers`,
            or `layer_norm_scope` is not "sentence" or "batch".
    """

    def __init__(
        self,
        num_layers: int,
        do_layer_norm: bool = False,
        initial_scalar_parameters: Sequence[float] | None = None,
        trainable: bool = True,
        gamma: float = 1.0,
        layer_norm_scope: Literal["sentence", "batch"] = "sentence",
    ) -> None:
        super().__init__()
        if layer_norm_scope not in LAYER_NORM_SCOPES:
            raise ValueError(
                f"layer_norm_scope must be one of {LAYER_NORM_SCOPES}; got {layer_norm_scope!r}. "
                "'sentence' (the default) keeps each sentence independent of its batch mates."
            )
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * num_layers
        if len(initial_scalar_parameters) != num_layers:
            raise ValueError(
                f"initial_scalar_parameters must have one value per layer ({num_layers}); got "
                f"{len(initial_scalar_parameters)}: {list(initial_scalar_parameters)}."
            )
        self.num_layers = num_layers
        self.do_layer_norm = do_layer_norm
        self.layer_norm_scope = layer_norm_scope
        self.scalar_weights = nn.Parameter(
            torch.tensor([float(v) for v in initial_scalar_parameters]), requires_grad=trainable
        )
        self.gamma = nn.Parameter(torch.tensor([float(gamma)]), requires_grad=trainable)

    @property
    def normalized_weights(self) -> torch.Tensor:
        """softmax(w): the weight given to each layer, [num_layers], detached."""
        return torch.softmax(self.scalar_weights.detach(), dim=0)

    def forward(
        self, activations: torch.Tensor | Sequence[torch.Tensor], mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mix of the layers; see the class docstring.

        Given a sequence of layer tensors, the mix reads those very tensors, so gradients
        reach each of them (what `ElmoModel` returns as `hidden_states`).
        """
        layers = activations.unbind(0) if isinstance(activations, torch.Tensor) else tuple(activations)
        if len(layers) != self.num_layers:
            raise ValueError(
                f"ScalarMix was built for {self.num_layers} layers but got {len(layers)} "
                f"(activations of shape {_shape(activations)}); build it with num_layers = n_layers + 1."
            )
        if self.do_layer_norm:
            if mask is None:
                raise ValueError("ScalarMix with do_layer_norm=True needs the mask of real positions.")
            per_sentence = self.layer_norm_scope == "sentence"
            layers = tuple(_masked_layer_norm(layer, mask, per_sentence) for layer in layers)
        weights = torch.softmax(self.scalar_weights, dim=0).to(layers[0].dtype)
        mixed = weights[0] * layers[0]
        for weight, layer in zip(weights[1:], layers[1:]):
            mixed = mixed + weight * layer  # [batch, tokens, dim]
        return self.gamma.to(mixed.dtype) * mixed


def _shape(activations: torch.Tensor | Sequence[torch.Tensor]) -> object:
    if isinstance(activations, torch.Tensor):
        return tuple(activations.shape)
    return [tuple(layer.shape) for layer in activations]


def _masked_layer_norm(layer: torch.Tensor, mask: torch.Tensor, per_sentence: bool, eps: float = 1e-12) -> torch.Tensor:
    """One layer normalised by the mean/variance over real positions and features.

    per_sentence: statistics over each sentence's own tokens (one mean per batch row);
    otherwise one mean/variance over every real token of the batch (bilm-tf).
    """
    m = mask[:, :, None].to(layer.dtype)  # [batch, tokens, 1]
    dims = (1, 2) if per_sentence else (0, 1, 2)
    count = m.sum(dim=dims, keepdim=True) * layer.shape[-1]  # [batch or 1, 1, 1]
    safe = count.clamp(min=1)  # an empty sentence: nothing to normalise, no division by 0
    mean = (layer * m).sum(dim=dims, keepdim=True) / safe
    var = (((layer - mean) * m) ** 2).sum(dim=dims, keepdim=True) / safe
    return (layer - mean) / torch.sqrt(var + eps)
