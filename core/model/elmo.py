"""ELMo: a biLM, one scalar mix per output representation, and dropout (paper section 3.2).

The scalar mix, equation 1, is written once here for every face:

    ELMo_task = gamma * sum_k s_k * h_k,   s = softmax(w)

Operators only, so spacy_elmo's thinc layer runs it on numpy/cupy, with the gradients below.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .bilm import BiLM, BiLMOutput, StackRunner, TokenVectors
from .char_cnn import TrainingPath
from .options import BiLMOptions
from .precision import WEIGHT_DTYPE

__all__ = ["Elmo", "ElmoOutput", "ScalarMix"]


LAYER_NORM_SCOPES = ("sentence", "batch")
"""Values of `ScalarMix(layer_norm_scope=...)`: whose tokens share the layer-norm statistics."""

ArrayT = Any  # a torch tensor or numpy/cupy array (or a number): the formulas below use only *, + and .sum()


def softmax_weights(scalar_weights: torch.Tensor) -> torch.Tensor:
    """s = softmax(w), the weight of each layer.

    Shape: scalar_weights [n_outputs] -> [n_outputs]
    """
    return torch.softmax(scalar_weights, dim=0)


def weighted_layer_sum(layers: Sequence[ArrayT] | ArrayT, weights: ArrayT, gamma: ArrayT) -> ArrayT:
    """gamma * (s_0 * h_0 + s_1 * h_1 + ...) in this fixed order: the same bits every run.

    Layers may be torch tensors or numpy/cupy arrays, s normalised and in their dtype.
    """
    mixed = weights[0] * layers[0]
    for weight, layer in zip(weights[1:], layers[1:]):
        mixed = mixed + weight * layer  # [..., dim]
    return gamma * mixed


def weighted_layer_sum_backward(weights: ArrayT, gamma: ArrayT, layer_dots: ArrayT) -> tuple[ArrayT, ArrayT, ArrayT]:
    """The gradients of `weighted_layer_sum`, for thinc (no autograd).

    With m = gamma * sum_k s_k h_k, s = `weights` and g_k = sum(dm * h_k) = `layer_dots`:

        dh_k = (gamma * s_k) * dm      ds_k = gamma * g_k      dgamma = sum_k s_k * g_k

    Returns (gamma * s, ds, dgamma).
    """
    return gamma * weights, gamma * layer_dots, (weights * layer_dots).sum()


def softmax_weights_backward(weights: ArrayT, d_weights: ArrayT) -> ArrayT:
    """The gradient for w, given s = softmax(w) and ds: s * (ds - sum(s * ds))."""
    return weights * (d_weights - (weights * d_weights).sum())


def scalar_mix(layers: Sequence[torch.Tensor], scalar_weights: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """gamma * sum_k softmax(w)_k * h_k (equation 1), differentiable in all three inputs.

    Shape: layers n_outputs x [..., dim], scalar_weights [n_outputs], gamma [1] -> [..., dim]
    """
    dtype = layers[0].dtype
    return weighted_layer_sum(layers, softmax_weights(scalar_weights).to(dtype), gamma.to(dtype))


class ScalarMix(nn.Module):
    """ELMo_task = gamma * sum_k softmax(w)_k * h_k (paper equation 1), w = `scalar_weights`.

    Args:
        n_outputs: Number of layers mixed: `n_layers + 1`.
        do_layer_norm: Normalise each layer over real positions and features first
            (bilm-tf's `use_layer_norm`, eps 1e-12). Off by default.
        layer_norm_scope: "sentence" (default): statistics per sentence, independent of
            batch mates. "batch": over the batch, as bilm-tf.
        initial_scalar_parameters: Starting w (default zeros: equal weights).
        trainable: Whether w and gamma learn. False fixes the mix (`[0, 0, 1]`: top layer).
        gamma: Starting scale.

    Shape:
        activations: [n_outputs, batch, tokens, dim], or n_outputs [batch, tokens, dim] tensors
        mask: [batch, tokens] bool
        output: [batch, tokens, dim]

    Raises:
        ValueError: for a layer count other than `n_outputs`, or an unknown scope.
    """

    def __init__(
        self,
        n_outputs: int,
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
            initial_scalar_parameters = [0.0] * n_outputs
        if len(initial_scalar_parameters) != n_outputs:
            raise ValueError(
                f"initial_scalar_parameters must have one value per layer ({n_outputs}); got "
                f"{len(initial_scalar_parameters)}: {list(initial_scalar_parameters)}."
            )
        self.n_outputs = n_outputs
        self.do_layer_norm = do_layer_norm
        self.layer_norm_scope = layer_norm_scope
        self.initial_scalar_parameters = tuple(float(v) for v in initial_scalar_parameters)
        self.initial_gamma = float(gamma)
        self.scalar_weights = nn.Parameter(torch.empty(n_outputs, dtype=WEIGHT_DTYPE), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.empty(1, dtype=WEIGHT_DTYPE), requires_grad=trainable)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set w and gamma to their starting values."""
        with torch.no_grad():
            self.scalar_weights.copy_(torch.tensor(self.initial_scalar_parameters))
            self.gamma.fill_(self.initial_gamma)

    @property
    def normalized_weights(self) -> torch.Tensor:
        """softmax(w), the weight of each layer: [n_outputs], detached."""
        return softmax_weights(self.scalar_weights.detach())

    def forward(
        self, activations: torch.Tensor | Sequence[torch.Tensor], mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mix. A sequence of layers is read as given: gradients reach each tensor."""
        layers = activations.unbind(0) if isinstance(activations, torch.Tensor) else tuple(activations)
        if len(layers) != self.n_outputs:
            raise ValueError(
                f"ScalarMix was built for {self.n_outputs} layers but got {len(layers)} "
                f"(activations of shape {_shape(activations)}); build it with n_outputs = n_layers + 1."
            )
        if self.do_layer_norm:
            if mask is None:
                raise ValueError("ScalarMix with do_layer_norm=True needs the mask of real positions.")
            per_sentence = self.layer_norm_scope == "sentence"
            layers = tuple(_masked_layer_norm(layer, mask, per_sentence) for layer in layers)
        return scalar_mix(layers, self.scalar_weights, self.gamma)  # [batch, tokens, dim]


def _shape(activations: torch.Tensor | Sequence[torch.Tensor]) -> object:
    if isinstance(activations, torch.Tensor):
        return tuple(activations.shape)
    return [tuple(layer.shape) for layer in activations]


def _masked_layer_norm(layer: torch.Tensor, mask: torch.Tensor, per_sentence: bool, eps: float = 1e-12) -> torch.Tensor:
    """Statistics over real positions and features: per sentence, or over the batch (bilm-tf)."""
    m = mask[:, :, None].to(layer.dtype)  # [batch, tokens, 1]
    dims = (1, 2) if per_sentence else (0, 1, 2)
    count = m.sum(dim=dims, keepdim=True) * layer.shape[-1]  # [batch or 1, 1, 1]
    safe = count.clamp(min=1)  # an empty sentence: nothing to normalise, no division by 0
    mean = (layer * m).sum(dim=dims, keepdim=True) / safe
    var = (((layer - mean) * m) ** 2).sum(dim=dims, keepdim=True) / safe
    return (layer - mean) / torch.sqrt(var + eps)


class ElmoOutput(NamedTuple):
    """What `Elmo.forward` returns.

    Attributes:
        representations: One scalar mix per output representation, zero at padding,
            [batch, tokens, 2 * projection_dim] each.
        activations: Every biLM layer, [n_layers + 1, batch, tokens, 2 * projection_dim].
        mask: bool [batch, tokens], True = real token.
    """

    representations: list[torch.Tensor]
    activations: torch.Tensor
    mask: torch.Tensor


class Elmo(nn.Module):
    """Contextual word vectors: a biLM whose layers are mixed per task (paper section 3.2).

    Args:
        options: biLM hyperparameters. Weights load apart (`elmo_core.load_bilm_tf`).
        num_output_representations: Scalar mixes over one biLM run.
        dropout: Dropout on each representation in training (AllenNLP: 0.5).
        do_layer_norm: See `ScalarMix`.
        layer_norm_scope: See `ScalarMix`.
        keep_sentence_boundaries: Also return the `<S>`/`</S>` positions.
        requires_grad: The biLM's initial `requires_grad`. Off: frozen, only the mixes
            train. Read at every call: unfreezing a part later fine-tunes exactly it.
        stateful: Carry LSTM states across batches as the original did.
        scalar_mix_parameters: Fixed mix weights w, one per layer, not trained.
        recurrence, token_cache, char_cnn_training: The biLM's parts (see `BiLM`).

    Shape:
        char_ids: [batch, tokens, chars] int64, no <S>/</S>
        mask: [batch, tokens] bool
    """

    def __init__(
        self,
        options: BiLMOptions,
        num_output_representations: int = 1,
        dropout: float = 0.5,
        do_layer_norm: bool = False,
        keep_sentence_boundaries: bool = False,
        requires_grad: bool = False,
        stateful: bool = False,
        scalar_mix_parameters: Sequence[float] | None = None,
        layer_norm_scope: Literal["sentence", "batch"] = "sentence",
        *,
        recurrence: StackRunner | None = None,
        token_cache: TokenVectors | None = None,
        char_cnn_training: TrainingPath | None = None,
    ) -> None:
        super().__init__()
        if num_output_representations < 0:
            raise ValueError(f"num_output_representations must be >= 0; got {num_output_representations}.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {dropout}.")
        self.options = options
        self.dropout = dropout
        self.bilm = BiLM(
            options,
            stateful=stateful,
            keep_sentence_boundaries=keep_sentence_boundaries,
            token_cache=token_cache,
            recurrence=recurrence,
            char_cnn_training=char_cnn_training,
        )
        self.bilm.requires_grad_(requires_grad)
        self.scalar_mixes = nn.ModuleList(
            ScalarMix(
                options.n_outputs,
                do_layer_norm=do_layer_norm,
                layer_norm_scope=layer_norm_scope,
                initial_scalar_parameters=scalar_mix_parameters,
                trainable=scalar_mix_parameters is None,
            )
            for _ in range(num_output_representations)
        )

    @property
    def requires_grad(self) -> bool:
        """Whether any biLM parameter has `requires_grad` now. Setting it sets them all."""
        return bilm_is_trainable(self.bilm)

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.bilm.requires_grad_(bool(value))

    @property
    def output_dim(self) -> int:
        """Width of the vectors: `2 * projection_dim`."""
        return self.options.output_dim

    @property
    def n_outputs(self) -> int:
        """`n_layers + 1`: layer 0, then each LSTM layer."""
        return self.options.n_outputs

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> ElmoOutput:
        """Run the biLM once and every scalar mix over it.

        The biLM builds a graph only when one of its parameters has `requires_grad`.

        Raises:
            ValueError / TypeError: as `BiLM.forward`.
        """
        with self.bilm.threads():  # the mixes too: the thread rule's count (BiLM.threads)
            out = run_bilm(self.bilm, char_ids, mask)
            layers = out.activations.unbind(0)
            representations = mix_representations(self.scalar_mixes, layers, out.mask, self.dropout, self.training)
        return ElmoOutput(representations, out.activations, out.mask)


def bilm_is_trainable(bilm: BiLM) -> bool:
    """Whether any parameter of `bilm` has `requires_grad`: the one rule for "frozen"."""
    return any(p.requires_grad for p in bilm.parameters())


def run_bilm(bilm: BiLM, char_ids: torch.Tensor, mask: torch.Tensor | None, frozen: bool | None = None) -> BiLMOutput:
    """`bilm(char_ids, mask)`, without an autograd graph when the biLM is frozen.

    `frozen=None` reads it from the parameters (`bilm_is_trainable`). Shared with hf_elmo.
    """
    if frozen is None:
        frozen = not bilm_is_trainable(bilm)
    with torch.no_grad() if frozen else nullcontext():  # frozen: no graph through the biLM
        return bilm(char_ids, mask)


def mix_representations(
    scalar_mixes: Iterable[nn.Module],
    layers: Sequence[torch.Tensor],
    mask: torch.Tensor,
    dropout: float,
    training: bool,
) -> list[torch.Tensor]:
    """Every scalar mix, zero at padding, with dropout in training.

    Shape: layers n_outputs x [batch, tokens, dim], mask [batch, tokens] -> [batch, tokens, dim] per mix
    """
    representations = []
    for mix in scalar_mixes:
        mixed = mix(layers, mask) * mask[..., None].to(layers[0].dtype)  # [batch, tokens, dim]
        representations.append(F.dropout(mixed, dropout, training))
    return representations
