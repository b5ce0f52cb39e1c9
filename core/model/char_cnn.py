"""The char CNN: the context-independent token encoder whose output is biLM layer 0.

Character embedding -> one convolution bank per filter width, max-pooled over the
character axis -> activation -> highway layers -> linear projection to `projection_dim`
(docs/bilm_tf.md §3; Peters et al. 2018, section 3.1; Kim et al. 2016). The highway
layers (Srivastava et al., 2015) are `Highway`, as bilm-tf applies them (docs/bilm_tf.md
§3, item 5).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from .capture import capturing
from .characters import CHAR_ID_OFFSET, PADDING_CHARACTER
from .kernels import fused_kernel
from .options import BiLMOptions
from .precision import WEIGHT_DTYPE, bf16_linear, bf16_weight, cpu_bf16_active

BLOCK_TOKENS = 32
"""Tokens per block of the convolutions without a gradient (see `CharCNN.forward`)."""

PADDING_ID = PADDING_CHARACTER + CHAR_ID_OFFSET
"""The id of the padding character that fills a token's slots after its end-of-word mark."""

HIGHWAY_BLOCK_TOKENS = 256
"""Tokens per block of the highway layers and the projection (see `CharCNN.forward`)."""


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


TrainingPath = Callable[["CharCNN", torch.Tensor], torch.Tensor]
"""A char CNN's path for a pass that differentiates it: `(char_cnn, char_ids) -> vectors`."""


def max_pool_bf16(y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The max over a bf16 convolution's windows, in float32, plus the bias.

    Shape: y [tokens, count, windows] bf16; bias [count] float32 -> [tokens, count] float32
    """
    return y.amax(dim=2).float() + bias


bf16_max_pool = fused_kernel(max_pool_bf16, dynamic=True)  # one kernel for every bank's shape
"""`max_pool_bf16` compiled: the same values (a max is exact), without torch's slow bf16 `amax`."""


class CharCNN(nn.Module):
    """Token vectors from character ids, one token at a time (no context).

    Parameters, with their bilm-tf hdf5 names:

    - `char_embedding` [n_characters - 1, embedding_dim] (`char_embed`): rows for ids
      1..261. Id 0 marks a padded position and always embeds to zeros; it is a fixed
      zero row, not a parameter, which is why the published parameter counts use 261
      rows.
    - `convolutions[i]` Conv1d(embedding_dim, count_i, width_i) (`CNN/W_cnn_i`, `b_cnn_i`).
    - `highway` (`CNN_high_k`), see `Highway`.
    - `projection` Linear(F, projection_dim) (`CNN_proj`). As in bilm-tf it exists only
      when F != projection_dim (true for every published model); otherwise it is the
      identity.

    Args:
        options: The model's hyperparameters.
        training_path: How a call that differentiates runs (e.g.
            `elmo_core.model.char_cnn_training.encode_for_training`, which the loaders pass):
            the same function, faster. None: `forward`'s blocks.

    Shape:
        char_ids: [num_tokens, max_characters_per_token] int64 -> [num_tokens, projection_dim]
    """

    def __init__(self, options: BiLMOptions, training_path: TrainingPath | None = None) -> None:
        super().__init__()
        cc = options.char_cnn
        self.max_characters_per_token = cc.max_characters_per_token
        self.n_characters = cc.n_characters
        self.char_embedding = nn.Parameter(torch.empty(cc.n_characters - 1, cc.embedding_dim, dtype=WEIGHT_DTYPE))
        self.reset_parameters()
        self.convolutions = nn.ModuleList(
            nn.Conv1d(cc.embedding_dim, count, width, dtype=WEIGHT_DTYPE) for width, count in cc.filters
        )
        self.activation = cc.activation
        self.highway = Highway(cc.n_filters, cc.n_highway)
        projection_dim = options.lstm.projection_dim
        self.projection: nn.Module = (
            nn.Linear(cc.n_filters, projection_dim, dtype=WEIGHT_DTYPE)
            if cc.n_filters != projection_dim
            else nn.Identity()
        )
        self.training_path = training_path

    def reset_parameters(self) -> None:
        """Draw `char_embedding` afresh, uniform in [-1, 1] (bilm-tf's initialiser).

        Covers the char CNN's own parameter only; its convolutions, highway and
        projection are torch modules with their own initialisation.
        """
        nn.init.uniform_(self.char_embedding, -1.0, 1.0)

    def embedding_table(self) -> torch.Tensor:
        """The full [n_characters, embedding_dim] table, with the zero row for id 0."""
        zero = self.char_embedding.new_zeros(1, self.char_embedding.shape[1])
        return torch.cat([zero, self.char_embedding], dim=0)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        if capturing():  # one block: a graph's token count is symbolic
            return self._project(self._convolve(self.embedding_table(), char_ids, False), False)
        if torch.is_grad_enabled() and self.training_path is not None and char_ids.shape[0]:
            return self.training_path(self, char_ids)
        table = self.embedding_table()
        bf16 = cpu_bf16_active(table)  # bf16 products, float32 results (elmo_core.model.precision)
        # Every token is encoded on its own, so the tokens can go in blocks. The
        # convolutions go BLOCK_TOKENS at a time: a bank's full output is
        # [tokens, count, chars - width + 1] before the max-pool (180 kB per token for the
        # original model's width-7 bank), so a block bounds it at about 6 MB whatever the
        # batch. The highway and projection go HIGHWAY_BLOCK_TOKENS at a time: their
        # weights (32 MB per highway layer of the original model) are read once per block,
        # so small blocks cost a full read of them per 32 tokens (measured: half the char
        # CNN's time), while the highway's [tokens, 2F] output is 16 kB per token.
        features = torch.cat([self._convolve(table, block, bf16) for block in char_ids.split(BLOCK_TOKENS)])
        return torch.cat([self._project(block, bf16) for block in features.split(HIGHWAY_BLOCK_TOKENS)])

    def _convolve(self, table: torch.Tensor, char_ids: torch.Tensor, bf16: bool) -> torch.Tensor:
        """Char embedding, convolutions, max-pool and activation. Shape: [tokens, chars] -> [tokens, F]"""
        x = F.embedding(char_ids, table).transpose(1, 2).to(torch.bfloat16 if bf16 else table.dtype)  # [tokens, E, W]
        pooled = []
        for conv in cast(Iterable[nn.Conv1d], self.convolutions):  # torch types a ModuleList's items as Module
            # Max over all `chars - width + 1` windows, padding-char slots included,
            # then the activation (TF order; both are monotone, so order is immaterial).
            if bf16 and conv.bias is not None:  # the bias is the same in every window: added after the max, in float32
                y = bf16_max_pool(F.conv1d(x, bf16_weight(conv.weight)), conv.bias)  # [tokens, count]
            else:
                y = conv(x).amax(dim=2)  # [tokens, count]
            pooled.append(torch.relu(y) if self.activation == "relu" else torch.tanh(y))
        return torch.cat(pooled, dim=1)  # [tokens, F]

    def _project(self, features: torch.Tensor, bf16: bool) -> torch.Tensor:
        """Highway layers, then the projection. Shape: [tokens, F] -> [tokens, P]"""
        highway = self.highway(features)
        if bf16 and isinstance(self.projection, nn.Linear):
            return bf16_linear(highway, self.projection)
        return self.projection(highway)
