"""Training recurrence: both directions of a clip-free layer in one autograd Function,
with the backward pass through time written out.

Per step, both directions run as one batched product on the rows still going (rows sorted
longest first): z = x W_x + h W_h + b, c = f c + i j, h = (o tanh c) W_P. The backward
walks the steps in reverse. Each weight gradient is one product over all steps.

Products run in the autocast dtype. The cell state and element-wise math stay float32,
one fused kernel per step each way (`elmo_core.model.kernels`). Row counts are bucketed,
so oneDNN reuses its kernels. Only clip-free cells take this path.
"""

from __future__ import annotations

import torch

from ..kernels import bucket_rows, fused_kernel
from .dropout import fast_dropout
from .lstm import FORGET_BIAS, LSTMStack, reverse_index, sort_rows

_ORDER = (0, 2, 3, 1)  # block k of the products' order i, f, o, j is bilm-tf's block _ORDER[k] (i, j, f, o)


def _operand(weights: tuple[torch.Tensor, torch.Tensor], dtype: torch.dtype, gates: bool) -> torch.Tensor:
    # Two `Linear` weights [out, in] -> one right-hand operand [2, in, out]
    out_features, in_features = weights[0].shape
    operand = weights[0].new_empty(2, in_features, out_features, dtype=dtype)
    width = out_features // 4 if gates else out_features
    for d, w in enumerate(weights):
        for k, block in enumerate(_ORDER if gates else (0,)):
            operand[d, :, k * width : (k + 1) * width].copy_(w.detach()[block * width : (block + 1) * width].t())
    return operand


def _parameter_grad(grad: torch.Tensor, like: torch.Tensor, gates: bool) -> torch.Tensor:
    out = torch.empty_like(like, memory_format=torch.contiguous_format)
    width = out.shape[0] // 4 if gates else out.shape[0]
    for k, block in enumerate(_ORDER if gates else (0,)):
        out[block * width : (block + 1) * width].copy_(grad[:, k * width : (k + 1) * width].t())
    return out


def _layer_operands(cells, dtype: torch.dtype):  # noqa: ANN001, ANN202
    D = cells[0].dim
    bias = torch.stack([c.input_linear.bias.detach() for c in cells])[:, None, :]  # [2, 1, 4D], i, j, f, o
    bias = torch.cat([bias[..., k * D : (k + 1) * D] for k in _ORDER], dim=-1)
    bias[..., D : 2 * D] += FORGET_BIAS  # block f in the order i, f, o, j
    return (  # W_x [2, in, 4D], B [2, 1, 4D], W_h [2, P, 4D], W_P [2, D, P]
        _operand((cells[0].input_linear.weight, cells[1].input_linear.weight), dtype, gates=True),
        bias.to(dtype),
        _operand((cells[0].state_linear.weight, cells[1].state_linear.weight), dtype, gates=True),
        _operand((cells[0].state_projection.weight, cells[1].state_projection.weight), dtype, gates=False),
    )


def _cell_parameters(cell) -> tuple[torch.Tensor, ...]:  # noqa: ANN001
    return cell.input_linear.weight, cell.input_linear.bias, cell.state_linear.weight, cell.state_projection.weight


@fused_kernel
def cell_forward(
    z: torch.Tensor, bias: torch.Tensor, c_prev: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step's gates and cell update, both directions.

    Shape: z [2, n, 4D] (blocks i, f, o, j, no bias), bias [2, 1, 4D], c_prev [2, n, D]
    -> gates [2, n, 4D], c, tanh(c) (float32) and g = o tanh(c) in z's dtype, [2, n, D]
    """
    D = c_prev.shape[-1]
    zf = z.float() + bias.float()
    # tanh(x) as 2 sigmoid(2x) - 1: the generated CPU kernel's tanh costs ~1.5x its sigmoid
    gates = torch.cat([torch.sigmoid(zf[..., : 3 * D]), 2 * torch.sigmoid(2 * zf[..., 3 * D :]) - 1], dim=-1)
    i, f, o, j = gates.chunk(4, dim=-1)
    c = f * c_prev + i * j
    tanh_c = 2 * torch.sigmoid(2 * c) - 1
    return gates, c, tanh_c, (o * tanh_c).to(z.dtype)


@fused_kernel
def cell_backward(
    dg: torch.Tensor, d_c: torch.Tensor, gates: torch.Tensor, c_prev: torch.Tensor, tanh_c: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's gate gradients from dg = dL/dg and d_c = dL/dc of step t + 1.

    Shape: dg, d_c, c_prev, tanh_c [2, n, D], gates [2, n, 4D] -> dz [2, n, 4D] in dg's
    dtype, dL/dc_prev [2, n, D] float32
    """
    D = c_prev.shape[-1]
    # One expression over the blocks [2, n, 4, D] by `where`: a `cat` made the kernel take two passes
    block = torch.arange(4, device=gates.device).view(4, 1)  # i, f, o, j
    g4 = gates.unflatten(-1, (4, D))
    i, f, o, j = g4.unbind(-2)
    dgf = dg.float()
    dc = d_c + dgf * o * (1 - tanh_c * tanh_c)
    upstream = torch.where(block == 2, (dgf * tanh_c)[..., None, :], dc[..., None, :])  # dL/do, else dL/dc
    # dc/di = j, dc/df = c_prev, dc/dj = i, and 1 for o
    factor = torch.where(block == 3, i[..., None, :], 1.0)
    factor = torch.where(block == 0, j[..., None, :], torch.where(block == 1, c_prev[..., None, :], factor))
    slope = torch.where(block == 3, 1 - g4 * g4, g4 * (1 - g4))  # tanh' for j, sigmoid' for i, f, o
    return (upstream * factor * slope).to(dg.dtype).flatten(-2), dc * f


def _rows(state: torch.Tensor, n: int) -> torch.Tensor:
    # n contiguous rows: torch.compile rebuilds the fused kernels for each new view pattern
    rows = state.shape[1]
    if rows == n:
        return state
    if rows > n:
        return state[:, :n].contiguous()
    return torch.cat([state, state.new_zeros(2, n - rows, state.shape[2])], dim=1)


def _padded_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    used = t.shape[1] * t.shape[2]
    out = t.new_empty(2, rows, t.shape[3])
    out[:, :used] = t.reshape(2, used, -1)
    out[:, used:] = 0
    return out


def _padded_columns(t: torch.Tensor, columns: int, shift: int = 0, ones: bool = False) -> torch.Tensor:
    # [2, steps, batch, K] -> [2, K (+ 1), columns]: rows as columns, a row of ones for the bias
    used, K = t.shape[1] * t.shape[2], t.shape[3]
    out = t.new_empty(2, K + ones, columns)
    out[:, :K, :shift] = 0
    out[:, :K, shift:used] = t.reshape(2, used, K)[:, : used - shift].transpose(1, 2)
    out[:, :K, used:] = 0
    if ones:
        out[:, K] = 1
    return out


class _PairedRecurrence(torch.autograd.Function):
    """One layer, both directions, from the two cells' parameters.

    Shape: x [2, steps, batch, in] in the products' dtype -> [2, steps, batch, P], zero
    where a row has ended. `batch_sizes[t]` rows run at step t.
    """

    @staticmethod
    def forward(ctx, x, batch_sizes, cells, *parameters):  # noqa: ANN001, ANN205
        w_x, bias, w_h, w_p = _layer_operands(cells, x.dtype)
        with torch.autocast(x.device.type, enabled=False):
            _, num_steps, batch_size, _ = x.shape
            D, P = w_p.shape[1], w_p.shape[2]
            used, rows = num_steps * batch_size, bucket_rows(num_steps * batch_size)
            # float32 adds x W_x, one product over all steps, to each step's h W_h (the reference
            # values). A reduced dtype runs [x_t, h] @ [W_x; W_h] per step: the all-steps product
            # writes a [2, steps * batch, 4D] output and runs well below the matrix units' rate.
            joint = x.dtype != torch.float32
            if joint:
                w_xh = torch.cat([w_x, w_h], dim=1)  # [2, in + P, 4D]
            else:
                pre = torch.bmm(_padded_rows(x, rows), w_x)[:, :used].view(2, num_steps, batch_size, 4 * D)
            # Rows past their end are written as zeros step by step (not zero-filled first).
            out = x.new_empty(2, num_steps, batch_size, P)
            gated_rows = x.new_empty(2, rows, D)  # g_t, for dW_P; zero past the real rows
            gated_rows[:, used:] = 0
            gated = gated_rows[:, :used].view(2, num_steps, batch_size, D)
            h = x.new_zeros(2, batch_size, P)
            c = x.new_zeros(2, batch_size, D, dtype=torch.float32)
            saved = []  # per step: (gates_t, c_t, tanh(c_t)), float32
            for t in range(num_steps):
                n = batch_sizes[t]
                if joint:
                    z = torch.bmm(torch.cat([x[:, t, :n], _rows(h, n)], dim=2), w_xh)  # [2, n, 4D]
                else:
                    z = torch.baddbmm(pre[:, t, :n], _rows(h, n), w_h)
                gates, c, tanh_c, g = cell_forward(z, bias, _rows(c, n))  # [2, n, 4D], [2, n, D] x 3
                gated[:, t, :n] = g
                h = torch.bmm(g, w_p)  # [2, n, P]
                out[:, t, :n] = h
                if n < batch_size:
                    out[:, t, n:] = 0
                    gated[:, t, n:] = 0
                saved.append((gates, c, tanh_c))
        ctx.saved = saved
        ctx.batch_sizes = batch_sizes
        ctx.save_for_backward(x, w_x, w_h, w_p, out, gated_rows, *parameters)
        return out

    @staticmethod
    def backward(ctx, d_out):  # noqa: ANN001, ANN205
        x, w_x, w_h, w_p, out, gated_rows, *parameters = ctx.saved_tensors
        saved, batch_sizes = ctx.saved, ctx.batch_sizes
        with torch.autocast(out.device.type, enabled=False):
            _, num_steps, batch_size, P = out.shape
            D = w_p.shape[1]
            used, rows = num_steps * batch_size, gated_rows.shape[1]
            d_pre_rows = out.new_empty(2, rows, 4 * D)  # dz_t, zero past a row's end
            d_pre_rows[:, used:] = 0
            d_pre = d_pre_rows[:, :used].view(2, num_steps, batch_size, 4 * D)
            d_h_rows = out.new_empty(2, rows, P)  # dh_t, for dW_P
            d_h_rows[:, used:] = 0
            d_h_all = d_h_rows[:, :used].view(2, num_steps, batch_size, P)
            d_h = out.new_zeros(2, batch_sizes[-1], P)  # dL/dh_t from step t + 1, the products' dtype
            d_c = out.new_zeros(2, batch_sizes[-1], D, dtype=torch.float32)  # dL/dc_t from step t + 1
            zero_state = out.new_zeros(2, batch_size, D, dtype=torch.float32)  # c_{-1}
            w_h_t, w_p_t = w_h.transpose(1, 2), w_p.transpose(1, 2)
            for t in range(num_steps - 1, -1, -1):
                n = batch_sizes[t]
                gates, _, tanh_c = saved[t]
                saved[t] = None  # freed as soon as it is used
                c_prev = _rows(saved[t - 1][1], n) if t else zero_state  # (every row runs at t = 0)
                dh = d_out[:, t, :n] + _rows(d_h, n)  # [2, n, P]
                d_h_all[:, t, :n] = dh
                dz, d_c = cell_backward(torch.bmm(dh, w_p_t), _rows(d_c, n), gates, c_prev, tanh_c)
                d_pre[:, t, :n] = dz
                d_h = torch.bmm(dz, w_h_t)
                if n < batch_size:
                    d_pre[:, t, n:] = 0
                    d_h_all[:, t, n:] = 0
            ctx.saved = None
            # Weight gradients, one product each. Left operands contiguous: oneDNN is slower on transposed ones.
            d_w_h = torch.bmm(_padded_columns(out, rows, shift=batch_size), d_pre_rows)  # [2, P, 4D]
            # g^T as a view: a copy of it costs more than the product loses
            d_w_p = torch.bmm(gated_rows.transpose(1, 2), d_h_rows)  # [2, D, P]
            # dW_x and dB as one product, [x^T; 1] @ dz: cheaper than a column sum
            d_w_x_and_bias = torch.bmm(_padded_columns(x, rows, ones=True), d_pre_rows)  # [2, in + 1, 4D]
            d_w_x, d_bias = d_w_x_and_bias[:, :-1], d_w_x_and_bias[:, -1:]
            d_x = torch.bmm(d_pre_rows, w_x.transpose(1, 2))[:, :used].view(x.shape)  # [2, steps, batch, in]
            d_parameters = []
            for d in range(2):
                weight_x, bias, weight_h, weight_p = parameters[4 * d : 4 * d + 4]
                d_parameters += [
                    _parameter_grad(d_w_x[d], weight_x, gates=True),
                    _parameter_grad(d_bias[d], bias[:, None], gates=True).view(-1),
                    _parameter_grad(d_w_h[d], weight_h, gates=True),
                    _parameter_grad(d_w_p[d], weight_p, gates=False),
                ]
        return d_x, None, None, *d_parameters


def paired_training_stacks(
    stacks: tuple[LSTMStack, LSTMStack], tokens: torch.Tensor, lengths: torch.Tensor
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Both clip-free LSTM stacks over a batch, for training (`paired_stacks`'s contract).

    Args:
        stacks: `(forward_layers, backward_layers)` of a `BiLM`, cells without clips.
        tokens: [batch, steps, P] layer-0 vectors, right-padded.
        lengths: [batch] real positions per row, each >= 1.

    Returns:
        Per stack, one time-major [steps, batch, P] tensor per layer, in the autocast dtype
        under autocast.
    """
    forward_stack, backward_stack = stacks
    batch_size, num_steps, _ = tokens.shape
    device_type = tokens.device.type
    dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else tokens.dtype
    sorted_lengths, order, batch_sizes = sort_rows(lengths, num_steps)
    in_order = torch.equal(order, torch.arange(batch_size, device=order.device))  # batches come sorted
    x = (tokens if in_order else tokens.index_select(0, order)).transpose(0, 1)  # [steps, batch, P], sorted
    reverse = reverse_index(sorted_lengths, num_steps)[..., None]  # [steps, batch, 1]

    def flip(t: torch.Tensor) -> torch.Tensor:  # each row reversed over its own length
        return t.gather(0, reverse.expand(-1, -1, t.shape[-1]))

    layer_input = torch.stack([x, flip(x)]).to(dtype)  # [2, steps, batch, P]
    outputs = []
    for k, (fc, bc) in enumerate(zip(forward_stack.layers, backward_stack.layers)):
        if forward_stack.dropout:
            layer_input = fast_dropout(layer_input, forward_stack.dropout, forward_stack.training)
        y = _PairedRecurrence.apply(layer_input, batch_sizes, (fc, bc), *_cell_parameters(fc), *_cell_parameters(bc))
        if k > 0 and forward_stack.use_skip_connections:
            y = y + layer_input  # the residual adds the (dropped-out) input, as LSTMStack does
        outputs.append(y)
        layer_input = y
    if in_order:
        return [y[0] for y in outputs], [flip(y[1]) for y in outputs]
    restore = torch.empty_like(order)
    restore[order] = torch.arange(batch_size, device=order.device)  # sorted row of each batch row
    return (
        [y[0].index_select(1, restore) for y in outputs],
        [flip(y[1]).index_select(1, restore) for y in outputs],
    )
