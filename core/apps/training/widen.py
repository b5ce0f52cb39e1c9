"""Widen a trained biLM language model, keeping the function it computes.

Net2WiderNet (Chen et al. 2016, arXiv:1511.05641, section 3.2), then `elmo train --model`.
With cell size D -> k_D * D and projection P -> k_P * P, units are copied:

    cell unit u' of D'           copy of unit u' mod D (rows in each gate block)
    projection feature p' of P'  copy of feature p' mod P (char CNN and LSTMs)
    adaptive-softmax tail unit   copied k_P times

A weight reading copied inputs divides its columns by the number of copies. So every
layer is its old value repeated, and the softmax is unchanged.

Copies would stay equal in training, so `noise` perturbs all but the first (Net2Net).
"""

from __future__ import annotations

import dataclasses
import re

import torch

from .model import BiLMLanguageModel

_LSTM = re.compile(r"^bilm\.(forward|backward)_layers\.layers\.\d+\.(input_linear|state_linear|state_projection)\.")
_TAIL = re.compile(r"^softmax\.tail\.(\d+)\.([01])\.weight$")


def widen_language_model(
    lm: BiLMLanguageModel, *, dim: int, projection_dim: int, noise: float = 0.01, seed: int = 0
) -> BiLMLanguageModel:
    """A wider `BiLMLanguageModel` computing `lm`'s function, on the CPU, in float32.

    Args:
        lm: The trained model, not changed.
        dim: The new `lstm.dim`, a whole multiple of the old one.
        projection_dim: The new `lstm.projection_dim`, a whole multiple of the old one.
        noise: Std of the noise on the extra copies' incoming weights, relative to each
            weight's std. 0: the exact function, up to float summation order.
        seed: Seed of that noise.

    Returns:
        The wider model, with `lm`'s dropout, vocabulary size, cutoffs and div_value.

    Raises:
        ValueError: For sizes that are not whole multiples of the old ones, a negative
            noise, or a char CNN without a projection before or after.
    """
    old = lm.options
    k_d = _multiple("the LSTM cell size (--lstm-dim)", dim, old.lstm.dim)
    k_p = _multiple("the projection (--projection-dim)", projection_dim, old.lstm.projection_dim)
    if not noise >= 0:
        raise ValueError(f"noise is a relative std >= 0; got {noise}.")
    if old.char_cnn.n_filters == old.lstm.projection_dim:
        raise ValueError(
            f"the char CNN's {old.char_cnn.n_filters} filters are the token embedding itself (no projection "
            "layer), so its width cannot grow; widen a model whose filters are projected."
        )
    if old.char_cnn.n_filters == projection_dim:
        raise ValueError(
            f"a projection of {projection_dim} equals the char CNN's {old.char_cnn.n_filters} filters, where a model "
            "has no projection layer, so the old projection's work would be lost; give another width."
        )
    options = dataclasses.replace(old, lstm=dataclasses.replace(old.lstm, dim=dim, projection_dim=projection_dim))
    head = lm.head_config()
    wide = BiLMLanguageModel(
        options, head["n_classes"], dropout=lm.dropout, cutoffs=head["cutoffs"], div_value=head["div_value"]
    )
    P, D = old.lstm.projection_dim, old.lstm.dim
    unit = torch.arange(dim) % D  # new cell unit -> old
    copies = _Copies(
        feature=torch.arange(projection_dim) % P,  # new projection feature -> old
        unit=unit,
        gate=torch.cat([block * D + unit for block in range(4)]),  # new gate row -> old (blocks i, j, f, o)
        k_d=k_d,
        k_p=k_p,
    )
    generator = torch.Generator().manual_seed(seed)
    state = lm.state_dict()
    wide.load_state_dict({name: _widen(name, tensor, copies, noise, generator) for name, tensor in state.items()})
    return wide


@dataclasses.dataclass(frozen=True)
class _Copies:
    """Index maps from each widened dimension to the old one, and the copy counts k_D, k_P."""

    feature: torch.Tensor  # [projection_dim]
    unit: torch.Tensor  # [dim]
    gate: torch.Tensor  # [4 * dim]
    k_d: int
    k_p: int


def _widen(name: str, tensor: torch.Tensor, copies: _Copies, noise: float, generator: torch.Generator) -> torch.Tensor:
    """One state-dict tensor of the wider model: widened rows copied, widened columns copied and divided."""
    tensor = tensor.detach().float().cpu()
    rows = cols = None  # index maps of a widened dimension
    reads = 1  # how many copies of each input the columns read
    if name.startswith("bilm.char_cnn.projection."):
        rows = copies.feature
    elif match := _LSTM.match(name):
        part = match.group(2)
        rows = copies.feature if part == "state_projection" else copies.gate
        if name.endswith(".weight"):
            cols, reads = (copies.unit, copies.k_d) if part == "state_projection" else (copies.feature, copies.k_p)
    elif name == "softmax.head.weight":
        cols, reads = copies.feature, copies.k_p
    elif match := _TAIL.match(name):
        width = tensor.shape[0] if match.group(2) == "0" else tensor.shape[1]  # the tail's own width
        tail_unit = torch.arange(width * copies.k_p) % width
        if match.group(2) == "0":
            rows, cols, reads = tail_unit, copies.feature, copies.k_p
        else:
            cols, reads = tail_unit, copies.k_p
    widened = tensor if rows is None else tensor[rows]
    if cols is not None:
        widened = widened[:, cols] / reads
    if rows is not None and noise > 0 and widened.dim() == 2:  # incoming weights of the extra copies
        extra = ~_first_copies(rows)
        widened[extra] += noise * float(tensor.std()) * torch.randn(widened[extra].shape, generator=generator)
    return widened


def _first_copies(rows: torch.Tensor) -> torch.Tensor:
    order = torch.arange(len(rows))
    first = torch.full((int(rows.max()) + 1,), len(rows)).scatter_reduce(0, rows, order, "amin")
    return order == first[rows]


def _multiple(name: str, new: int, old: int) -> int:
    if new < 1 or new % old:
        raise ValueError(f"{name} must be a whole multiple of the model's {old} to widen it; got {new}.")
    return new // old
