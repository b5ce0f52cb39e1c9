"""How the biLM's LSTM recurrence runs: the step loop, fused kernels, or both directions
together at a fixed shape (replayable as a CUDA graph).

Four ways to compute the same thing (`BiLM.recurrence`, set with `set_recurrence`):

    "step"      the cell's own loop (`LSTMCellWithProjection`): per direction and layer,
                step t runs on the rows still going (rows sorted by length). Python
                launches a handful of small kernels per step. The CPU reference.
    "fused"     clip-free cells only: one `torch.lstm` call per direction and layer
                (cuDNN on a GPU, torch's native loop on the CPU). See `lstm.py`.
    "paired"    both directions of a layer in one batched product per step, over a
                fixed [steps, batch] shape: every row runs every step, a mask freezes a
                row's state after its own last token and zeroes its outputs there, so
                no row's numbers depend on another row or on the padding. Half the
                launches of "step", and no shape depends on the data.
    "captured"  "paired" recorded once per bucketed (batch, steps) shape as a CUDA graph
                (`torch.cuda.CUDAGraph`) and replayed: one launch per batch, no Python
                per step. CUDA only; inference only (no gradient, not stateful).

    "auto" (the default) keeps the step loop on the CPU for inference, for every model
    (in float32 run on columns, `elmo_core.model.lstm`). torch's CPU LSTM with
    projections is a per-step loop too, and "fused" computes the padding of the padded
    batch: it was the slower of the two there (`benchmarks/bench_core.py`,
    docs/results/speed-memory.md). Training a clip-free, stateless biLM
    on the CPU (a gradient flows into the LSTMs) takes "paired", which then runs
    `elmo_core.runtime.paired_bptt`: one autograd Function per layer with the backward through
    time written out (`benchmarks/bench_train.py`). On CUDA it picks "fused" (cuDNN)
    for clip-free float cells and, for cells with clips (the published models, which
    cuDNN cannot compute), "captured" when nothing needs a gradient and the biLM is not
    stateful, else "step".

All four agree up to float rounding (tested at atol 2e-6 on the CPU); clips, the +1
forget bias, the residual connection and dropout are applied as in `LSTMStack`.

The paired step, for a layer with input x (both directions stacked on a leading axis
of 2; the backward direction reads each row reversed over its own length):

    pre      = x @ W_x + B (+1 on the forget block)        [2, steps, batch, 4D]
    z_t      = pre[:, t] + h @ W_h                          [2, batch, 4D]   (bmm)
    c', g    = lstm_gates(z_t, c, cell_clip)                [2, batch, D]
    h'       = clip(g @ W_P, proj_clip)                     [2, batch, P]    (bmm)
    h, c     = where(t < length, (h', c'), (h, c))          rows past their end keep their state
    out[:, t] = h' * (t < length)
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict

import torch

from ..model.bilm import BiLM, StackOutputs, reverse_index
from ..model.lstm import FORGET_BIAS, LSTMStack, lstm_gates
from .dropout import fast_dropout
from .threads import directions_side_by_side, forward_threads, run_side_by_side
from .token_cache import DEFAULT_TOKEN_CACHE_WORDS, TokenCache

__all__ = [
    "RECURRENCES",
    "CapturedRecurrence",
    "Recurrence",
    "bucket_shape",
    "paired_stacks",
    "resolve_recurrence",
    "set_recurrence",
]

RECURRENCES = ("auto", "step", "fused", "paired", "captured")


class Recurrence:
    """How a `BiLM` runs its LSTMs here: the path `mode` resolves to, and the thread rule.

    Handed to a biLM as `bilm.recurrence` (by `set_recurrence` or `attach_runtime`); the
    biLM calls it for both stacks of every forward pass and runs the whole pass inside
    `threads(device)` (`elmo_core.runtime.threads.forward_threads`).

    Args:
        mode: One of RECURRENCES (see the module docstring).

    Raises:
        ValueError: for an unknown mode.
    """

    def __init__(self, mode: str = "auto") -> None:
        if mode not in RECURRENCES:
            raise ValueError(f"recurrence must be one of {', '.join(RECURRENCES)}; got {mode!r}.")
        self.mode = mode
        self.captured = CapturedRecurrence()

    def __repr__(self) -> str:
        return f"Recurrence({self.mode!r})"

    def threads(self, device: torch.device) -> contextlib.AbstractContextManager:
        """No more CPU threads than there are free CPUs (a taken core stalls every step)."""
        return forward_threads(device)

    def __call__(self, bilm: BiLM, tokens: torch.Tensor, lengths: torch.Tensor) -> StackOutputs:
        """Both stacks of `bilm` by the path `mode` resolves to; rows in batch order on the
        paired and captured paths, sorted longest first on the others."""
        stacks = (bilm.forward_layers, bilm.backward_layers)
        # A gradient flows through the stacks when their weights train, or when only the
        # char CNN does (its vectors `tokens` then carry the graph): either way no CUDA
        # graph replay, which would cut the graph at its static input buffers.
        trainable = tokens.requires_grad or any(p.requires_grad for s in stacks for p in s.parameters())
        needs_grad = torch.is_grad_enabled() and trainable
        path = resolve_recurrence(self.mode, stacks, tokens.device, needs_grad, bilm.stateful)
        if path in ("paired", "captured"):
            run = paired_stacks if path == "paired" else self.captured
            forward_out, backward_out = run(stacks, tokens, lengths)  # time-major, batch order
            return forward_out, backward_out, torch.arange(tokens.shape[0], device=tokens.device)
        lstm = bilm.options.lstm
        split = directions_side_by_side(tokens.device, 4 * lstm.dim * lstm.projection_dim)
        run_directions = (lambda first, second: run_side_by_side(first, second, split)) if split else None
        return bilm.run_sorted(tokens, lengths, fused=path == "fused", run_directions=run_directions)


def set_recurrence(module: torch.nn.Module, mode: str = "auto") -> torch.nn.Module:
    """Hand every `BiLM` inside `module` a `Recurrence(mode)` (see the module docstring).

    Args:
        module: An `Elmo`, `BiLM`, `BiLMLanguageModel` or anything containing a `BiLM`.
        mode: One of RECURRENCES. "auto" is the default. "step" runs the cell's own loop
            everywhere, with every faster path off.

    Returns:
        `module`, changed in place.

    Raises:
        ValueError: for an unknown mode.
    """
    Recurrence(mode)  # an unknown mode is refused before any biLM changes
    for bilm in module.modules():
        if isinstance(bilm, BiLM):
            if bilm.recurrence is None and bilm.token_cache is None:  # no runtime yet: the default cache too
                bilm.token_cache = TokenCache(DEFAULT_TOKEN_CACHE_WORDS)
            bilm.recurrence = Recurrence(mode)  # one each: its captured graphs are its own
    return module


def resolve_recurrence(
    mode: str, stacks: tuple[LSTMStack, LSTMStack], device: torch.device, needs_grad: bool, stateful: bool
) -> str:
    """The concrete path ("step", "fused", "paired" or "captured") that `mode` means here.

    Raises:
        ValueError: when the asked path cannot compute this model exactly: "fused" with
            clips or int8 cells; "paired" int8 or stateful; "captured" off CUDA, with
            gradients, int8 or stateful.
    """
    cells = [cell for stack in stacks for cell in stack.layers]
    can_fuse = all(cell.can_fuse for cell in cells)
    can_capture = device.type == "cuda" and not needs_grad and not stateful and not _quantized(cells)
    if mode == "auto":
        if device.type != "cuda":
            # Training a clip-free biLM: both directions per step and a written-out
            # backward (`elmo_core.runtime.paired_bptt`); everything else keeps the step loop.
            return "paired" if needs_grad and can_fuse and not stateful else "step"
        if can_fuse:
            return "fused"
        return "captured" if can_capture else "step"
    if mode == "fused" and not can_fuse:
        raise ValueError(
            "recurrence='fused' needs cells without cell_clip/proj_clip and with float (not int8) "
            "weights: torch's fused LSTM kernels cannot clip. Use 'auto', which falls back to the step loop."
        )
    if mode == "captured" and not can_capture:
        raise ValueError(
            "recurrence='captured' replays CUDA graphs: it needs the model on a CUDA device, no "
            f"gradient, stateful=False and float weights; here device={device}, needs_grad={needs_grad}, "
            f"stateful={stateful}. Use 'auto' (or 'paired', the same computation without the graph)."
        )
    if mode == "paired" and (_quantized(cells) or stateful):
        raise ValueError(
            "recurrence='paired' needs float weights and starts every row from zero: an int8 or "
            "stateful biLM runs the step loop ('auto' or 'step')."
        )
    return mode


def _quantized(cells) -> bool:  # noqa: ANN001
    return not all(cell.has_float_linears for cell in cells)


def bucket_shape(batch_size: int, num_steps: int) -> tuple[int, int]:
    """The (batch, steps) a captured graph is recorded for, >= the given shape.

    Steps round up to a multiple of 8 (16 above 64, 64 above 256) and rows to a power of
    two (a multiple of 256 above 1024), so a corpus needs a few dozen graphs at most and
    a batch computes at most about 2x its rows and 1.25x its steps (the extra rows and
    steps are masked and never read).

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
    """Both directions' weights stacked on a leading axis of 2, as right-hand operands.

    Shape: W_x [2, in, 4D], B [2, 1, 4D] (forget bias added), W_h [2, P, 4D], W_P [2, D, P]
    """
    cells = (forward_cell, backward_cell)
    D = forward_cell.dim
    w_x = torch.stack([c.input_linear.weight.t() for c in cells])
    bias = torch.stack([c.input_linear.bias for c in cells])[:, None, :].clone()
    bias[..., 2 * D : 3 * D] += FORGET_BIAS  # block order i, j, f, o
    w_h = torch.stack([c.state_linear.weight.t() for c in cells])
    w_p = torch.stack([c.state_projection.weight.t() for c in cells])
    return w_x, bias, w_h, w_p


def _paired_layer(forward_cell, backward_cell, x: torch.Tensor, active: torch.Tensor):  # noqa: ANN001
    """One layer of both directions over a fixed shape (see the module docstring).

    Shape: x [2, steps, batch, in]; active [steps, batch] bool -> [2, steps, batch, P]
    """
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
        tokens: Token vectors (layer 0), batch-major, right-padded.
        lengths: Real positions per row (0 allowed: such a row stays zero).

    Returns:
        `(forward outputs, backward outputs)`, one tensor per layer, each time-major
        [steps, batch, P] in the input's row order and time direction, zero past a row's
        length; residual connections and dropout as in `LSTMStack.forward`.
    """
    forward_stack, backward_stack = stacks
    cells = [cell for stack in stacks for cell in stack.layers]
    needs_grad = torch.is_grad_enabled() and any(p.requires_grad for s in stacks for p in s.parameters())
    if needs_grad and all(cell.can_fuse for cell in cells) and bool((lengths > 0).all()):
        from .paired_bptt import paired_training_stacks  # it imports this module

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

    A batch is copied into the static input buffers of its bucket's graph (rows and steps
    beyond the batch get length 0 and are never read), the graph is replayed, and the
    outputs are copied out of the graph's memory before the next replay. Graphs are
    recorded on first use of a shape (one warm-up run on a side stream, then capture)
    and kept in an LRU of `max_graphs`; all graphs share one memory pool, which is safe
    because each replay recomputes everything it reads from its own static inputs and
    the weights. A change of the weights' storage (`.to()`, a new state dict assigned
    by reference) or of the autocast dtype records new graphs; in-place changes of the
    weights are read by the next replay.

    Args:
        max_graphs: Graphs kept (each holds its static inputs; the intermediates live
            in the shared pool).
    """

    def __init__(self, max_graphs: int = 32) -> None:
        self.max_graphs = max_graphs
        self._graphs: OrderedDict[tuple, tuple] = OrderedDict()
        self._pool: torch.cuda._POOL_HANDLE | None = None  # the graphs' shared memory pool
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # graphs are not picklable; rebuild on first use
        return {"max_graphs": self.max_graphs}

    def __setstate__(self, state: dict) -> None:
        CapturedRecurrence.__init__(self, state["max_graphs"])

    def __len__(self) -> int:
        return len(self._graphs)

    def __call__(
        self, stacks: tuple[LSTMStack, LSTMStack], tokens: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Same contract as `paired_stacks`; outputs are fresh tensors (not graph memory)."""
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
