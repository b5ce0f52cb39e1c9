"""The adaptive softmax's log-probabilities of the targets, without full log-softmax tensors.

`torch.nn.AdaptiveLogSoftmaxWithLoss` (Grave et al. 2017) computes, per prediction with
target t in cluster k (k = 0 for the head's shortlist):

    log p(t) = log_softmax(head(x))[t]                                  k = 0
             = log_softmax(head(x))[shortlist + k - 1]
               + log_softmax(tail_k(x))[t - cutoff_k]                   k >= 1

The module writes the whole [predictions, classes] log-softmax and its gradient. On the
CPU that, not the products, takes most of the time (docs/results/speed-memory.md).
`adaptive_log_prob` computes the same numbers with one product per layer, a float32
`logsumexp`, and a backward that turns the stored logits into their gradient in place.
Row counts are bucketed, since oneDNN builds a kernel per shape (`elmo_core.model.kernels`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ...model.kernels import bucket_rows, fused_rowwise, pad_rows

ROW_BLOCK = 64
"""Rows per block of the float32 log-sum-exp and its backward on eager operators.

A block of head logits (64 x 4,002 float32) is 1 MB, so it stays in a core's cache.
Compiled (`elmo_core.model.kernels`), each is one pass.
"""


@fused_rowwise(ROW_BLOCK)
def _log_sum_exp(products: torch.Tensor, bias: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(torch.logsumexp(products.float() + bias.float(), dim=1))  # [rows, C] -> [rows]


@fused_rowwise(ROW_BLOCK)
def _logits_grad(
    products: torch.Tensor,
    bias: torch.Tensor,
    lse: torch.Tensor,
    grad: torch.Tensor,
    target: torch.Tensor,
    out: torch.Tensor,
) -> None:
    # out may be `products` itself: the logits become their gradient in place.
    classes = torch.arange(products.shape[1], device=products.device)
    g = grad[:, None]
    onehot = (classes[None, :] == target[:, None]).float()
    out.copy_(g * (onehot - torch.exp(products.float() + bias.float() - lse[:, None])))


class _LogSoftmaxAt(torch.autograd.Function):
    """`log_softmax(x @ W^T + b)[r, target[r]]` per row r, in float32, without the full log-softmax.

    Shape: x [rows, F], weight [C, F], bias [C] or None, target [rows] int64 -> [rows] float32
    """

    @staticmethod
    def forward(ctx, x, weight, bias, target):  # noqa: ANN001, ANN205
        # x @ W^T with W^T made contiguous first (one [F, C] copy): as a transposed right-hand
        # operand, oneDNN's bf16 product took 13.9 against 5.8 ms for [7826, 128] x [128, 4002].
        # The bias is added in float32 inside the fused kernels, not by addmm (8.6 against
        # 5.5 ms for the product alone at [7000, 128] x [128, 4001]).
        products = x @ weight.t().contiguous()  # [rows, C], x's dtype
        ctx.has_bias = bias is not None
        bias = (bias if bias is not None else products.new_zeros(products.shape[1])).detach()
        lse = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
        _log_sum_exp(products, bias.expand_as(products), lse)
        picked = products.gather(1, target[:, None]).squeeze(1).float() + bias.float()[target]  # [rows]
        ctx.save_for_backward(x, weight, bias, target, products, lse)
        ctx.done = False
        return picked - lse

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        if ctx.done:
            raise RuntimeError(
                "the adaptive softmax's backward reuses its stored logits and runs once per forward; "
                "run the forward again instead of backward(retain_graph=True)."
            )
        ctx.done = True
        x, weight, bias, target, products, lse = ctx.saved_tensors
        d_logits = products  # overwritten in place: the products are not needed afterwards
        _logits_grad(products, bias.expand_as(products), lse, grad.float().contiguous(), target, d_logits)
        d_x = d_logits @ weight  # [rows, F]
        if not ctx.has_bias:
            return d_x, (x.t().contiguous() @ d_logits).t(), None, None  # 5.2 against 7.5 ms as d_logits^T @ x
        # d_W and d_b as one product: [x^T; 1] @ d_logits, the ones row giving the column sums
        # (accumulated in float32 inside the product; ATen's sum over [7000, 4001] bf16 took 8.3 ms).
        d_weight_bias = torch.cat([x.t(), x.new_ones(1, x.shape[0])]).contiguous() @ d_logits  # [F + 1, C]
        return d_x, d_weight_bias[:-1].t(), d_weight_bias[-1], None


def adaptive_log_prob(
    softmax: nn.AdaptiveLogSoftmaxWithLoss, hidden: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """`softmax(hidden, target).output`: the log-probability of each target, in float32.

    Args:
        softmax: The module whose parameters are used. Its `forward` is not called.
        hidden: One feature vector per prediction. Autocast sets the products' dtype.
        target: Class ids in [0, softmax.n_classes).

    Returns:
        Natural-log probabilities in float32, differentiable in `hidden` and the parameters.

    Shape:
        hidden: [rows, in_features]
        target: [rows] int64
        returns: [rows] float32

    Raises:
        ValueError: For a target outside [0, n_classes), as the module does.
    """
    if target.numel() and (int(target.min()) < 0 or int(target.max()) >= softmax.n_classes):
        raise ValueError(
            f"targets must lie in [0, {softmax.n_classes}); found values from {int(target.min())} to "
            f"{int(target.max())}."
        )
    device_type = hidden.device.type
    dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else hidden.dtype
    num_rows = hidden.shape[0]
    # Every product runs over a bucketed number of rows (`elmo_core.model.kernels`): zero
    # rows appended to the head's input and repeated rows to each cluster's, whose results
    # are dropped (and so get no gradient).
    padded = bucket_rows(num_rows)
    with torch.autocast(device_type, enabled=False):
        x = pad_rows(hidden.to(dtype), padded)  # [padded, F]
        cutoffs = torch.tensor(softmax.cutoffs, device=target.device)  # [c_0, .., n_classes]
        cluster = torch.bucketize(target, cutoffs, right=True)  # 0 = the head's shortlist, k = tail k
        in_head = cluster == 0
        head_target = pad_rows(torch.where(in_head, target, softmax.shortlist_size + cluster - 1), padded)
        head = softmax.head
        bias = head.bias.to(dtype) if head.bias is not None else None
        log_prob = _LogSoftmaxAt.apply(x, head.weight.to(dtype), bias, head_target)[:num_rows]  # [rows]
        for k, pair in enumerate(cast(Iterable[nn.Sequential], softmax.tail), start=1):
            projection, output = cast(nn.Linear, pair[0]), cast(nn.Linear, pair[1])
            rows = (cluster == k).nonzero().squeeze(1)
            n_k = rows.numel()
            if n_k == 0:
                continue
            rows_padded = torch.cat([rows, rows[:1].expand(bucket_rows(n_k) - n_k)])  # its first row repeated
            features = F.linear(x.index_select(0, rows_padded), projection.weight.to(dtype))  # [n_k+, F / div^k]
            relative = target.index_select(0, rows_padded) - softmax.cutoffs[k - 1]
            in_cluster = _LogSoftmaxAt.apply(features, output.weight.to(dtype), None, relative)[:n_k]  # [n_k]
            log_prob = log_prob.index_add(0, rows, in_cluster)
    return log_prob
