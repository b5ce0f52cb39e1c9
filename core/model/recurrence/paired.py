"""Both directions of a layer in one batched product per step ("paired"), and the same
replayed as CUDA graphs ("captured"). Both directions sit on a leading axis of 2, the
backward one reading each row reversed over its own length:

    pre   = x @ W_x + B (+1 on the forget block)      [2, steps, batch, 4D]
    z_t   = pre[:, t] + h @ W_h                        [2, batch, 4D]
    c', g = lstm_gates(z_t, c, cell_clip)              [2, batch, D]
    h'    = clip(g @ W_P, proj_clip)                   [2, batch, P]
    h, c  = where(t < length, (h', c'), (h, c))        rows past their end keep their state
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict

import torch

from .dropout import fast_dropout
from .lstm import FORGET_BIAS, LSTMStack, lstm_gates, reverse_index
from .paired_bptt import paired_training_stacks


def bucket_shape(batch_size: int, num_steps: int) -> tuple[int, int]:
    """The (batch, steps) a captured graph is recorded for, >= the given shape.

    Steps round up to a multiple of 8 (16 above 64, 64 above 256), rows to a power of two
    (a multiple of 256 above 1024). A corpus then needs a few dozen graphs.

    Raises:
        ValueError: for sizes < 1.
    """
    if batch_size < 1 or num_steps < 1:
        raise ValueError(f"batch_size and num_steps must be >= 1; got {batch_size} and {num_steps}.")
    step_unit = 8 if num_steps <= 64 else 16 if num_steps <= 256 else 64
    steps = -(-num_steps // step_unit) * step_unit
    rows = 1 << (batch_size - 1).bit_length() if batch_size <= 1024 else -(-batch_size // 256) * 256
    return rows, steps


def _paired_weights(forward_cell, backward_cell):  # noqa: ANN001, ANN202
    # W_x [2, in, 4D], B [2, 1, 4D] (forget bias added), W_h [2, P, 4D], W_P [2, D, P]
    cells = (forward_cell, backward_cell)
    D = forward_cell.dim
    w_x = torch.stack([c.input_linear.weight.t() for c in cells])
    bias = torch.stack([c.input_linear.bias for c in cells])[:, None, :].clone()
    bias[..., 2 * D : 3 * D] += FORGET_BIAS  # block order i, j, f, o
    w_h = torch.stack([c.state_linear.weight.t() for c in cells])
    w_p = torch.stack([c.state_projection.weight.t() for c in cells])
    return w_x, bias, w_h, w_p


def _paired_layer(forward_cell, backward_cell, x: torch.Tensor, active: torch.Tensor):  # noqa: ANN001
    # x [2, steps, batch, in], active [steps, batch] bool -> [2, steps, batch, P]
    w_x, bias, w_h, w_p = _paired_weights(forward_cell, backward_cell)
    _, num_steps, batch_size, _ = x.shape
    D, P = forward_cell.dim, forward_cell.projection_dim
    cell_clip, proj_clip = forward_cell.cell_clip, forward_cell.proj_clip
    pre = torch.baddbmm(bias, x.reshape(2, num_steps * batch_size, -1), w_x)  # [2, steps * batch, 4D]
    pre = pre.view(2, num_steps, batch_size, 4 * D)
    # The state stays float32 under autocast; only the products run in its dtype.
    h = pre.new_zeros(2, batch_size, P, dtype=torch.float32)
    c = pre.new_zeros(2, batch_size, D, dtype=torch.float32)
    outputs = []
    for t, pre_t in enumerate(pre.unbind(1)):
        z = torch.baddbmm(pre_t, h, w_h)  # [2, batch, 4D]
        c_t, gated = lstm_gates(z.view(2 * batch_size, 4 * D).float(), c.view(2 * batch_size, D), cell_clip)
        h_t = torch.bmm(gated.view(2, batch_size, D), w_p).float()  # [2, batch, P]
        if proj_clip:
            h_t = h_t.clamp(-proj_clip, proj_clip)
        keep = active[t][None, :, None]  # [1, batch, 1]
        h = torch.where(keep, h_t, h)
        c = torch.where(keep, c_t.view(2, batch_size, D), c)
        outputs.append(h_t * keep)
    return torch.stack(outputs, dim=1)  # [2, steps, batch, P]


def paired_stacks(
    stacks: tuple[LSTMStack, LSTMStack], tokens: torch.Tensor, lengths: torch.Tensor
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Both LSTM stacks over a batch, one batched product per step for both directions.

    Args:
        stacks: `(forward_layers, backward_layers)` of a `BiLM`.
        tokens: [batch, steps, P] layer-0 vectors, right-padded.
        lengths: [batch] real positions per row (0 allowed: such a row stays zero).

    Returns:
        Per stack, one time-major [steps, batch, P] tensor per layer, in the input's row
        order and time direction, zero past a row's length.
    """
    forward_stack, backward_stack = stacks
    cells = [cell for stack in stacks for cell in stack.layers]
    needs_grad = torch.is_grad_enabled() and any(p.requires_grad for s in stacks for p in s.parameters())
    if needs_grad and all(cell.can_fuse for cell in cells) and bool((lengths > 0).all()):
        return paired_training_stacks(stacks, tokens, lengths)
    num_steps = tokens.shape[1]
    x = tokens.transpose(0, 1)  # [steps, batch, P]
    reverse = reverse_index(lengths, num_steps)[..., None]  # [steps, batch, 1]

    def flip(t: torch.Tensor) -> torch.Tensor:
        return t.gather(0, reverse.expand(-1, -1, t.shape[-1]))

    active = torch.arange(num_steps, device=tokens.device)[:, None] < lengths[None, :]  # [steps, batch]
    layer_input = torch.stack([x, flip(x)])  # [2, steps, batch, P]
    outputs = []
    for k, (fc, bc) in enumerate(zip(forward_stack.layers, backward_stack.layers)):
        if forward_stack.dropout:
            layer_input = fast_dropout(layer_input, forward_stack.dropout, forward_stack.training)
        y = _paired_layer(fc, bc, layer_input, active)
        if k > 0 and forward_stack.use_skip_connections:
            y = y + layer_input  # the residual adds the (dropped-out) input, as LSTMStack does
        outputs.append(y)
        layer_input = y
    return [y[0] for y in outputs], [flip(y[1]) for y in outputs]  # [steps, batch, P] each


class CapturedRecurrence:
    """`paired_stacks` recorded as CUDA graphs, one per bucketed (batch, steps) shape.

    A batch is copied into its bucket's static inputs (extra rows get length 0), the graph
    is replayed and the outputs copied out. Graphs are recorded on first use of a shape and
    kept in an LRU. They share one memory pool: each replay recomputes all it reads. A new
    weight storage or autocast dtype records new graphs. In-place weight changes are read.

    Args:
        max_graphs: Graphs kept.
    """

    def __init__(self, max_graphs: int = 32) -> None:
        self.max_graphs = max_graphs
        self._graphs: OrderedDict[tuple, tuple] = OrderedDict()
        self._pool: torch.cuda._POOL_HANDLE | None = None  # the graphs' shared memory pool
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # graphs are not picklable: rebuilt on first use
        return {"max_graphs": self.max_graphs}

    def __setstate__(self, state: dict) -> None:
        CapturedRecurrence.__init__(self, state["max_graphs"])

    def __len__(self) -> int:
        return len(self._graphs)

    def __call__(
        self, stacks: tuple[LSTMStack, LSTMStack], tokens: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """As `paired_stacks`. The outputs are fresh tensors, not graph memory."""
        batch_size, num_steps, width = tokens.shape
        rows, steps = bucket_shape(batch_size, num_steps)
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None
        weights = tuple(p.data_ptr() for stack in stacks for p in stack.parameters())
        key = (rows, steps, width, tokens.dtype, dtype, tokens.device, weights)
        with self._lock:
            graph, static_tokens, static_lengths, static_out = self._graph(key, stacks, tokens)
            static_tokens.zero_()
            static_tokens[:batch_size, :num_steps].copy_(tokens)
            static_lengths.zero_()
            static_lengths[:batch_size].copy_(lengths)
            graph.replay()
            forward_out, backward_out = static_out
            return (
                [y[:num_steps, :batch_size].clone() for y in forward_out],
                [y[:num_steps, :batch_size].clone() for y in backward_out],
            )

    def _graph(self, key: tuple, stacks, tokens: torch.Tensor) -> tuple:  # noqa: ANN001
        if key in self._graphs:
            self._graphs.move_to_end(key)
            return self._graphs[key]
        rows, steps, width = key[:3]
        static_tokens = tokens.new_zeros(rows, steps, width)
        static_lengths = torch.zeros(rows, dtype=torch.long, device=tokens.device)
        static_lengths[:1] = 1  # warm-up on a non-empty batch
        # Autocast's cache of cast weights must stay off: a graph that read a cached cast
        # would read freed memory once the caller's autocast region ends.
        dtype = key[4]
        no_cache = torch.autocast("cuda", dtype=dtype, cache_enabled=False) if dtype else contextlib.nullcontext()
        side = torch.cuda.Stream(device=tokens.device)
        side.wait_stream(torch.cuda.current_stream(tokens.device))
        with torch.cuda.stream(side), no_cache:  # warm-up outside the graph, as torch.cuda.graphs asks
            paired_stacks(stacks, static_tokens, static_lengths)
        torch.cuda.current_stream(tokens.device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool), no_cache:
            static_out = paired_stacks(stacks, static_tokens, static_lengths)
        entry = (graph, static_tokens, static_lengths, static_out)
        self._graphs[key] = entry
        while len(self._graphs) > self.max_graphs:
            self._graphs.popitem(last=False)
        return entry
