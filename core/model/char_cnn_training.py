"""The char CNN of a training step: every bank as one matrix product over character windows.

`CharCNN.forward` (the model) runs each convolution bank as a 1-D convolution over all
`max_characters_per_token` slots and max-pools it; with autograd on the CPU that was the
largest part of the char CNN's training cost: oneDNN's convolutions for 16 input
channels, and above all the max-pool's backward, which scatters into a [tokens, filters,
windows] tensor through strided loops (`benchmarks/bench_train.py --breakdown`). For a
training step (`encode_for_training`, which the loaders build every `CharCNN` with as its
`training_path`, `elmo_core.runtime.parts`) the same function is computed as:

    windows   w[s, t] = char ids t[s : s + W]       W = the widest bank, s = window start
    responses y[s, t] = embed(w[s, t]) @ K           [windows * tokens, W * E] x [W * E, F]
    pooled    p[t]    = act(max_s y[s, t] + b)       [tokens, F]
    output            = projection(highway(p))       as the model's `_project`

where K stacks every bank's kernel, zero-padded to width W, so that one product gives
every filter at every window start (a bank of width w reads the first w characters of
each window). The rows are window-major, so the max-pool reduces over the outermost axis;
it is one fused kernel forward (the max and the first window that reaches it) and one
backward (the pooled gradient written at that window, zero elsewhere), and the embedding's
gradient is an `index_add_` over the 262-row table.

Slots: every slot after a token's end-of-word mark holds the padding character, so only
the windows that start before the batch's longest token ends (`longest` real slots,
marks included) differ, plus one all-padding window. The ids are cut to `longest + W`
slots, which gives `longest + 1` windows, and so the model's max over all its windows (up
to float rounding). When a token comes within W slots of `max_characters_per_token`, the
ids are padded instead and each bank's windows past its own last start in the model
(`max_characters_per_token - width`) are left out of the max.

Rows: the words are padded with words of padding characters up to `bucket_rows(words)`,
whose outputs are dropped, so that the products meet few shapes (`elmo_core.model.kernels`).

Values: the model's up to float rounding, gradients included; under autocast the products
run in the autocast dtype and the max, bias and activation in float32
(`tests/core/model/test_char_cnn_training.py`). Source: Kim et al. 2016; bilm-tf's char CNN
(docs/bilm_tf.md §3), whose convolutions run over all slots (`VALID` padding).
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
"""Under a reduced-precision autocast, words of at most this many real slots (marks
included) run as their own group, over `SHORT_SLOTS + 1` windows instead of the batch's
`longest + 1`. Most words are that short; float32 keeps one group (its values unchanged)."""


def encode_for_training(char_cnn: CharCNN, char_ids: torch.Tensor) -> torch.Tensor:
    """`char_cnn(char_ids)` for a step that differentiates it (see the module docstring).

    Args:
        char_cnn: The model's char CNN.
        char_ids: Character ids of distinct words, each row one word's
            `max_characters_per_token` slots (`elmo_core.model.characters`).

    Returns:
        The words' layer-0 vectors, as the model's `forward`; in the autocast dtype under
        autocast (the projection's), else in the weights' dtype.

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
    """The activated max-pool of every bank, float32, for words of at most `longest` real slots,
    on `bucket_rows(words)` rows (words of padding characters appended).

    Shape: char_ids [words, max_characters_per_token] -> [bucket_rows(words), n_filters]
    """
    convs = list(cast(Iterable[nn.Conv1d], char_cnn.convolutions))
    W, slots = max(conv.kernel_size[0] for conv in convs), char_ids.shape[1]
    # Rows of padding characters up to a bucketed count, dropped at the end: every product
    # then has one of a few row counts, whose oneDNN kernels are reused (`elmo_core.model.kernels`).
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
    """`F.embedding(windows, table.to(dtype))`, whose backward is one `index_add_` into the
    table (autograd's embedding backward sorts every index first, which is slower here).

    Shape: table [n_characters, E], windows [S, tokens, W] int64 -> [S, tokens, W, E] in `dtype`
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
    """Max over the window axis, each filter's windows past `last_start` left out; the
    gradient goes to the first window that reaches the max (as `torch.max`'s argmax).

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
    """(max over the windows, float32; the first window that reaches it, int32).

    Shape: responses [S, tokens, F], last_start [F] -> [tokens, F] x 2
    """
    S = responses.shape[0]
    start = torch.arange(S, device=responses.device, dtype=torch.int32)[:, None, None]
    valid = torch.where(start > last_start, float("-inf"), responses.float())
    pooled = valid.amax(dim=0)
    argmax = torch.where(valid == pooled, start, S).amin(dim=0)
    return pooled, argmax


@fused_kernel
def _scatter_to_argmax(grad: torch.Tensor, argmax: torch.Tensor, out: torch.Tensor) -> None:
    """out[s, t, f] = grad[t, f] where s == argmax[t, f], else 0.

    Shape: grad and argmax [tokens, F] -> out [S, tokens, F] (written)
    """
    start = torch.arange(out.shape[0], device=out.device, dtype=torch.int32)[:, None, None]
    out.copy_(torch.where(start == argmax, grad.to(out.dtype), 0.0))
