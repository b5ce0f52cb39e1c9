"""How the biLM's LSTMs run: every path, and the chooser (`Recurrence`) that picks one.

    "step"      the cell's loop over rows sorted by length (`lstm.py`): the reference.
    "fused"     clip-free cells: one `torch.lstm` call per direction and layer (cuDNN).
    "paired"    both directions in one product per step, a mask freezing finished rows
                (`paired.py`). Training writes out its backward (`paired_bptt.py`).
    "captured"  "paired" replayed as CUDA graphs, for inference.

All paths agree up to float rounding.
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
    """How a forward pass uses CPU threads (`elmo_core.runtime.threads.THREAD_RULE`)."""

    def forward(self, device: torch.device) -> AbstractContextManager: ...

    def run_directions(self, device: torch.device, recurrent_weights: int) -> RunDirections | None:
        """How to run the two directions. None: one after the other."""
        ...


class Plan(NamedTuple):
    """How one pass runs its stacks: the path, the runner of the two directions (None: one
    after the other) and the steps per time chunk (None: all at once).
    """

    path: str
    run_directions: RunDirections | None
    chunk_steps: int | None

    @property
    def fast(self) -> bool:
        """Whether `Recurrence.run` computes it, not the biLM's step loop."""
        return self.path in ("paired", "captured") or self.chunk_steps is not None


class Recurrence:
    """How a `BiLM` runs its LSTMs here: the path `mode` resolves to, and the thread rule.

    Args:
        mode: One of RECURRENCES.
        thread_rule: How a pass uses CPU threads. None: torch's, one direction at a time.
        chunk_steps: Step longer inference batches this many steps at a time (less memory).

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
        """The path of a pass over [batch, steps, P] `tokens`, its directions and its chunks."""
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
        """Both stacks by the fast path of `plan`."""
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
    """The concrete path that `mode` means here.

    Raises:
        ValueError: when the path cannot compute this model exactly.
    """
    cells = [cell for stack in stacks for cell in stack.layers]
    can_fuse = all(cell.can_fuse for cell in cells)
    can_capture = device.type == "cuda" and not needs_grad and not stateful and not _quantized(cells)
    if mode == "auto":
        if device.type != "cuda":
            # Inference keeps the step loop: torch's CPU LSTM also computes the padding (bench_core.py).
            # Training a clip-free biLM pairs the directions, with a written-out backward (paired_bptt.py).
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
