"""Opt-in int8 dynamic quantisation: what is replaced, how close it stays, what it refuses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from elmo_core import embed_sentences, quantize_int8, save_model_folder
from elmo_core.model.recurrence.lstm import LSTMCellWithProjection
from elmo_core.runtime.quantization import is_quantized
from tests.conftest import make_tiny_elmo

TEXT = [
    ["the", "cat", "sat", "on", "the", "mat", "."],
    ["naïve", "😀", "中华人民共和国", "x" * 80],
    ["a"],
] * 4


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def test_every_linear_layer_is_quantised_and_the_original_is_untouched():
    elmo = make_tiny_elmo()
    before = embed_sentences(elmo, TEXT)
    linear_names = {name for name, m in elmo.named_modules() if isinstance(m, nn.Linear)}
    lstm_names = {name for name in linear_names if "_layers." in name}
    # 3 products per LSTM cell x 2 layers x 2 directions; the highway and the char CNN
    # projection (layer 0, cached per word) stay float32.
    assert len(lstm_names) == 3 * 2 * 2 and len(linear_names - lstm_names) == 2
    q = quantize_int8(elmo)
    assert is_quantized(q) and not is_quantized(elmo)
    for name, module in q.named_modules():
        if name in lstm_names:
            assert type(module).__module__.startswith("torch.ao.nn.quantized"), name
        elif name in linear_names:
            assert isinstance(module, nn.Linear), name
    assert all(isinstance(m, LSTMCellWithProjection) for m in q.modules() if hasattr(m, "state_linear"))
    for a, b in zip(embed_sentences(elmo, TEXT), before):
        np.testing.assert_array_equal(a, b)


def test_int8_keeps_layer_0_exact_and_independent_of_history():
    elmo = make_tiny_elmo()
    q = quantize_int8(elmo)
    embed_sentences(q, [["unrelated", "words", "first"]] * 5)  # fills the token cache
    for g, e in zip(embed_sentences(q, TEXT, layers=0), embed_sentences(elmo, TEXT, layers=0)):
        np.testing.assert_allclose(g, e, atol=1e-6, rtol=0)


def test_int8_vectors_stay_close_to_float32():
    elmo = make_tiny_elmo()
    q = quantize_int8(elmo)
    for layers in (1, 2, "mix"):
        ref = np.concatenate(embed_sentences(elmo, TEXT, layers=layers))
        got = np.concatenate(embed_sentences(q, TEXT, layers=layers))
        assert got.shape == ref.shape and np.isfinite(got).all()
        cos = _cosines(got, ref)
        # int8 with one scale per weight row: each product keeps ~2 significant digits.
        assert cos.min() > 0.98, (layers, cos.min())
        assert not np.array_equal(got, ref)  # it really ran in int8


def test_int8_is_deterministic_for_the_same_batches():
    q = quantize_int8(make_tiny_elmo())
    first = embed_sentences(q, TEXT, layers="all")
    second = embed_sentences(q, TEXT, layers="all")
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


def test_quantised_models_refuse_to_be_saved_or_quantised_again(tmp_path):
    q = quantize_int8(make_tiny_elmo())
    with pytest.raises(ValueError, match="cannot save an int8-quantised model"):
        save_model_folder(q, tmp_path / "m")
    assert not (tmp_path / "m" / "model.safetensors").exists()
    with pytest.raises(ValueError, match="already quantised"):
        quantize_int8(q)


def test_only_float32_cpu_models_can_be_quantised():
    with pytest.raises(ValueError, match=r"on the CPU in float32; the model is on cpu in torch.bfloat16"):
        quantize_int8(make_tiny_elmo().to(torch.bfloat16))


def test_int8_models_refuse_gpu_and_half_precision_with_a_clear_error():
    q = quantize_int8(make_tiny_elmo())
    for kwargs in ({"autocast_dtype": torch.bfloat16}, {"device": "meta"}):
        with pytest.raises(ValueError, match="int8-quantised .* runs on the CPU in float32 only"):
            embed_sentences(q, TEXT, **kwargs)
