"""The LSTM step's element-wise part, eager and compiled (torch.compile)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elmo_core import compile_recurrence, embed_sentences
from elmo_core.model.lstm import lstm_gates

from ..conftest import make_tiny_elmo

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
