"""The char CNN: the context-free token encoder whose output is biLM layer 0.

Character embedding, one convolution bank per filter width max-pooled over the characters,
activation, highway layers, projection to `projection_dim` (docs/bilm_tf.md §3,
Peters et al. 2018 §3.1, Kim et al. 2016).
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
from .precision import WEIGHT_DTYPE, bf16_linear, bf16_matmul, bf16_product, cpu_bf16_active

BLOCK_TOKENS = 32
"""Tokens per block of the convolutions without a gradient (see `CharCNN.forward`)."""

BF16_BLOCK_TOKENS = 128
"""`BLOCK_TOKENS` under bf16 inference: 11 MB of bf16 windows for the original model's widest bank."""

PADDING_ID = PADDING_CHARACTER + CHAR_ID_OFFSET
"""The id of the padding character that fills a token's slots after its end-of-word mark."""

HIGHWAY_BLOCK_TOKENS = 256
"""Tokens per block of the highway layers and the projection (see `CharCNN.forward`)."""


class Highway(nn.Module):
    """Highway layers (Srivastava et al. 2015) as bilm-tf applies them, with a ReLU candidate.

    `y = gate * relu(x W_transform + b) + (1 - gate) * x`, `gate = sigmoid(x W_carry + b)`.
    One `Linear(F, 2F)` per layer: rows `[:F]` transform, `[F:]` carry.

    Args:
        size: F, the char CNN's `n_filters`.
        n_highway: Layers stacked (2 in the published models). 0: the identity.
    """

    def __init__(self, size: int, n_highway: int) -> None:
        super().__init__()
        self.size = size
        self.layers = nn.ModuleList(nn.Linear(size, 2 * size, dtype=WEIGHT_DTYPE) for _ in range(n_highway))
        for layer in cast(Iterable[nn.Linear], self.layers):  # torch types a ModuleList's items as Module
            self.init_carry_bias(layer)

    def init_carry_bias(self, layer: nn.Linear) -> None:
        """Set b_carry (rows [F:] of `layer`'s bias) to bilm-tf's -2: a new layer starts by passing its input."""
        nn.init.constant_(layer.bias[self.size :], -2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bf16 = cpu_bf16_active(x)  # bf16 products, float32 gating (elmo_core.model.precision)
        for layer in cast(Iterable[nn.Linear], self.layers):
            if bf16:  # the product in bf16, then the bias and the gating in one pass
                x = bf16_highway_step(bf16_product(x, layer.weight), cast(torch.Tensor, layer.bias).detach(), x)
            else:
                x = highway_step(layer(x), None, x)
        return x


def highway_step(y: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    """One highway layer from its product `y = x @ [W_transform; W_carry]`.

    With `bias`, the bias is added to `y` in float32. Without, `y` holds it and keeps its dtype.

    Shape: y [..., 2F], bias [2F], x [..., F] -> [..., F]
    """
    candidate, gate = (y if bias is None else y.float() + bias).chunk(2, dim=-1)  # 2 x [..., F]
    gate = torch.sigmoid(gate)
    return gate * torch.relu(candidate) + (1 - gate) * x


bf16_highway_step = fused_kernel(highway_step, dynamic=True)
"""`highway_step` in one pass: the same values as the eager operators."""


TrainingPath = Callable[["CharCNN", torch.Tensor], torch.Tensor]
"""A char CNN's path for a pass that differentiates it: `(char_cnn, char_ids) -> vectors`."""


def max_pool_bf16(y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The max over a bf16 bank's windows [tokens, windows, count], in float32, plus the bias."""
    return y.amax(dim=1).float() + bias


bf16_max_pool = fused_kernel(max_pool_bf16, dynamic=True)  # one kernel for every bank's shape
"""`max_pool_bf16` compiled: the same values (a max is exact), without torch's slow bf16 `amax`."""


class CharCNN(nn.Module):
    """Token vectors from character ids, one token at a time (no context).

    Parameters, with their bilm-tf names:

    - `char_embedding` (`char_embed`): ids 1..261. Id 0 (padding) embeds to a fixed zero row.
    - `convolutions[i]` Conv1d(embedding_dim, count_i, width_i) (`CNN/W_cnn_i`, `b_cnn_i`).
    - `highway` (`CNN_high_k`), see `Highway`.
    - `projection` Linear(F, projection_dim) (`CNN_proj`), only when F != projection_dim.

    Args:
        options: The model's hyperparameters.
        training_path: The path of a call that differentiates. None: `forward`'s blocks.

    Shape: char_ids [num_tokens, max_characters_per_token] int64 -> [num_tokens, projection_dim]
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
        """Draw `char_embedding` uniform in [-1, 1] (bilm-tf's initialiser). Other layers keep torch's."""
        nn.init.uniform_(self.char_embedding, -1.0, 1.0)

    def embedding_table(self) -> torch.Tensor:
        """The [n_characters, embedding_dim] table, with the zero row for id 0."""
        zero = self.char_embedding.new_zeros(1, self.char_embedding.shape[1])
        return torch.cat([zero, self.char_embedding], dim=0)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        if capturing():  # one block: a graph's token count is symbolic
            return self._project(self._convolve(self.embedding_table(), char_ids, False), False)
        if torch.is_grad_enabled() and self.training_path is not None and char_ids.shape[0]:
            return self.training_path(self, char_ids)
        table = self.embedding_table()
        bf16 = cpu_bf16_active(table)  # bf16 products, float32 results (elmo_core.model.precision)
        if bf16:
            return self._encode_bf16(table, char_ids)
        # Tokens are encoded one by one, so they go in blocks. A conv block bounds a bank's
        # output before the max-pool (6 MB for the original model's widest bank). The highway
        # and projection read their weights once per block: larger blocks (16 kB per token).
        features = torch.cat([self._convolve(table, block, False) for block in char_ids.split(BLOCK_TOKENS)])
        return torch.cat([self._project(block, False) for block in features.split(HIGHWAY_BLOCK_TOKENS)])

    def _encode_bf16(self, table: torch.Tensor, char_ids: torch.Tensor) -> torch.Tensor:
        # Words shortest first, each block cut to its longest word's slots plus the widest
        # bank's width: the windows cut off hold only padding, and every bank keeps one such
        # window, so each max is the model's. Most words fill a fraction of the 50 slots.
        real = (char_ids != PADDING_ID).sum(dim=1)  # [tokens] real slots, marks included
        order = real.argsort(stable=True)
        widest = max(cast(nn.Conv1d, conv).kernel_size[0] for conv in self.convolutions)
        features = []
        for block, block_real in zip(char_ids[order].split(BF16_BLOCK_TOKENS), real[order].split(BF16_BLOCK_TOKENS)):
            slots = min(char_ids.shape[1], int(block_real.max()) + widest)
            features.append(self._convolve(table, block[:, :slots], True))
        vectors = torch.cat([self._project(block, True) for block in torch.cat(features).split(HIGHWAY_BLOCK_TOKENS)])
        return vectors.index_select(0, order.argsort())  # back to the words' order

    def _convolve(self, table: torch.Tensor, char_ids: torch.Tensor, bf16: bool) -> torch.Tensor:
        x = F.embedding(char_ids, table)  # [tokens, W, E]
        x = x.to(torch.bfloat16) if bf16 else x.transpose(1, 2)  # [tokens, E, W] for conv1d
        pooled = []
        for conv in cast(Iterable[nn.Conv1d], self.convolutions):  # torch types a ModuleList's items as Module
            # Max over all windows, padding-char slots included, then the activation (TF order).
            if bf16:  # one product over all windows, the bias (the same in each) added after the max in float32
                windows = x.unfold(1, conv.kernel_size[0], 1).flatten(2)  # [tokens, windows, E * width]
                y = bf16_matmul(windows.flatten(0, 1), conv.weight).view(*windows.shape[:2], -1)  # [.., count]
                y = bf16_max_pool(y, cast(torch.Tensor, conv.bias).detach())  # detached: a dynamic shape, one kernel
            else:
                y = conv(x).amax(dim=2)  # [tokens, count]
            pooled.append(torch.relu(y) if self.activation == "relu" else torch.tanh(y))
        return torch.cat(pooled, dim=1)  # [tokens, F]

    def _project(self, features: torch.Tensor, bf16: bool) -> torch.Tensor:
        highway = self.highway(features)
        if bf16 and isinstance(self.projection, nn.Linear):
            return bf16_linear(highway, self.projection)
        return self.projection(highway)
