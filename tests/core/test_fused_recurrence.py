"""Clip-free cells run as one `torch.lstm` call; values and gradients equal the step loop."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from elmo_core import Elmo, embed_sentences, quantize_int8, use_fused_recurrence
from elmo_core.lstm import LSTMCellWithProjection

from ..conftest import make_tiny_options

TEXT = [["the", "cat", "sat", "on", "the", "mat", "."], ["a"], ["w%d" % k for k in range(23)], []]


def _cell(cell_clip=None, proj_clip=None, seed=0) -> LSTMCellWithProjection:
    torch.manual_seed(seed)
    cell = LSTMCellWithProjection(6, 16, 8, cell_clip, proj_clip)
    with torch.no_grad():
        for p in cell.parameters():
            p.normal_(0.0, 0.5)
    return cell


def _run(cell, fused, x, batch_sizes, state):
    cell.fused_recurrence = fused
    cell.zero_grad()
    out, (h, c) = cell(x, batch_sizes, state)
    # A loss that reads outputs and both final states, so every gradient path counts.
    (out.square().sum() + h.sum() + 0.5 * c.sum()).backward()
    return [t.detach().clone() for t in (out, h, c)] + [p.grad.clone() for p in cell.parameters()]


@pytest.mark.parametrize("with_state", [False, True])
def test_fused_cell_equals_the_step_loop_with_gradients(with_state):
    cell = _cell()
    assert cell.runs_fused
    torch.manual_seed(1)
    lengths = [9, 9, 6, 3, 1]
    batch_sizes = [sum(n > t for n in lengths) for t in range(9)]
    x = torch.randn(9, 5, 6)
    state = (torch.randn(5, 8), torch.randn(5, 16)) if with_state else None
    step = _run(cell, False, x, batch_sizes, state)
    fused = _run(cell, True, x, batch_sizes, state)
    for a, b in zip(fused, step):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5)
    # Ended rows hold zeros, as in the step loop.
    assert step[0][3:, 3].abs().max() == 0 and fused[0][3:, 3].abs().max() == 0


def test_clipped_or_quantised_cells_keep_the_step_loop():
    assert not _cell(cell_clip=3.0).runs_fused
    assert not _cell(proj_clip=3.0).runs_fused
    cell = _cell()
    use_fused_recurrence(cell, False)
    assert not cell.runs_fused
    options = make_tiny_options()
    options = dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, cell_clip=None, proj_clip=None))
    quantised = quantize_int8(Elmo(options).eval())
    assert not any(m.runs_fused for m in quantised.modules() if isinstance(m, LSTMCellWithProjection))


def test_clip_free_model_gives_the_same_vectors_fused_and_stepwise():
    options = make_tiny_options()
    options = dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, cell_clip=None, proj_clip=None))
    torch.manual_seed(0)
    elmo = Elmo(options, token_cache_words=0).eval()
    with torch.no_grad():
        for p in elmo.bilm.parameters():
            p.normal_(0.0, 0.5)
    cells = [m for m in elmo.modules() if isinstance(m, LSTMCellWithProjection)]
    assert len(cells) == 4 and all(c.runs_fused for c in cells)
    fused = embed_sentences(elmo, TEXT, layers="all")
    use_fused_recurrence(elmo, False)
    step = embed_sentences(elmo, TEXT, layers="all")
    for f, s in zip(fused, step):
        assert f.shape == s.shape
        np.testing.assert_allclose(f, s, atol=2e-6, rtol=0)
    # Batch mates still do not matter on the fused path.
    use_fused_recurrence(elmo, True)
    alone = embed_sentences(elmo, [TEXT[0]], layers="all")[0]
    np.testing.assert_allclose(alone, fused[0], atol=1e-6, rtol=0)
