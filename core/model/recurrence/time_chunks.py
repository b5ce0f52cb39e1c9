"""Long rows stepped a chunk of steps at a time (inference).

A batch of long rows, such as the windows of a long document (each 1026 steps with
`<S>` and `</S>`), runs its two stacks one chunk of `CHUNK_STEPS` steps at a time.
Each layer starts a chunk from the `(h, c)` it ended the last one with, so every step
computes what it computes in one pass over all steps. A chunk is a whole number of the
cell's input blocks (`input_block_steps`), so the products are the same products too,
and the outputs equal one pass's to the last bit on the step loop.

What changes is what is held at once: the backward stack's outputs once (one pass keeps
them reversed, then copies them back into time order), and one chunk of input in time
order (one pass makes two copies of all of it, sorted and reversed). The runtime's
batching counts a row's positions up to `CHUNK_STEPS`
(`elmo_core.runtime.batching.batches_by_token_budget`), so the windows of a long document
share a batch: 16 at the default budget of 4096 positions. The LSTM's products then run
on 16 columns per step instead of 3, which on a CPU costs about the same per step
(`benchmarks/bench_long_line.py`).

`Recurrence` takes this path on its own on the "step" and "fused" paths, for a batch of
more than `CHUNK_STEPS` steps with no gradient through the LSTMs, no carried state and
no LSTM dropout acting (a frozen biLM under a trained scalar mix is stepped in chunks).
"""

from __future__ import annotations

import torch

from .lstm import (
    LSTMStack,
    LSTMState,
    RunDirections,
    StackOutputs,
    StackRun,
    input_block_steps,
    reverse_index,
    sort_rows,
)

CHUNK_STEPS = 256
"""Steps per chunk (rounded up to whole input blocks): long enough that a chunk's work
dwarfs its bookkeeping, short enough that 16 rows of it fit the default budget of padded
positions (4096)."""


def chunk_length(batch_size: int, steps: int = CHUNK_STEPS) -> int:
    """`steps` rounded up to a whole number of the cell's input blocks for `batch_size` rows."""
    block = input_block_steps(batch_size)
    return block * max(1, -(-steps // block))


def run_in_chunks(
    stacks: tuple[LSTMStack, LSTMStack],
    tokens: torch.Tensor,
    lengths: torch.Tensor,
    *,
    steps: int = CHUNK_STEPS,
    fused: bool = False,
    run_directions: RunDirections | None = None,
) -> StackOutputs:
    """Both stacks over [batch, steps, P] inputs, `steps` steps at a time (see the module docstring).

    Args:
        stacks: The forward and the backward stack.
        tokens: [batch, num_steps, P] layer-0 vectors, right-padded.
        lengths: [batch] real steps per row.
        steps: Steps per chunk (rounded up by `chunk_length`).
        fused: One `torch.lstm` call per direction, layer and chunk (clip-free cells).
        run_directions: As in `BiLM.run_sorted`; None runs the directions one after the other.

    Returns:
        See `StackOutputs`: as `BiLM.run_sorted` returns them, rows sorted longest first.
    """
    batch_size, num_steps, _ = tokens.shape
    sorted_lengths, order, batch_sizes = sort_rows(lengths, num_steps)
    forward_positions = torch.arange(num_steps, device=lengths.device)[:, None].expand(-1, batch_size)  # t reads t
    backward_positions = reverse_index(sorted_lengths, num_steps)  # each row reversed over its length
    chunk = chunk_length(batch_size, steps)

    def forward() -> StackRun:
        return _stack_in_chunks(stacks[0], tokens, order, forward_positions, batch_sizes, chunk, fused)

    def backward() -> StackRun:
        return _stack_in_chunks(stacks[1], tokens, order, backward_positions, batch_sizes, chunk, fused)

    if run_directions is not None:
        (forward_out, _), (backward_out, _) = run_directions(forward, backward)
    else:
        forward_out, _ = forward()
        backward_out, _ = backward()
    return forward_out, backward_out, order


def _stack_in_chunks(
    stack: LSTMStack,
    tokens: torch.Tensor,
    order: torch.Tensor,
    positions: torch.Tensor,
    batch_sizes: list[int],
    chunk: int,
    fused: bool,
) -> StackRun:
    """One stack over the rows `order` of `tokens`, step t of row r reading position `positions[t, r]`.

    Returns each layer's outputs [steps, batch, P] in forward time order (rows sorted as
    `order`), and the final states.
    """
    num_steps, batch_size = positions.shape
    outputs: list[torch.Tensor] = []
    states: list[LSTMState | None] | None = None
    for start in range(0, num_steps, chunk):
        end = min(num_steps, start + chunk)
        index = positions[start:end]  # [chunk, batch]
        inputs = tokens[order[None, :], index]  # [chunk, batch, P], time-major: this chunk's input only
        ys, states = stack(inputs, batch_sizes[start:end], states, fused=fused, final_state=True)
        outputs = outputs or [y.new_empty(num_steps, batch_size, y.shape[-1]) for y in ys]
        for out, y in zip(outputs, ys):
            out.scatter_(0, index[..., None].expand(-1, -1, y.shape[-1]), y)  # step t of row r: its position
    return outputs, [state for state in states or [] if state is not None]
