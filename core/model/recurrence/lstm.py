"""The LSTM cell with projection and clipping, and a one-direction stack of them.

bilm-tf's cell (TensorFlow `LSTMCell` with `num_proj`, docs/bilm_tf.md §4), gate
blocks in TF order i, j, f, o:

    z  = x @ W_x + h @ W_h + B
    c' = clip(sigmoid(z_f + 1) * c + sigmoid(z_i) * tanh(z_j), cell_clip)
    h' = clip((sigmoid(z_o) * tanh(c')) @ W_P, proj_clip)     # D -> P, no bias

The +1 forget bias is added at run time, not stored (hdf5 round trips stay exact).
Rows are sorted longest first, and step t runs the first `batch_sizes[t]` rows only.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from ..kernels import fused_kernel
from ..precision import WEIGHT_DTYPE, bf16_matmul, cpu_bf16_active

LSTMState = tuple[torch.Tensor, torch.Tensor]
"""(h [batch, projection_dim], c [batch, dim]) of one layer."""

StackOutputs = tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]
"""Each layer's output per direction, time-major [steps, batch, P] (backward ones in forward
time order), and `order`: output row r is batch row `order[r]`."""


StackRun = tuple[list[torch.Tensor], list[LSTMState]]
RunDirections = Callable[[Callable[[], StackRun], Callable[[], StackRun]], tuple[StackRun, StackRun]]
"""Runs the forward and the backward stack (two callables) and returns both results."""

FORGET_BIAS = 1.0  # TensorFlow LSTMCell's default, added at run time

INPUT_BLOCK_ROWS = 128
"""Rows (steps x batch) per input product: large enough for an efficient matrix product,
small enough that the block's pre-activations stay small (4 MB for the original model)."""


def input_block_steps(batch_size: int) -> int:
    return max(1, -(-INPUT_BLOCK_ROWS // max(batch_size, 1)))


def lstm_gates(z: torch.Tensor, c: torch.Tensor, cell_clip: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The element-wise part of one step: `(c', sigmoid(o) * tanh(c'))`, before the projection.

    `z` holds the pre-activations, forget bias added. `cell_clip` None or 0: no clip.

    Shape: z [n, 4 * dim], c [n, dim] -> ([n, dim], [n, dim])
    """
    i, j, f, o = z.chunk(4, dim=1)
    c_t = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j)
    if cell_clip:
        c_t = c_t.clamp(-cell_clip, cell_clip)
    return c_t, torch.sigmoid(o) * torch.tanh(c_t)


def _lstm_gates_in_place(
    z: torch.Tensor, c: torch.Tensor, cell_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    i, j, f, o = z.chunk(4, dim=1)  # `lstm_gates` inside z: the same operations in the same order
    c_t = f.sigmoid_().mul_(c).add_(i.sigmoid_().mul_(j.tanh_()))
    if cell_clip:
        c_t.clamp_(-cell_clip, cell_clip)
    return c_t, o.sigmoid_().mul_(torch.tanh(c_t))


def _tanh(x: torch.Tensor) -> torch.Tensor:
    return 2 * torch.sigmoid(2 * x) - 1  # compiled, torch.tanh runs several times slower than this


def lstm_gates_bf16(
    z: torch.Tensor, bias: torch.Tensor, c: torch.Tensor, cell_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`lstm_gates` of a bf16 step: the bias, the gates and the cell state in float32.

    Shape: z [n, 4D] bf16 (`[x, h] @ [W_x; W_h]`), bias [4D], c [n, D] -> (c' [n, D], bf16 gated [n, D])
    """
    z_i, z_j, z_f, z_o = (z.float() + bias).chunk(4, dim=1)  # block order i, j, f, o
    c_t = torch.sigmoid(z_f + FORGET_BIAS) * c + torch.sigmoid(z_i) * _tanh(z_j)
    if cell_clip:
        c_t = c_t.clamp(-cell_clip, cell_clip)
    return c_t, (torch.sigmoid(z_o) * _tanh(c_t)).to(torch.bfloat16)


bf16_gates = fused_kernel(lstm_gates_bf16, dynamic=True)  # rows change at every step
"""`lstm_gates_bf16` in one pass (torch.compile), or on torch's eager operators where it cannot build."""

_COMPILED_GATES = None


def _compiled_gates():
    global _COMPILED_GATES
    if _COMPILED_GATES is None:
        _COMPILED_GATES = torch.compile(lstm_gates, dynamic=True)
    return _COMPILED_GATES


def compile_recurrence(module: nn.Module, enabled: bool = True) -> nn.Module:
    """Fuse each step's element-wise work with torch.compile, in every cell of `module`.

    Fewer kernel launches per step on a GPU, the same values up to float rounding.

    Args:
        module: An `Elmo`, `BiLM` or anything holding `LSTMCellWithProjection`s.
        enabled: False restores the eager step.

    Returns:
        `module`, changed in place.
    """
    for cell in module.modules():
        if isinstance(cell, LSTMCellWithProjection):
            cell.compile_recurrence = enabled
    return module


def reverse_index(lengths: torch.Tensor, num_steps: int) -> torch.Tensor:
    """Index that reverses each row over its own length, padding left in place (its own inverse).

    Shape: lengths [batch] int64 -> [num_steps, batch] int64
    """
    steps = torch.arange(num_steps, device=lengths.device)[:, None]  # [steps, 1]
    row_len = lengths[None, :]  # [1, batch]
    return torch.where(steps < row_len, row_len - 1 - steps, steps)


def sort_rows(lengths: torch.Tensor, num_steps: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """`(sorted_lengths, order, batch_sizes)`: rows longest first, and the rows running per step."""
    sorted_lengths, order = lengths.sort(descending=True, stable=True)
    steps = torch.arange(num_steps, device=lengths.device)
    return sorted_lengths, order, (sorted_lengths[None, :] > steps[:, None]).sum(dim=1).tolist()


class LSTMCellWithProjection(nn.Module):
    """One LSTM layer of one direction, run over a sorted, time-major batch.

    Parameters with their bilm-tf names (torch weights are the transposes), rows in gate order i, j, f, o:
        input_linear: Linear(input_size, 4 * dim) with bias (`W_0[:input_size]`, `B`).
        state_linear: Linear(projection_dim, 4 * dim), no bias (`W_0[input_size:]`).
        state_projection: Linear(dim, projection_dim), no bias (`W_P_0`).
    """

    def __init__(
        self,
        input_size: int,
        dim: int,
        projection_dim: int,
        cell_clip: float | None = None,
        proj_clip: float | None = None,
    ) -> None:
        super().__init__()
        self.input_size = input_size
        self.dim = dim
        self.projection_dim = projection_dim
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.compile_recurrence = False  # see compile_recurrence()
        self.input_linear = nn.Linear(input_size, 4 * dim, dtype=WEIGHT_DTYPE)
        self.state_linear = nn.Linear(projection_dim, 4 * dim, bias=False, dtype=WEIGHT_DTYPE)
        self.state_projection = nn.Linear(dim, projection_dim, bias=False, dtype=WEIGHT_DTYPE)

    def forward(
        self,
        inputs: torch.Tensor,
        batch_sizes: list[int],
        initial_state: LSTMState | None = None,
        fused: bool | None = None,
        final_state: bool = True,
    ) -> tuple[torch.Tensor, LSTMState | None]:
        """Run the cell over every time step: the step loop, or one `torch.lstm` call.

        Args:
            inputs: Time-major inputs, rows sorted longest first.
            batch_sizes: Rows still running at each step (non-increasing).
            initial_state: `(h, c)` to start from. Zeros when omitted.
            fused: One `torch.lstm` call. None: when it is exact (`can_fuse`).
            final_state: False when nobody reads the final `(h, c)`.

        Raises:
            ValueError: for `fused=True` on a cell that clips or is int8.

        Returns:
            `(outputs, (h, c))`: outputs zero where a row has ended, and each row's state
            after its own last step (None with `final_state=False`).

        Shape:
            inputs [steps, batch, input_size] -> outputs [steps, batch, projection_dim]
        """
        if fused and not self.can_fuse:
            raise ValueError(
                "fused=True needs a cell without cell_clip/proj_clip and with float (not int8) weights: "
                "torch's fused LSTM kernels cannot clip. Leave fused=None to choose automatically."
            )
        if (self.can_fuse if fused is None else fused) and batch_sizes and batch_sizes[0] == inputs.shape[1]:
            return self._forward_fused(inputs, batch_sizes, initial_state, final_state)
        outputs, state = self._forward_steps(inputs, batch_sizes, initial_state)
        return outputs, state if final_state else None

    def _forward_steps(
        self, inputs: torch.Tensor, batch_sizes: list[int], initial_state: LSTMState | None
    ) -> tuple[torch.Tensor, LSTMState]:
        num_steps, batch_size, _ = inputs.shape
        D = self.dim
        if initial_state is None:
            h = inputs.new_zeros(batch_size, self.projection_dim)
            c = inputs.new_zeros(batch_size, D)
        else:
            h, c = initial_state
        if self._takes_columns(inputs):
            return self._forward_columns(inputs, batch_sizes, h, c)
        outputs = []
        grad = torch.is_grad_enabled()
        if getattr(self, "compile_recurrence", False):
            gates = _compiled_gates()
        else:
            gates = lstm_gates if grad else _lstm_gates_in_place
        # bf16 products with float32 sums, gates and state (elmo_core.model.precision).
        float_linears = self.has_float_linears
        bf16 = cpu_bf16_active(inputs) and float_linears
        joined = (self.input_linear.weight, self.state_linear.weight)
        pre: tuple[torch.Tensor, ...] = ()
        block = input_block_steps(batch_size)
        for t in range(num_steps):
            n = batch_sizes[t]
            if bf16:  # x_t @ W_x + h @ W_h as one product, then the sums and the gates in one pass
                xh = torch.cat([inputs[t, :n].to(torch.bfloat16), h[:n].to(torch.bfloat16)], dim=1)
                z = bf16_matmul(xh, joined)
                c_t, gated = bf16_gates(z, self.input_linear.bias.detach(), c[:n], self.cell_clip)
            else:
                if t % block == 0:
                    pre, pre_t = (), None  # free the last block before computing the next
                    pre = self._input_products(inputs[t : t + block]).unbind(0)
                pre_t = pre[t % block]
                c_t, gated = gates(self._step_sum(pre_t[:n], h[:n], grad, float_linears), c[:n], self.cell_clip)
            h_t = bf16_matmul(gated, self.state_projection.weight).float() if bf16 else self.state_projection(gated)
            if self.proj_clip:
                h_t = h_t.clamp(-self.proj_clip, self.proj_clip)
            if n == batch_size:
                h, c = h_t, c_t
            else:  # rows n.. have ended: keep their final state
                h = torch.cat([h_t, h[n:].to(h_t.dtype)])
                c = torch.cat([c_t, c[n:].to(c_t.dtype)])
            if grad:  # out of place, for autograd
                outputs.append(F.pad(h_t, (0, 0, 0, batch_size - n)))
            else:  # written in place: no per-step padded copies and no stack (half the memory)
                if t == 0:
                    output = h_t.new_zeros(num_steps, batch_size, h_t.shape[1])
                output[t, :n] = h_t
        if num_steps == 0:
            return inputs.new_zeros(0, batch_size, self.projection_dim), (h, c)
        return (torch.stack(outputs) if outputs else output), (h, c)

    def _step_sum(self, pre: torch.Tensor, h: torch.Tensor, grad: bool, float_linears: bool) -> torch.Tensor:
        if grad:
            return pre + self.state_linear(h)
        if float_linears:  # in one product: one [n, 4D] tensor per step
            return torch.addmm(pre, h, self.state_linear.weight.t())
        z = self.state_linear(h)  # int8 layers (elmo_core.runtime.quantization): through the module
        z += pre  # in place: one [n, 4D] tensor per step, not two
        return z

    def _takes_columns(self, inputs: torch.Tensor) -> bool:
        return (
            inputs.device.type == "cpu"
            and inputs.dtype == torch.float32
            and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu")
            and self.has_float_linears
            and not getattr(self, "compile_recurrence", False)
        )

    def _forward_columns(
        self, inputs: torch.Tensor, batch_sizes: list[int], h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, LSTMState]:
        """The step loop on columns (h [P, n], c [D, n]) for float32 inference on the CPU: each
        product reads its weight as stored. Only MKL's summation order may differ (within 1e-6).
        """
        num_steps, batch_size, _ = inputs.shape
        D, running = self.dim, batch_size
        h_out, c_out = h.clone(), c.clone()  # the final states, row by row as rows end
        h_cols = h.t().contiguous()  # [P, running], replaced, never written in place
        c_cols = c.t().clone(memory_format=torch.contiguous_format)  # [D, running], updated in place
        output = inputs.new_zeros(num_steps, batch_size, self.projection_dim)
        w_x, w_h, w_p = self.input_linear.weight, self.state_linear.weight, self.state_projection.weight
        bias = self.input_linear.bias[:, None]  # [4D, 1]
        block = input_block_steps(batch_size)
        pre_buffer = inputs.new_empty(4 * D * min(block, num_steps) * batch_size)
        z_buffer = inputs.new_empty(4 * D * batch_size)
        pre = pre_buffer
        for t in range(num_steps):
            if t % block == 0:
                x_cols = inputs[t : t + block].reshape(-1, inputs.shape[-1]).t().contiguous()  # [in, rows]
                pre = pre_buffer[: 4 * D * x_cols.shape[1]].view(4 * D, -1)  # step s: columns s*batch..
                torch.addmm(bias, w_x, x_cols, out=pre)
                pre[2 * D : 3 * D] += FORGET_BIAS  # block order i, j, f, o
            n = batch_sizes[t]
            if n < running:  # rows n.. have ended: keep their final state, drop their columns
                h_out[n:running], c_out[n:running] = h_cols[:, n:].t(), c_cols[:, n:].t()
                h_cols, c_cols, running = h_cols[:, :n].contiguous(), c_cols[:, :n].contiguous(), n
            first = (t % block) * batch_size
            z = torch.addmm(pre[:, first : first + n], w_h, h_cols, out=z_buffer[: 4 * D * n].view(4 * D, n))
            i, j, f, o = z.chunk(4, dim=0)  # [D, n] each, contiguous
            c_cols.mul_(f.sigmoid_()).add_(i.sigmoid_().mul_(j.tanh_()))
            if self.cell_clip:
                c_cols.clamp_(-self.cell_clip, self.cell_clip)
            h_cols = torch.mm(w_p, o.sigmoid_().mul_(torch.tanh(c_cols, out=i)))  # [P, n]
            if self.proj_clip:
                h_cols.clamp_(-self.proj_clip, self.proj_clip)
            output[t, :n] = h_cols.t()
        h_out[:running], c_out[:running] = h_cols.t(), c_cols.t()
        return output, (h_out, c_out)

    def _input_products(self, inputs: torch.Tensor) -> torch.Tensor:
        """`x @ W_x + B` plus the forget bias for a block of steps.

        Shape: inputs [steps, batch, input_size] -> [steps, batch, 4D]
        """
        # Through the Linear module (not its weight), so that int8 dynamic quantisation
        # (`elmo_core.runtime.quantization`) replaces it too.
        # As one 2-D product: a strided 3-D input would take a slower batched product.
        pre = self.input_linear(inputs.reshape(-1, inputs.shape[-1])).view(*inputs.shape[:-1], 4 * self.dim)
        pre[..., 2 * self.dim : 3 * self.dim] += FORGET_BIAS  # block order i, j, f, o, in place
        return pre

    @property
    def has_float_linears(self) -> bool:
        """False once int8 quantisation has replaced the Linear layers."""
        return all(type(m) is nn.Linear for m in (self.input_linear, self.state_linear, self.state_projection))

    @property
    def can_fuse(self) -> bool:
        """True when one `torch.lstm` call computes this cell exactly: no clips, float weights."""
        return not self.cell_clip and not self.proj_clip and self.has_float_linears

    def torch_lstm_weights(self) -> list[torch.Tensor]:
        """`[w_ih, w_hh, b_ih, b_hh, w_hr]` for `torch.lstm`: blocks i, j, f, o as torch's i, f, g, o,
        the +1 forget bias in `b_ih`.
        """

        def reorder(w: torch.Tensor) -> torch.Tensor:
            i, j, f, o = w.chunk(4, dim=0)
            return torch.cat([i, f, j, o])

        i, j, f, o = self.input_linear.bias.chunk(4)
        b_ih = torch.cat([i, f + FORGET_BIAS, j, o])
        return [
            reorder(self.input_linear.weight),
            reorder(self.state_linear.weight),
            b_ih,
            torch.zeros_like(b_ih),
            self.state_projection.weight,
        ]

    def _forward_fused(
        self, inputs: torch.Tensor, batch_sizes: list[int], initial_state: LSTMState | None, final_state: bool
    ) -> tuple[torch.Tensor, LSTMState | None]:
        num_steps, batch_size, _ = inputs.shape
        # Row b runs for as many steps as have batch_sizes[t] > b.
        sizes = torch.tensor(batch_sizes)
        lengths = (sizes[:, None] > torch.arange(batch_size)[None, :]).sum(dim=0)  # [batch]
        weights = self.torch_lstm_weights()
        dtype = weights[0].dtype  # float32 state and products, also under autocast (see below)
        h0, c0 = self._fused_initial_state(inputs, initial_state, dtype)
        # torch.lstm's flags after the weights: has_biases, num_layers, dropout, train, bidirectional.
        flags = (True, 1, 0.0, self.training, False)
        padded = not final_state and inputs.device.type == "cpu"
        # The fused kernels take one dtype, and autocast does not cover them: the weights' dtype.
        # cuDNN warns that the reordered weights are not one buffer (copied per call, cheap).
        with torch.autocast(inputs.device.type, enabled=False), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")
            warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")
            if padded:  # a row's padding comes after its real steps, its outputs there zeroed
                outputs, _, _ = torch.lstm(inputs.to(dtype), (h0, c0), weights, *flags, False)  # batch_first=False
                active = torch.arange(num_steps)[:, None] < lengths[None, :]  # [steps, batch]
                return outputs * active[..., None].to(outputs.device), None
            packed = pack_padded_sequence(inputs, lengths, enforce_sorted=True)
            data, h, c = torch.lstm(packed.data.to(dtype), packed.batch_sizes, (h0, c0), weights, *flags)
        outputs, _ = pad_packed_sequence(
            PackedSequence(data, packed.batch_sizes), total_length=num_steps
        )  # [steps, batch, P], zeros where a row has ended
        return outputs, ((h[0], c[0]) if final_state else None)

    def _fused_initial_state(
        self, inputs: torch.Tensor, initial_state: LSTMState | None, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if initial_state is None:
            batch_size = inputs.shape[1]
            h0 = inputs.new_zeros(1, batch_size, self.projection_dim, dtype=dtype)
            c0 = inputs.new_zeros(1, batch_size, self.dim, dtype=dtype)
            return h0, c0
        h0, c0 = (s.unsqueeze(0).to(dtype) for s in initial_state)
        return h0, c0


class LSTMStack(nn.Module):
    """`n_layers` cells of one direction, with bilm-tf's residual connections (docs/bilm_tf.md §5).

    With `use_skip_connections`, layer l >= 1 outputs `cell output + layer input`. The
    recurrent h stays the cell output. Training drops out every layer's input.
    """

    def __init__(
        self,
        input_size: int,
        dim: int,
        projection_dim: int,
        n_layers: int,
        cell_clip: float | None,
        proj_clip: float | None,
        use_skip_connections: bool,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.use_skip_connections = use_skip_connections
        self.dropout = dropout
        self.layers = nn.ModuleList(
            LSTMCellWithProjection(input_size if k == 0 else projection_dim, dim, projection_dim, cell_clip, proj_clip)
            for k in range(n_layers)
        )

    def forward(
        self,
        inputs: torch.Tensor,
        batch_sizes: list[int],
        initial_states: list[LSTMState | None] | None = None,
        fused: bool | None = None,
        final_state: bool = True,
    ) -> tuple[list[torch.Tensor], list[LSTMState | None]]:
        """Run every layer (`fused` and `final_state` as in `LSTMCellWithProjection.forward`).

        Shape: inputs [steps, batch, input_size] -> per layer [steps, batch, projection_dim], final states.
        """
        outputs: list[torch.Tensor] = []
        final_states: list[LSTMState | None] = []
        x = inputs
        for k, layer in enumerate(self.layers):
            layer_input = F.dropout(x, self.dropout, self.training) if self.dropout else x
            state = initial_states[k] if initial_states is not None else None
            y, final = layer(layer_input, batch_sizes, state, fused=fused, final_state=final_state)
            if k > 0 and self.use_skip_connections:
                # bilm-tf wraps ResidualWrapper in DropoutWrapper: the residual adds the
                # (dropped-out) input the cell saw.
                y = y + layer_input
            outputs.append(y)
            final_states.append(final)
            x = y
        return outputs, final_states
