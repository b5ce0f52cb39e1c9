"""Long rows stepped a chunk of steps at a time (inference).

Each layer starts a chunk from the `(h, c)` it ended the last one with, and a chunk is
whole input blocks, so the outputs equal one pass's to the last bit. Only one chunk of
input is held at once. `Recurrence` takes this path for long batches on "step" and
"fused" with no gradient, no carried state and no LSTM dropout.
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
"""Steps per chunk, rounded up to whole input blocks: 16 rows fit the default budget of 4096 positions."""


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
    """Both stacks over [batch, steps, P] inputs, `steps` steps at a time.

    Args:
        stacks: The forward and the backward stack.
        tokens: [batch, num_steps, P] layer-0 vectors, right-padded.
        lengths: [batch] real steps per row.
        steps: Steps per chunk (rounded up by `chunk_length`).
        fused: One `torch.lstm` call per direction, layer and chunk (clip-free cells).
        run_directions: As in `BiLM.run_sorted`. None runs the directions in turn.

    Returns:
        `StackOutputs` as `BiLM.run_sorted` returns them, rows sorted longest first.
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
    # One stack over the rows `order` of `tokens`, step t of row r reading `positions[t, r]`
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
