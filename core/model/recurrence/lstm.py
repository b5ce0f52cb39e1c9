"""The LSTM cell with projection and clipping, and a one-direction stack of them.

bilm-tf's cell (docs/bilm_tf.md §4; TensorFlow `LSTMCell` with `num_proj`,
`cell_clip`, `proj_clip`), for one step with input x and state (h, c):

    z       = x @ W_x + h @ W_h + B            # 4D values, blocks i, j, f, o (TF order)
    c'      = clip(sigmoid(z_f + 1) * c + sigmoid(z_i) * tanh(z_j), cell_clip)
    h'      = clip((sigmoid(z_o) * tanh(c')) @ W_P, proj_clip)     # D -> P, no bias

The +1 is TensorFlow's forget bias, added at run time and not stored in B; we keep it
out of the parameters too, so that hdf5 -> safetensors -> hdf5 is exact.

Speed: the input product `x @ W_x + B` is one matrix product per block of steps (at
least `INPUT_BLOCK_ROWS` rows), not one per step; only `h @ W_h` and the projection run
per step. Rows must be sorted by length, longest first, so that step t runs on the first
`batch_sizes[t]` rows only: padding is never computed and never read, and each row's
final state is the state after its own last position. Without autograd (inference) the
step's element-wise work runs in place and the outputs are written into one tensor. Under
bf16 inference (`elmo_core.model.precision`) a step's sums and gates are one fused pass (`bf16_gates`).

Float32 inference on the CPU runs the same loop on columns (`_forward_columns`): the
state is kept transposed, h as [P, n] and c as [D, n], so that every product reads its
weight in the layout it is stored in, `W_h @ h` ([4D, P] @ [P, n]) and `W_P @ g`, where
the row loop's `h @ W_h.T` makes MKL read the weight transposed. The pre-activations of
a block and each step's z go into two buffers made once per call (fresh 8 MB blocks would
have their pages faulted in again and again), and the state keeps only the rows still
running, so the element-wise steps run on contiguous memory. The same operations in the
same order on the same values. Only MKL's summation order inside a product may differ:
`test_cpu_inference_runs_on_columns_with_the_row_loops_values` (tests/core/model/recurrence/test_lstm.py)
holds the two loops within 1e-6. `benchmarks/bench_lstm_layout.py` times the two layouts
(docs/results/speed-memory.md). Memory: the same tensors, transposed, and one pre-activation
block per call instead of one per block of steps.

Fused recurrence: without clips (`cell_clip` and `proj_clip` off) this cell is exactly
torch's `nn.LSTM(proj_size=P)` cell once the gate blocks are reordered (torch: i, f, g, o;
bilm-tf: i, j, f, o with j = g) and the +1 forget bias is folded into the bias. Such
cells then run as one `torch.lstm` call over a packed batch: cuDNN's fused kernels on a
GPU, the native loop on the CPU (no Python per step). Same values up to float rounding,
gradients included (`test_fused_cell_equals_the_step_loop_with_gradients`,
tests/core/model/recurrence/test_recurrence.py). The published models
clip, so they keep the step loop. Which path a `BiLM` takes is chosen in this package's `__init__.py`.
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
"""What running both LSTM stacks gives: each layer's output per direction, time-major
([steps, batch, P]; the backward outputs already in forward time order), and `order`:
row r of the outputs is batch row `order[r]`."""


StackRun = tuple[list[torch.Tensor], list[LSTMState]]
RunDirections = Callable[[Callable[[], StackRun], Callable[[], StackRun]], tuple[StackRun, StackRun]]
"""Runs the forward and the backward stack (two callables) and returns both results."""

FORGET_BIAS = 1.0  # TensorFlow LSTMCell's default, added at run time

INPUT_BLOCK_ROWS = 128
"""Rows (steps x batch) per input product: large enough for an efficient matrix product,
small enough that the block's pre-activations stay small (4 MB for the original model)."""


def input_block_steps(batch_size: int) -> int:
    """Steps per input product for a batch of `batch_size` rows: `INPUT_BLOCK_ROWS` rows or more."""
    return max(1, -(-INPUT_BLOCK_ROWS // max(batch_size, 1)))


def lstm_gates(z: torch.Tensor, c: torch.Tensor, cell_clip: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The element-wise part of one step: new cell state and the gated output.

    Args:
        z: Pre-activations with the forget bias already added, blocks i, j, f, o.
        c: Previous cell state.
        cell_clip: Clip the new cell state to [-cell_clip, cell_clip] (None/0: no clip).

    Returns:
        `(c', sigmoid(o) * tanh(c'))`, the second before the projection.

    Shape:
        z: [n, 4 * dim]; c: [n, dim] -> ([n, dim], [n, dim])
    """
    i, j, f, o = z.chunk(4, dim=1)
    c_t = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j)
    if cell_clip:
        c_t = c_t.clamp(-cell_clip, cell_clip)
    return c_t, torch.sigmoid(o) * torch.tanh(c_t)


def _lstm_gates_in_place(
    z: torch.Tensor, c: torch.Tensor, cell_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`lstm_gates` computed inside `z`, which it overwrites (inference only: no autograd).

    The same operations in the same order, so the same values, without the eight
    [n, dim] temporaries; both results are views into `z`.
    """
    i, j, f, o = z.chunk(4, dim=1)
    c_t = f.sigmoid_().mul_(c).add_(i.sigmoid_().mul_(j.tanh_()))
    if cell_clip:
        c_t.clamp_(-cell_clip, cell_clip)
    return c_t, o.sigmoid_().mul_(torch.tanh(c_t))


def _tanh(x: torch.Tensor) -> torch.Tensor:
    return 2 * torch.sigmoid(2 * x) - 1  # compiled, torch.tanh runs several times slower than this


def lstm_gates_bf16(
    pre: torch.Tensor, bias: torch.Tensor, recurrent: torch.Tensor, c: torch.Tensor, cell_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`lstm_gates` of a bf16 step from its two bf16 products: float32 sums, gates and state.

    Each gate sums `(x W_x + B) + forget bias + h W_h` in float32, in the float32 step's
    order. Returns the new cell state and the gated output in bf16 (the projection's input).

    Shape: pre, recurrent [n, 4D] bf16; bias [4D] float32; c [n, D] float32
        -> ([n, D] float32, [n, D] bf16)
    """
    p_i, p_j, p_f, p_o = pre.float().chunk(4, dim=1)  # block order i, j, f, o
    b_i, b_j, b_f, b_o = bias.chunk(4)
    r_i, r_j, r_f, r_o = recurrent.float().chunk(4, dim=1)
    c_t = torch.sigmoid(p_f + b_f + FORGET_BIAS + r_f) * c + torch.sigmoid(p_i + b_i + r_i) * _tanh(p_j + b_j + r_j)
    if cell_clip:
        c_t = c_t.clamp(-cell_clip, cell_clip)
    return c_t, (torch.sigmoid(p_o + b_o + r_o) * _tanh(c_t)).to(torch.bfloat16)


bf16_gates = fused_kernel(lstm_gates_bf16, dynamic=True)  # rows change at every step
"""`lstm_gates_bf16` in one pass (torch.compile; torch's eager operators where it cannot build)."""

_COMPILED_GATES = None


def _compiled_gates():
    """`lstm_gates` fused into one kernel by torch.compile (compiled once, on first use)."""
    global _COMPILED_GATES
    if _COMPILED_GATES is None:
        _COMPILED_GATES = torch.compile(lstm_gates, dynamic=True)
    return _COMPILED_GATES


def compile_recurrence(module: nn.Module, enabled: bool = True) -> nn.Module:
    """Fuse each LSTM step's element-wise work with torch.compile, in every cell of `module`.

    Each time step runs a recurrent product, about ten element-wise operations and a
    projection; on a GPU each of those is a kernel launch, so small and medium batches
    are bound by launch latency. Fusing the element-wise part (`lstm_gates`) into one
    kernel removes most launches. The values are those of the eager code up to float
    rounding (the fused kernel may evaluate sigmoid/tanh differently; tested at
    atol 1e-5). The first call compiles (tens of seconds; shapes are dynamic, so it does
    not recompile per batch). Needs a working torch.compile backend (Triton on CUDA, a
    C++ compiler on the CPU).

    Args:
        module: An `Elmo`, `BiLM` or anything containing `LSTMCellWithProjection`s.
        enabled: False restores the eager step.

    Returns:
        `module`, changed in place.
    """
    for cell in module.modules():
        if isinstance(cell, LSTMCellWithProjection):
            cell.compile_recurrence = enabled
    return module


def reverse_index(lengths: torch.Tensor, num_steps: int) -> torch.Tensor:
    """Index that reverses each row over its own length and leaves its padding in place.

    Used with `gather` on a time-major tensor; it is its own inverse.

    Shape: lengths [batch] int64 -> [num_steps, batch] int64
    """
    steps = torch.arange(num_steps, device=lengths.device)[:, None]  # [steps, 1]
    row_len = lengths[None, :]  # [1, batch]
    return torch.where(steps < row_len, row_len - 1 - steps, steps)


def sort_rows(lengths: torch.Tensor, num_steps: int) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Rows sorted longest first (stable): `(sorted_lengths, order, batch_sizes)`, where
    `batch_sizes[t]` counts the rows still running at step t (as in `PackedSequence`)."""
    sorted_lengths, order = lengths.sort(descending=True, stable=True)
    steps = torch.arange(num_steps, device=lengths.device)
    return sorted_lengths, order, (sorted_lengths[None, :] > steps[:, None]).sum(dim=1).tolist()


class LSTMCellWithProjection(nn.Module):
    """One LSTM layer of one direction, run over a whole (sorted, time-major) batch.

    Parameters (bilm-tf names in brackets; torch `Linear` weights are the transposes):
        input_linear: Linear(input_size, 4 * dim) with bias (`W_0[:input_size]`, `B`).
        state_linear: Linear(projection_dim, 4 * dim), no bias (`W_0[input_size:]`).
        state_projection: Linear(dim, projection_dim), no bias (`W_P_0`).
    The 4 * dim rows keep the file's gate order i, j, f, o.
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
        """Run the cell over every time step.

        Args:
            inputs: Time-major inputs, rows sorted by length (longest first).
            batch_sizes: Rows still running at each step (non-increasing, as in
                `PackedSequence`); `batch_sizes[t] <= batch`.
            initial_state: `(h, c)` to start from; zeros when omitted.
            fused: Run as one `torch.lstm` call (see the module docstring). None: when
                it is exact (`can_fuse`). Rows that run no step at all always take the
                step loop.
            final_state: False when the caller does not read the final `(h, c)` (a
                stateless biLM); the fused path on the CPU then runs the padded batch,
                whose backward avoids the packed one's zero-fill of the whole input
                gradient at every step.

        Raises:
            ValueError: for `fused=True` on a cell that clips or is int8.

        Returns:
            `(outputs, (h, c))`: outputs are zero where a row has ended; `(h, c)` is each
            row's state after its own last step (None with `final_state=False`).

        Shape:
            inputs: [steps, batch, input_size]
            outputs: [steps, batch, projection_dim]
            h: [batch, projection_dim]; c: [batch, dim]
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
        """`forward` as a Python loop over the steps (the reference; clips applied)."""
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
        # bf16 products with float32 pre-activations, gates and state (elmo_core.model.precision).
        float_linears = self.has_float_linears
        bf16 = cpu_bf16_active(inputs) and float_linears
        pre: tuple[torch.Tensor, ...] = ()
        block = input_block_steps(batch_size)
        for t in range(num_steps):
            if t % block == 0:
                pre, pre_t = (), None  # free the last block before computing the next
                pre = self._input_products(inputs[t : t + block], bf16).unbind(0)
            n = batch_sizes[t]
            pre_t = pre[t % block]
            if bf16:  # the [n, 4D] product in bf16; the sums and the gates in one pass
                recurrent = bf16_matmul(h[:n].to(torch.bfloat16), self.state_linear.weight)
                c_t, gated = bf16_gates(pre_t[:n], self.input_linear.bias, recurrent, c[:n], self.cell_clip)
            else:
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
        """`pre + h @ W_h` of one step, [n, 4D]: the float32 or int8 step's pre-activations."""
        if grad:
            return pre + self.state_linear(h)
        if float_linears:  # in one product: one [n, 4D] tensor per step
            return torch.addmm(pre, h, self.state_linear.weight.t())
        z = self.state_linear(h)  # int8 layers (elmo_core.runtime.quantization): through the module
        z += pre  # in place: one [n, 4D] tensor per step, not two
        return z

    def _takes_columns(self, inputs: torch.Tensor) -> bool:
        """True for float32 inference on the CPU (no autograd, autocast, int8 or compiled
        gates): the step loop then runs on columns."""
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
        """`_forward_steps` with the state as columns, for float32 inference on the CPU.

        The row loop's operations on transposed operands (see the module docstring): each
        product reads a weight in its stored layout (`W @ columns`), the pre-activations
        and each step's `z` go into two buffers made once per call, and the state keeps
        only the columns still running, so every element-wise step is contiguous.

        Shape: inputs [steps, batch, input_size]; h [batch, P]; c [batch, D]
            -> outputs [steps, batch, P], (h [batch, P], c [batch, D])
        """
        num_steps, batch_size, _ = inputs.shape
        D, running = self.dim, batch_size
        h_out, c_out = h.clone(), c.clone()  # the final states, row by row as rows end
        h_cols = h.t().contiguous()  # [P, running]; replaced, never written in place
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

    def _input_products(self, inputs: torch.Tensor, bf16: bool = False) -> torch.Tensor:
        """`x @ W_x + B` plus the forget bias, for a block of steps (with `bf16`: `x @ W_x` alone, in bf16).

        The products are computed a block of at least `INPUT_BLOCK_ROWS` rows at a time:
        large enough for an efficient matrix product, while the [steps, batch, 4D]
        pre-activations of a whole batch (130 MB for the original model at batch 32) are
        never held at once. Returned as one tensor; `forward` takes it apart with
        `unbind`, because indexing `pre[t]` would make each step's backward zero-fill a
        gradient of the whole block.

        Shape: inputs [steps, batch, input_size] -> [steps, batch, 4D]
        """
        if bf16:  # the bf16 product alone: `bf16_gates` adds the biases in float32, in the step's one pass
            rows = inputs.to(torch.bfloat16).reshape(-1, inputs.shape[-1])  # [steps * batch, in]
            return bf16_matmul(rows, self.input_linear.weight).view(*inputs.shape[:-1], 4 * self.dim)
        # Through the Linear module (not its weight), so that int8 dynamic quantisation
        # (`elmo_core.runtime.quantization`) replaces it too.
        # As one 2-D product: a strided 3-D input would take a slower batched product.
        pre = self.input_linear(inputs.reshape(-1, inputs.shape[-1])).view(*inputs.shape[:-1], 4 * self.dim)
        pre[..., 2 * self.dim : 3 * self.dim] += FORGET_BIAS  # block order i, j, f, o; in place: no copy
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
        """This cell's parameters in `torch.lstm`'s layout (differentiable functions of them).

        `[w_ih, w_hh, b_ih, b_hh, w_hr]`, gate blocks reordered from bilm-tf's i, j, f, o
        to torch's i, f, g, o (j is torch's g), the +1 forget bias folded into `b_ih`
        and `b_hh` zero.

        Shape: [4D, input_size], [4D, P], [4D], [4D], [P, D]
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
        """`forward` as one `torch.lstm` call (see the module docstring).

        The batch goes in packed, so each row stops at its own length, or, on the CPU
        when nobody reads the final state, padded: every row then runs every step, but
        the rows are sorted and right-padded, so a row's real steps come before its
        padding and are unchanged; its outputs past its length are zeroed.
        Every row must run at least one step (`batch_sizes[0] == batch`).
        """
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
        # The fused kernels take one dtype for inputs, weights and state; autocast does not
        # cover them, so under autocast the recurrence runs in the weights' dtype. cuDNN
        # warns that the reordered weights are not one flat buffer (they are copied into
        # one per call, small next to the recurrence); oneDNN that it leaves projections to
        # torch's own loop, which is the loop we want.
        with torch.autocast(inputs.device.type, enabled=False), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")
            warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")
            if padded:
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
        """(h0, c0) as `torch.lstm` takes them: [1, batch, projection_dim] and [1, batch, dim], in `dtype`."""
        if initial_state is None:
            batch_size = inputs.shape[1]
            h0 = inputs.new_zeros(1, batch_size, self.projection_dim, dtype=dtype)
            c0 = inputs.new_zeros(1, batch_size, self.dim, dtype=dtype)
            return h0, c0
        h0, c0 = (s.unsqueeze(0).to(dtype) for s in initial_state)
        return h0, c0


class LSTMStack(nn.Module):
    """`n_layers` cells of one direction, with bilm-tf's residual connections.

    Layer 0 reads the token vectors; layer l >= 1 reads layer l-1's output. With
    `use_skip_connections`, every layer l >= 1 reports `cell output + layer input`, and
    that sum is also the next layer's input; the recurrent h inside a layer is the cell
    output *without* the residual (TensorFlow `ResidualWrapper`; docs/bilm_tf.md §5).

    Dropout (training only) is applied to every layer's input, as bilm-tf trained it
    (0.1 for the published models; 0 at inference).
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

        Shape:
            inputs: [steps, batch, input_size], time-major, rows sorted longest first
            returns: one [steps, batch, projection_dim] output per layer (residual
            included), and each layer's final `(h, c)`.
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
