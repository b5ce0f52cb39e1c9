"""The char CNN of a training step: every bank as one matrix product over character windows.

Under autograd on the CPU, the model's convolutions and max-pool backward are slow.
`encode_for_training` (the loaders' `training_path`) computes the same function:

    windows   w[s, t] = char ids t[s : s + W]        W = the widest bank
    responses y[s, t] = embed(w[s, t]) @ K            K: every bank's kernel, zero-padded to W
    pooled    p[t]    = act(max_s y[s, t] + b)
    output            = projection(highway(p))

Windows past the longest word hold only padding, so the ids are cut to `longest + W`
slots. Values equal the model's up to float rounding. Source: Kim et al. 2016, bilm-tf.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from .char_cnn import PADDING_ID, CharCNN
from .kernels import bucket_rows, fused_kernel, pad_rows

SHORT_SLOTS = 12
"""Under bf16, words of at most this many real slots (marks included) run as their own
group over `SHORT_SLOTS + 1` windows. float32 keeps one group: its values stay as they were."""


def encode_for_training(char_cnn: CharCNN, char_ids: torch.Tensor) -> torch.Tensor:
    """`char_cnn(char_ids)` for a step that differentiates it.

    Args:
        char_cnn: The model's char CNN.
        char_ids: Character ids of distinct words (`elmo_core.model.characters`).

    Returns:
        The words' layer-0 vectors, in the autocast dtype under autocast.

    Shape: char_ids [tokens, max_characters_per_token] int64 -> [tokens, projection_dim]
    """
    device_type = char_ids.device.type
    table = char_cnn.embedding_table()
    dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else table.dtype
    num_words = char_ids.shape[0]
    real = (char_ids != PADDING_ID).sum(dim=1)  # [tokens] real slots per word
    short = real <= SHORT_SLOTS
    if dtype == torch.float32 or bool(short.all()) or not bool(short.any()):
        features = _pooled_features(char_cnn, table, char_ids, int(real.max()), dtype)  # [bucket_rows(tokens), F]
    else:
        order = torch.cat([short.nonzero().squeeze(1), (~short).nonzero().squeeze(1)])  # [tokens]: short first
        n_short = int(short.sum())
        features = torch.cat(
            [
                _pooled_features(char_cnn, table, char_ids[order[:n_short]], SHORT_SLOTS, dtype)[:n_short],
                _pooled_features(char_cnn, table, char_ids[order[n_short:]], int(real.max()), dtype)[
                    : num_words - n_short
                ],
            ]
        )
        restore = torch.empty_like(order).scatter_(0, order, torch.arange(num_words, device=order.device))
        features = pad_rows(features.index_select(0, restore), bucket_rows(num_words))  # [bucket_rows(tokens), F]
    return char_cnn.projection(char_cnn.highway(features))[:num_words]


def _pooled_features(
    char_cnn: CharCNN, table: torch.Tensor, char_ids: torch.Tensor, longest: int, dtype: torch.dtype
) -> torch.Tensor:
    # [words, slots] -> [bucket_rows(words), n_filters] float32: every bank's activated max-pool
    convs = list(cast(Iterable[nn.Conv1d], char_cnn.convolutions))
    W, slots = max(conv.kernel_size[0] for conv in convs), char_ids.shape[1]
    # Words of padding characters up to a bucketed count, so oneDNN reuses its kernels
    char_ids = pad_rows(char_ids, bucket_rows(char_ids.shape[0]), value=PADDING_ID)
    if longest + W <= slots:
        ids = char_ids[:, : longest + W]  # windows 0 .. longest: every real one and one of padding only
    else:  # windows up to the last slot; each bank's past its own last start are masked
        ids = F.pad(char_ids, (0, W - 1), value=PADDING_ID)
    device_type = char_ids.device.type
    E = table.shape[1]
    last_start = torch.cat(
        [torch.full((conv.out_channels,), slots - conv.kernel_size[0], dtype=torch.int32) for conv in convs]
    ).to(char_ids.device)  # [F]: the model's last window start per filter
    with torch.autocast(device_type, enabled=False):
        windows = ids.t().unfold(0, W, 1)  # [S, tokens, W], window-major
        S, tokens = windows.shape[:2]
        x = _WindowEmbedding.apply(table, windows, dtype).reshape(S * tokens, W * E)
        kernel = torch.cat(
            [F.pad(conv.weight.permute(2, 1, 0), (0, 0, 0, 0, 0, W - conv.kernel_size[0])) for conv in convs], dim=2
        )  # [W, E, F]: tap j of every filter, zero past a bank's width
        responses = torch.mm(x, kernel.reshape(W * E, -1).to(dtype)).view(S, tokens, -1)  # [S, tokens, F]
        pooled = _MaxOverWindows.apply(responses, last_start)  # [tokens, F] float32
        bias = torch.cat([cast(torch.Tensor, conv.bias) for conv in convs])
        features = pooled + bias.float()
        return torch.relu(features) if char_cnn.activation == "relu" else torch.tanh(features)


class _WindowEmbedding(torch.autograd.Function):
    """`F.embedding(windows, table.to(dtype))`, its backward one `index_add_` (autograd's sorts the ids).

    Shape: table [n_characters, E], windows [S, tokens, W] int64 -> [S, tokens, W, E]
    """

    @staticmethod
    def forward(ctx, table, windows, dtype):  # noqa: ANN001, ANN205
        ctx.save_for_backward(windows)
        ctx.table_shape, ctx.table_dtype = table.shape, table.dtype
        return F.embedding(windows, table.to(dtype))

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        (windows,) = ctx.saved_tensors
        rows = grad.reshape(-1, grad.shape[-1]).to(ctx.table_dtype)
        d_table = rows.new_zeros(ctx.table_shape).index_add_(0, windows.reshape(-1), rows)
        return d_table, None, None


class _MaxOverWindows(torch.autograd.Function):
    """Max over the windows up to each filter's `last_start`. The gradient goes to the first maximum.

    Shape: responses [S, tokens, F], last_start [F] int32 -> [tokens, F] float32
    """

    @staticmethod
    def forward(ctx, responses, last_start):  # noqa: ANN001, ANN205
        pooled, argmax = _max_over_windows(responses.detach(), last_start)  # (Dynamo would read .grad of a non-leaf)
        ctx.save_for_backward(argmax)
        ctx.responses_shape, ctx.responses_dtype = responses.shape, responses.dtype
        return pooled

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        (argmax,) = ctx.saved_tensors
        d_responses = grad.new_empty(ctx.responses_shape, dtype=ctx.responses_dtype)
        _scatter_to_argmax(grad, argmax, d_responses)
        return d_responses, None


@fused_kernel
def _max_over_windows(responses: torch.Tensor, last_start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    S = responses.shape[0]
    start = torch.arange(S, device=responses.device, dtype=torch.int32)[:, None, None]
    valid = torch.where(start > last_start, float("-inf"), responses.float())
    pooled = valid.amax(dim=0)
    argmax = torch.where(valid == pooled, start, S).amin(dim=0)
    return pooled, argmax


@fused_kernel
def _scatter_to_argmax(grad: torch.Tensor, argmax: torch.Tensor, out: torch.Tensor) -> None:
    start = torch.arange(out.shape[0], device=out.device, dtype=torch.int32)[:, None, None]
    out.copy_(torch.where(start == argmax, grad.to(out.dtype), 0.0))
