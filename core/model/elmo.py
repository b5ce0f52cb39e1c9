"""ELMo = a biLM (frozen unless unfrozen) + one scalar mix per output representation + dropout."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .bilm import BiLM, BiLMOutput
from .options import BiLMOptions
from .scalar_mix import ScalarMix

__all__ = ["Elmo", "ElmoOutput", "bilm_is_trainable", "mix_representations", "run_bilm"]


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

    The module is the model alone (its biLM runs the step loop, with no cache); vectors
    for tokenised text come from the runtime's `elmo_core.embed_sentences(elmo, ...)`,
    which also hands the biLM its runtime (`elmo_core.attach_runtime`: the recurrence
    path, the thread rule and a layer-0 cache) if it has none; the loaders do so at load.

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
        `requires_grad` at this call (see `run_bilm`), so gradients reach exactly the
        parameters the user unfroze, whenever they unfroze them.

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
