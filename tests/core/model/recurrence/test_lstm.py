"""The LSTM cell's step loop: its element-wise part (eager and compiled) and its column form for
float32 inference on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import elmo_core.model.recurrence.lstm as lstm_module
from elmo_core import embed_sentences, quantize_int8
from elmo_core.model.recurrence.lstm import LSTMCellWithProjection, compile_recurrence, lstm_gates
from tests.conftest import make_tiny_elmo

TEXT = [["the", "cat", "sat", "on", "the", "mat", "."], ["a"], [f"w{k}" for k in range(23)]]
# torch.compile's own imports still touch torch.jit, which warns about itself.
JIT_WARNING = "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"


def test_lstm_gates_match_the_cell_formula():
    torch.manual_seed(0)
    z, c = torch.randn(5, 4 * 3) * 3, torch.randn(5, 3) * 3
    i, j, f, o = z.numpy().reshape(5, 4, 3).transpose(1, 0, 2)
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    c_new = np.clip(sig(f) * c.numpy() + sig(i) * np.tanh(j), -2.0, 2.0)
    got_c, got_h = lstm_gates(z, c, 2.0)
    np.testing.assert_allclose(got_c.numpy(), c_new, atol=1e-6, rtol=0)
    np.testing.assert_allclose(got_h.numpy(), sig(o) * np.tanh(c_new), atol=1e-6, rtol=0)
    assert lstm_gates(z, c, None)[0].abs().max() > 2.0  # no clip when None


def _compiled_matches_eager(device: str) -> None:
    elmo = make_tiny_elmo().to(device)
    expected = embed_sentences(elmo, TEXT, layers="all")
    compile_recurrence(elmo)
    # Two batchings: the dynamic shapes must not change values (or recompile per size).
    for batch_size in (None, 1):
        for g, e in zip(embed_sentences(elmo, TEXT, layers="all", batch_size=batch_size), expected):
            np.testing.assert_allclose(g, e, atol=1e-5, rtol=1e-4)
    compile_recurrence(elmo, enabled=False)
    assert not any(getattr(m, "compile_recurrence", False) for m in elmo.modules())


@pytest.mark.slow
@pytest.mark.filterwarnings(JIT_WARNING)
def test_compiled_recurrence_matches_eager_on_cpu():
    _compiled_matches_eager("cpu")


@pytest.mark.gpu
@pytest.mark.filterwarnings(JIT_WARNING)
def test_compiled_recurrence_matches_eager_on_gpu():
    _compiled_matches_eager("cuda")


@pytest.mark.gpu
def test_bf16_autocast_on_gpu_stays_close_to_float32():
    elmo = make_tiny_elmo().to("cuda")
    ref = np.concatenate(embed_sentences(elmo, TEXT, layers="mix"))
    got = np.concatenate(embed_sentences(elmo, TEXT, layers="mix", autocast_dtype=torch.bfloat16))
    assert got.dtype == np.float32 and got.shape == ref.shape
    cos = (got * ref).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(ref, axis=-1))
    assert cos.min() > 0.99, cos.min()


def test_autocast_dtype_must_be_half_precision():
    with pytest.raises(ValueError, match="autocast_dtype must be torch.bfloat16, torch.float16 or None"):
        embed_sentences(make_tiny_elmo(), TEXT, autocast_dtype=torch.float64)


def _clipping_cell(cell_clip: float | None = 0.5, proj_clip: float | None = 0.3) -> LSTMCellWithProjection:
    torch.manual_seed(0)
    cell = LSTMCellWithProjection(24, 64, 16, cell_clip, proj_clip)
    with torch.no_grad():
        for p in cell.parameters():
            p.normal_(0.0, 0.3)
    return cell


@pytest.mark.parametrize(
    ("lengths", "block_rows", "with_state"),
    [
        ([11, 11, 7, 4, 4, 1], 128, False),  # one input block, rows ending at different steps
        ([11, 11, 7, 4, 4, 1], 8, True),  # an input block every 2 steps, carried state
        ([9, 5, 0], 4, True),  # a row with no step at all keeps its initial state
        ([6], 1, True),  # one row, a block per step
        ([13] * 5, 32, False),  # no row ends early
    ],
)
def test_cpu_inference_runs_on_columns_with_the_row_loops_values(monkeypatch, lengths, block_rows, with_state):
    cell = _clipping_cell()
    monkeypatch.setattr(lstm_module, "INPUT_BLOCK_ROWS", block_rows)
    torch.manual_seed(1)
    steps, batch = max(lengths), len(lengths)
    batch_sizes = [sum(n > t for n in lengths) for t in range(steps)]
    x = torch.randn(steps, batch, 24)
    state = (torch.randn(batch, 16), torch.randn(batch, 64)) if with_state else None
    given = [t.clone() for t in (x, *(state or ()))]
    with torch.enable_grad():  # the reference: the out-of-place row loop autograd runs
        ref_out, (ref_h, ref_c) = cell(x, batch_sizes, state)
    ref_out, ref_h, ref_c = ref_out.detach(), ref_h.detach(), ref_c.detach()
    with torch.inference_mode():
        assert cell._takes_columns(x)
        out, (h, c) = cell(x, batch_sizes, state)
    for got, want in ((out, ref_out), (h, ref_h), (c, ref_c)):
        assert got.shape == want.shape and got.is_contiguous()
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    assert bool((ref_c.abs() == 0.5).any()) and float(ref_out.abs().max()) == pytest.approx(0.3)  # both clips bite
    for t, n in enumerate(batch_sizes):
        assert not out[t, n:].any()  # ended rows hold zeros
    for before, after in zip(given, (x, *(state or ()))):
        assert torch.equal(before, after)  # the caller's inputs and state are not written


def test_the_column_loop_is_chosen_for_float32_cpu_inference_only():
    cell = _clipping_cell()
    x = torch.randn(3, 2, 24)
    with torch.inference_mode():
        assert cell._takes_columns(x)
        for dtype in (torch.bfloat16, torch.float16):  # autocast (bf16: elmo_core.model.precision) keeps the row loop
            with torch.autocast("cpu", dtype=dtype):
                assert not cell._takes_columns(x)
        assert not cell._takes_columns(x.double())
        cell.compile_recurrence = True
        assert not cell._takes_columns(x)
        cell.compile_recurrence = False
    assert not cell._takes_columns(x)  # autograd: the row loop
    with torch.no_grad():
        assert cell._takes_columns(x)
    int8 = quantize_int8(make_tiny_elmo()).bilm.forward_layers.layers[0]
    with torch.inference_mode():
        assert not int8._takes_columns(torch.randn(3, 2, int8.input_size))
