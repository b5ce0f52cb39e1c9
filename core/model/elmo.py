"""ELMo = a biLM (frozen unless unfrozen) + one scalar mix per output representation + dropout.

## The scalar mix

The task-specific weighting of biLM layers (Peters et al. 2018, equation 1):

    ELMo_task = gamma * sum_k s_k * h_k,   s = softmax(w)

The formula is written once, here, for every face: `weighted_layer_sum` (operators
only, so it runs on torch tensors and on numpy/cupy arrays) and `softmax_weights`. The
`ScalarMix` module calls them through `scalar_mix` and trains by autograd; spacy_elmo's
thinc layer calls them on its arrays, with `weighted_layer_sum_backward` and
`softmax_weights_backward` as its gradients, and its `doc.tensor` is `weighted_layer_sum`.
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
    """s = softmax(w): the weight each layer gets; sums to 1.

    Shape:
        scalar_weights: [n_outputs] float -> [n_outputs], same dtype and device
    """
    return torch.softmax(scalar_weights, dim=0)


def weighted_layer_sum(layers: Sequence[ArrayT] | ArrayT, weights: ArrayT, gamma: ArrayT) -> ArrayT:
    """gamma * (s_0 * h_0 + s_1 * h_1 + ...), accumulated in this fixed order.

    Only `*` and `+` are used, so the layers may be torch tensors or numpy/cupy arrays;
    the fixed order makes the same inputs give the same bits on every run.

    Args:
        layers: The `n_outputs` layers h_k, each [..., dim].
        weights: s, one number (0-d tensor or numpy scalar) per layer, already
            normalised and of the layers' dtype.
        gamma: The scale, a number or a tensor/array broadcastable to a layer ([1]).

    Returns:
        The mix, of the shape and dtype of one layer.
    """
    mixed = weights[0] * layers[0]
    for weight, layer in zip(weights[1:], layers[1:]):
        mixed = mixed + weight * layer  # [..., dim]
    return gamma * mixed


def weighted_layer_sum_backward(weights: ArrayT, gamma: ArrayT, layer_dots: ArrayT) -> tuple[ArrayT, ArrayT, ArrayT]:
    """The gradients of `weighted_layer_sum`, for a face that has no autograd (thinc).

    With m = gamma * sum_k s_k h_k, a gradient dm for m, and g_k = sum(dm * h_k) (the
    caller's dot products, which it computes best with its own library):

        dh_k = (gamma * s_k) * dm      ds_k = gamma * g_k      dgamma = sum_k s_k * g_k

    Operators only, on the [n_outputs] vectors, so numpy/cupy arrays and torch tensors
    alike; torch modules use autograd instead.

    Args:
        weights: s, [n_outputs].
        gamma: The scale.
        layer_dots: g, [n_outputs].

    Returns:
        (layer_scales: gamma * s, so that dh_k = layer_scales[k] * dm; ds: [n_outputs];
        dgamma: 0-d). Take ds through `softmax_weights_backward` for the gradient of w.
    """
    return gamma * weights, gamma * layer_dots, (weights * layer_dots).sum()


def softmax_weights_backward(weights: ArrayT, d_weights: ArrayT) -> ArrayT:
    """The gradient for w, given s = softmax(w) and the gradient for s: s * (ds - sum(s * ds)).

    Operators only, as `weighted_layer_sum_backward`.
    """
    return weights * (d_weights - (weights * d_weights).sum())


def scalar_mix(layers: Sequence[torch.Tensor], scalar_weights: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """gamma * sum_k softmax(w)_k * h_k (paper equation 1), differentiable in all three inputs.

    Args:
        layers: The `n_outputs` layers h_k.
        scalar_weights: w, before the softmax.
        gamma: The scale.

    Shape:
        layers: n_outputs x [..., dim] float; scalar_weights: [n_outputs]; gamma: [1]
        output: [..., dim], the layers' dtype
    """
    dtype = layers[0].dtype
    return weighted_layer_sum(layers, softmax_weights(scalar_weights).to(dtype), gamma.to(dtype))


class ScalarMix(nn.Module):
    """ELMo_task = gamma * sum_k softmax(w)_k * h_k  (paper equation 1).

    Args:
        n_outputs: Number of output layers mixed: `n_layers + 1` (layer 0 = the token
            layer, then every LSTM layer). Everywhere in elmo-bilm `n_outputs` means
            this count; the number of LSTM layers is the option `n_layers`.
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
        scalar_weights: w, shape [n_outputs].
        gamma: shape [1].

    Shape:
        activations: [n_outputs, batch, tokens, dim], or a sequence of n_outputs
            tensors [batch, tokens, dim]; mask: [batch, tokens] bool
        output: [batch, tokens, dim]

    Raises:
        ValueError: if the number of layers given to `forward` differs from `n_outputs`,
            or `layer_norm_scope` is not "sentence" or "batch".
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
        """Set w and gamma to their starting values (`initial_scalar_parameters`, `gamma`).

        The constructor calls it; so does hf_elmo for a mix that a checkpoint lacks.
        """
        with torch.no_grad():
            self.scalar_weights.copy_(torch.tensor(self.initial_scalar_parameters))
            self.gamma.fill_(self.initial_gamma)

    @property
    def normalized_weights(self) -> torch.Tensor:
        """softmax(w): the weight given to each layer, [n_outputs], detached."""
        return softmax_weights(self.scalar_weights.detach())

    def forward(
        self, activations: torch.Tensor | Sequence[torch.Tensor], mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mix of the layers; see the class docstring.

        Given a sequence of layer tensors, the mix reads those very tensors, so gradients
        reach each of them (what `ElmoModel` returns as `hidden_states`).
        """
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


class ElmoOutput(NamedTuple):
    """What `Elmo.forward` returns.

    Attributes:
        representations: One scalar-mixed tensor per output representation,
            each [batch, tokens, 2 * projection_dim], zero at padded positions.
        activations: Every biLM layer, [n_layers + 1, batch, tokens, 2 * projection_dim].
        mask: bool [batch, tokens], True = real token.
    """

    representations: list[torch.Tensor]
    activations: torch.Tensor
    mask: torch.Tensor


class Elmo(nn.Module):
    """Contextual word vectors: a biLM whose layers are mixed per task (paper section 3.2).

    Args:
        options: biLM hyperparameters. The weights are loaded separately, e.g.
            `elmo_core.load_bilm_tf(elmo, "weights.hdf5")` or `load_model_folder(dir)`.
        num_output_representations: How many independent scalar mixes to compute over
            one biLM run (1 for most tasks; the paper uses 2 for SQuAD/SNLI-style models
            that add ELMo at both the input and the output of their encoder).
        dropout: Dropout on each representation during training (AllenNLP's default
            0.5; 0 disables it). Never applied in `eval()` mode.
        do_layer_norm: See `ScalarMix`; off by default, as the authors recommend.
        layer_norm_scope: See `ScalarMix`: "sentence" (default, batch-invariant) or
            "batch" (bilm-tf's whole-batch statistics).
        keep_sentence_boundaries: Also return the `<S>`/`</S>` positions.
        requires_grad: The biLM parameters' initial `requires_grad`. Off by default: the
            biLM is frozen, runs without building an autograd graph, and only the scalar
            mixes (w and gamma per representation) are trainable. Whether the biLM is
            frozen is read from its parameters at every call, so unfreezing it later
            (`elmo.bilm.requires_grad_(True)`, or any subset, such as
            `elmo.bilm.char_cnn` or one LSTM layer) fine-tunes exactly those parameters.
        stateful: Carry LSTM states across batches as the original did (see `BiLM`).
        scalar_mix_parameters: Fixed mix weights w (one per layer). When given, the
            mixes are not trainable.
        recurrence, token_cache, char_cnn_training: The biLM's parts (see `BiLM`). None
            (the default): the reference step loop with torch's threads, no cache.
            `load_elmo` builds the model with the fastest parts for the machine.

    Shape:
        char_ids: [batch, tokens, chars] int64 (no <S>/</S>); mask: [batch, tokens] bool
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
        """Whether any biLM parameter has `requires_grad` now (then `forward` builds a graph).

        Setting it sets every biLM parameter's `requires_grad` (`bilm.requires_grad_`).
        """
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
        """Number of output layers: `n_layers + 1` (layer 0 = token layer, then each LSTM layer)."""
        return self.options.n_outputs

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> ElmoOutput:
        """Run the biLM once and every scalar mix over it.

        The biLM builds an autograd graph when any of its parameters has
        `requires_grad` at this call. So gradients reach exactly the parameters the
        user unfroze, whenever they unfroze them.

        Raises:
            ValueError / TypeError: as `BiLM.forward`.
        """
        with self.bilm.threads():  # the mixes too: the thread rule's count (BiLM.threads)
            out = run_bilm(self.bilm, char_ids, mask)
            layers = out.activations.unbind(0)
            representations = mix_representations(self.scalar_mixes, layers, out.mask, self.dropout, self.training)
        return ElmoOutput(representations, out.activations, out.mask)


def bilm_is_trainable(bilm: BiLM) -> bool:
    """Whether any parameter of `bilm` has `requires_grad` now: the one rule for "frozen"."""
    return any(p.requires_grad for p in bilm.parameters())


def run_bilm(bilm: BiLM, char_ids: torch.Tensor, mask: torch.Tensor | None, frozen: bool | None = None) -> BiLMOutput:
    """`bilm(char_ids, mask)`, without an autograd graph when the biLM is frozen.

    Shared by `Elmo.forward` and hf_elmo's `ElmoModel.forward`.

    Args:
        bilm: The biLM.
        char_ids, mask: As `BiLM.forward`.
        frozen: None (the default) reads it from the parameters at this call: frozen
            when no biLM parameter has `requires_grad` (`bilm_is_trainable`). With some
            unfrozen (all, the char CNN, one LSTM layer), the graph is built and only
            those parameters get gradients; the others are constants in it, as in any
            PyTorch module. True/False force it (True: no graph whatever the parameters).

    Raises:
        ValueError / TypeError: as `BiLM.forward`.
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
    """Every scalar mix of the biLM layers, zero at padded positions, with dropout while training.

    The mixes read the very tensors in `layers`, so that gradients reach each of them
    (hf_elmo returns them as `hidden_states`).

    Args:
        scalar_mixes: One `ScalarMix` per output representation.
        layers: The `n_outputs` (= n_layers + 1) biLM layers.
        mask: True for real tokens.
        dropout: Dropout probability on each representation, applied only if `training`.
        training: Whether the calling module is in training mode.

    Shape:
        layers: n_outputs x [batch, tokens, dim]; mask: [batch, tokens] bool
        output: one [batch, tokens, dim] per mix
    """
    representations = []
    for mix in scalar_mixes:
        mixed = mix(layers, mask) * mask[..., None].to(layers[0].dtype)  # [batch, tokens, dim]
        representations.append(F.dropout(mixed, dropout, training))
    return representations
