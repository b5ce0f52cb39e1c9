"""The masked recurrence as one `scan` per layer: what a graph for deployment runs.

Such a graph has a symbolic batch and length: it cannot sort rows nor unroll the steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .lstm import LSTMStack, lstm_gates, reverse_index
from .paired import _paired_weights


def scan_stacks(
    stacks: tuple[LSTMStack, LSTMStack], tokens: torch.Tensor, lengths: torch.Tensor
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Both LSTM stacks over a padded batch, with no shape or branch that depends on values.

    Returns each layer's forward and backward outputs, [steps, batch, P] in batch order and
    forward time, zero past a row's length.
    """
    forward_stack, backward_stack = stacks
    num_steps = tokens.shape[1]
    x = tokens.transpose(0, 1)  # [steps, batch, P]
    reverse = reverse_index(lengths, num_steps)[..., None]  # [steps, batch, 1]

    def flip(t: torch.Tensor) -> torch.Tensor:
        return t.gather(0, reverse.expand(-1, -1, t.shape[-1]))

    keep = torch.arange(num_steps, device=tokens.device)[:, None, None, None] < lengths[None, None, :, None]
    layer_input = torch.stack([x, flip(x)])  # [2, steps, batch, P], the backward rows reversed
    outputs = []
    for k, (fc, bc) in enumerate(zip(forward_stack.layers, backward_stack.layers)):
        if forward_stack.dropout:
            layer_input = F.dropout(layer_input, forward_stack.dropout, forward_stack.training)
        y = _scanned_layer(fc, bc, layer_input, keep)
        if k > 0 and forward_stack.use_skip_connections:
            y = y + layer_input  # the residual adds the (dropped-out) input, as LSTMStack does
        outputs.append(y)
        layer_input = y
    return [y[0] for y in outputs], [flip(y[1]) for y in outputs]


def _scanned_layer(forward_cell, backward_cell, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    """One layer, both directions. Shape: x [2, steps, batch, in], keep [steps, 1, batch, 1] -> [2, steps, batch, P]"""
    from torch._higher_order_ops.scan import scan  # torch's prototype: imported only where a graph is captured

    w_x, bias, w_h, w_p = _paired_weights(forward_cell, backward_cell)
    _, num_steps, batch_size, _ = x.shape
    D, P = forward_cell.dim, forward_cell.projection_dim
    cell_clip, proj_clip = forward_cell.cell_clip, forward_cell.proj_clip
    pre = torch.baddbmm(bias, x.reshape(2, num_steps * batch_size, -1), w_x)  # [2, steps * batch, 4D]
    pre = pre.view(2, num_steps, batch_size, 4 * D).transpose(0, 1)  # [steps, 2, batch, 4D]

    def step(state: tuple[torch.Tensor, torch.Tensor], inputs: tuple[torch.Tensor, torch.Tensor]):  # noqa: ANN202
        h, c = state  # [2, batch, P], [2, batch, D]
        pre_t, keep_t = inputs  # [2, batch, 4D], [1, batch, 1]
        z = torch.baddbmm(pre_t, h, w_h)  # [2, batch, 4D]
        c_t, gated = lstm_gates(z.flatten(0, 1), c.flatten(0, 1), cell_clip)  # [2 * batch, D] each
        h_t = torch.bmm(gated.view_as(c), w_p)  # [2, batch, P]
        if proj_clip:
            h_t = h_t.clamp(-proj_clip, proj_clip)
        # A row past its end keeps its state and writes zeros.
        return (torch.where(keep_t, h_t, h), torch.where(keep_t, c_t.view_as(c), c)), h_t * keep_t

    h0 = pre.new_zeros(2, batch_size, P)
    c0 = pre.new_zeros(2, batch_size, D)
    _, out = scan(step, (h0, c0), (pre, keep))  # out [steps, 2, batch, P]
    return out.transpose(0, 1)  # [2, steps, batch, P]
