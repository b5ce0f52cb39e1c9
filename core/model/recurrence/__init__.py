"""How the biLM's LSTMs run: every path, and the chooser (`Recurrence`) that picks one.

This package is the one place to read how the recurrence is computed:

    lstm.py          the cell (`LSTMCellWithProjection`) and a one-direction stack
                     (`LSTMStack`): the step loop on rows, the same loop on columns
                     (float32 inference on the CPU) and torch's fused LSTM. A `BiLM`
                     handed no `Recurrence` runs these: the reference.
    paired.py        both directions of a layer in one batched product per step
                     ("paired"), and the same recorded as CUDA graphs ("captured").
    paired_bptt.py   "paired" with the backward through time written out, for a
                     gradient pass (pretraining and fine-tuning).
    dropout.py       the dropout on each LSTM layer's input during training.
    time_chunks.py   long inference batches stepped a chunk of steps at a time, on
                     "step" or "fused": the same values, a fraction of the memory.
    scan.py          "paired" as one torch `scan` per layer: what a graph captured by
                     `torch.export` or ONNX runs (`elmo_core.model.capture`).

Four ways to compute the same thing (`BiLM(recurrence=Recurrence(mode))`, or
`load_elmo(..., recurrence=mode)`):

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

"auto" (the default) keeps the step loop on the CPU for inference, for every model (in
float32 run on columns, `lstm.py`). torch's CPU LSTM with projections is a per-step loop
too, and "fused" computes the padding of the padded batch: it was the slower of the two
there (`benchmarks/bench_core.py`, docs/results/speed-memory.md). A gradient pass through
a clip-free, stateless biLM on the CPU takes "paired", which then runs `paired_bptt.py`:
one autograd Function per layer with the backward through time written out
(`benchmarks/bench_train.py`). On CUDA it picks "fused" (cuDNN) for clip-free float cells
and, for cells with clips (the published models, which cuDNN cannot compute), "captured"
when nothing needs a gradient and the biLM is not stateful, else "step".

All four agree up to float rounding (tested at atol 2e-6 on the CPU); clips, the +1
forget bias, the residual connection and dropout are applied as in `LSTMStack`.

The thread rule (how many CPU threads a pass uses, and whether the two directions run
side by side) is a part the runtime passes in (`ThreadRule`, `elmo_core.runtime.threads`):
this package imports nothing outside the model. The biLM asks `Recurrence.plan` for the
path of a pass, and runs the step loop itself (`BiLM.run_sorted`) or `Recurrence.run`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import NamedTuple, Protocol, cast

import torch

from .lstm import LSTMCellWithProjection, LSTMStack, RunDirections, StackOutputs
from .paired import CapturedRecurrence, paired_stacks
from .time_chunks import CHUNK_STEPS, run_in_chunks

__all__ = ["RECURRENCES", "Recurrence", "ThreadRule", "resolve_recurrence"]

RECURRENCES = ("auto", "step", "fused", "paired", "captured")


class ThreadRule(Protocol):
    """How a forward pass uses CPU threads (the runtime's is `elmo_core.runtime.threads.THREAD_RULE`)."""

    def forward(self, device: torch.device) -> AbstractContextManager:
        """The context a whole forward pass on `device` runs in."""
        ...

    def run_directions(self, device: torch.device, recurrent_weights: int) -> RunDirections | None:
        """How to run the two directions (e.g. side by side on separate cores); None: one after the other."""
        ...


class Plan(NamedTuple):
    """How one pass runs its stacks (`Recurrence.plan`).

    Attributes:
        path: "step", "fused", "paired" or "captured".
        run_directions: Runs the two directions (e.g. side by side); None: one after the other.
        chunk_steps: Step the rows this many steps at a time (`time_chunks.py`); None: all at once.
    """

    path: str
    run_directions: RunDirections | None
    chunk_steps: int | None

    @property
    def fast(self) -> bool:
        """Whether `Recurrence.run` computes it (else the biLM's own step loop does)."""
        return self.path in ("paired", "captured") or self.chunk_steps is not None


class Recurrence:
    """How a `BiLM` runs its LSTMs here: the path `mode` resolves to, and the thread rule.

    A biLM is built with it (`BiLM(recurrence=...)`; the loaders pass one with the runtime's
    thread rule, `elmo_core.runtime.parts`). The biLM asks it for the plan of every forward
    pass and runs the whole pass inside `threads(device)`.

    Args:
        mode: One of RECURRENCES (see the module docstring).
        thread_rule: How a pass uses CPU threads (`ThreadRule`); None: torch's threads as
            they are, and the two directions one after the other.
        chunk_steps: A batch of more steps than this on the "step" or "fused" path, with
            no gradient, no carried state and no LSTM dropout acting, is stepped this many
            steps at a time (`time_chunks.py`: the same values, less memory); None never.

    Raises:
        ValueError: for an unknown mode.
    """

    def __init__(
        self, mode: str = "auto", thread_rule: ThreadRule | None = None, chunk_steps: int | None = CHUNK_STEPS
    ) -> None:
        if mode not in RECURRENCES:
            raise ValueError(f"recurrence must be one of {', '.join(RECURRENCES)}; got {mode!r}.")
        self.mode = mode
        self.thread_rule = thread_rule
        self.chunk_steps = chunk_steps
        self.captured = CapturedRecurrence()

    def __repr__(self) -> str:
        return f"Recurrence({self.mode!r})"

    def threads(self, device: torch.device) -> AbstractContextManager:
        """The thread rule's context for a whole forward pass on `device`."""
        return nullcontext() if self.thread_rule is None else self.thread_rule.forward(device)

    def plan(self, stacks: tuple[LSTMStack, LSTMStack], tokens: torch.Tensor, *, stateful: bool, dropout: bool) -> Plan:
        """The path this pass takes, and how its two directions and its steps run.

        Args:
            stacks: The biLM's forward and backward stacks.
            tokens: [batch, steps, P] layer-0 vectors.
            stateful: The biLM carries LSTM states across batches.
            dropout: LSTM dropout acts in this pass (its draws stay those of one pass).
        """
        # A gradient flows through the stacks when their weights train, or when only the
        # char CNN does (its vectors `tokens` then carry the graph): either way no CUDA
        # graph replay, which would cut the graph at its static input buffers.
        trainable = tokens.requires_grad or any(p.requires_grad for s in stacks for p in s.parameters())
        needs_grad = torch.is_grad_enabled() and trainable
        path = resolve_recurrence(self.mode, stacks, tokens.device, needs_grad, stateful)
        if path in ("paired", "captured"):
            return Plan(path, None, None)
        run_directions = None
        if self.thread_rule is not None:
            cell = cast(LSTMCellWithProjection, stacks[0].layers[0])  # torch types a ModuleList's items as Module
            run_directions = self.thread_rule.run_directions(tokens.device, 4 * cell.dim * cell.projection_dim)
        chunk = self.chunk_steps
        if chunk is None or tokens.shape[1] <= chunk or needs_grad or stateful or dropout:
            chunk = None
        return Plan(path, run_directions, chunk)

    def run(
        self, plan: Plan, stacks: tuple[LSTMStack, LSTMStack], tokens: torch.Tensor, lengths: torch.Tensor
    ) -> StackOutputs:
        """Both stacks by a fast path of `plan` (`plan.fast`): rows in batch order on the
        paired and captured paths, sorted longest first in chunks."""
        if plan.path in ("paired", "captured"):
            run = paired_stacks if plan.path == "paired" else self.captured
            forward_out, backward_out = run(stacks, tokens, lengths)  # time-major, batch order
            return forward_out, backward_out, torch.arange(tokens.shape[0], device=tokens.device)
        if plan.chunk_steps is None:
            raise ValueError(f"{plan} runs the step loop (BiLM.run_sorted), not a fast path.")
        return run_in_chunks(
            stacks,
            tokens,
            lengths,
            steps=plan.chunk_steps,
            fused=plan.path == "fused",
            run_directions=plan.run_directions,
        )


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
            # backward (`elmo_core.model.recurrence.paired_bptt`); everything else keeps the step loop.
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
