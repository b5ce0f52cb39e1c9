from __future__ import annotations

import numpy as np
import pytest
import torch

from elmo_core import ScalarMix
from elmo_core.model.elmo import (
    scalar_mix,
    softmax_weights,
    softmax_weights_backward,
    weighted_layer_sum,
    weighted_layer_sum_backward,
)


def test_mix_is_gamma_times_softmax_weighted_sum():
    torch.manual_seed(0)
    layers = torch.randn(3, 2, 4, 5)
    mix = ScalarMix(3, initial_scalar_parameters=[0.1, -0.3, 0.7], gamma=1.7)
    s = torch.softmax(torch.tensor([0.1, -0.3, 0.7]), 0)
    expected = 1.7 * (s[0] * layers[0] + s[1] * layers[1] + s[2] * layers[2])
    torch.testing.assert_close(mix(layers), expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(mix.normalized_weights, s)


def test_default_is_equal_weights_and_unit_gamma():
    mix = ScalarMix(3)
    torch.testing.assert_close(mix.normalized_weights, torch.full((3,), 1 / 3))
    assert mix.gamma.item() == 1.0
    assert mix.scalar_weights.requires_grad and mix.gamma.requires_grad


def test_batch_scope_layer_norm_uses_one_mean_and_variance_over_real_positions_only():
    torch.manual_seed(0)
    layers = torch.randn(2, 2, 3, 4)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    layers_junk = layers.clone()
    layers_junk[:, ~mask] = 1000.0  # padded positions must not move the statistics
    mix = ScalarMix(2, do_layer_norm=True, layer_norm_scope="batch")
    out, out_junk = mix(layers, mask), mix(layers_junk, mask)
    torch.testing.assert_close(out[mask], out_junk[mask], atol=1e-5, rtol=1e-5)
    real = layers[0][mask]  # [3 positions, 4]
    normed = (real - real.mean()) / torch.sqrt(real.var(unbiased=False) + 1e-12)
    real1 = layers[1][mask]
    normed1 = (real1 - real1.mean()) / torch.sqrt(real1.var(unbiased=False) + 1e-12)
    torch.testing.assert_close(out[mask], 0.5 * normed + 0.5 * normed1, atol=1e-5, rtol=1e-5)


def test_fixed_mix_is_not_trainable():
    mix = ScalarMix(3, initial_scalar_parameters=[0, 0, 1], trainable=False)
    assert not any(p.requires_grad for p in mix.parameters())


def test_wrong_number_of_layers_is_refused():
    with pytest.raises(ValueError, match="built for 3 layers but got 2"):
        ScalarMix(3)(torch.zeros(2, 1, 1, 4))
    with pytest.raises(ValueError, match="one value per layer \\(3\\); got 2"):
        ScalarMix(3, initial_scalar_parameters=[0, 1])


def test_layer_norm_by_default_uses_each_sentences_own_statistics():
    torch.manual_seed(0)
    layers = torch.randn(2, 2, 3, 4)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    out = ScalarMix(2, do_layer_norm=True)(layers, mask)
    for row in range(2):
        expected = 0
        for k in range(2):
            real = layers[k, row][mask[row]]  # [tokens of this sentence, 4]
            expected = expected + 0.5 * (real - real.mean()) / torch.sqrt(real.var(unbiased=False) + 1e-12)
        torch.testing.assert_close(out[row][mask[row]], expected, atol=1e-5, rtol=1e-5)


def test_layer_norm_mix_of_a_sentence_does_not_depend_on_its_batch_mate():
    torch.manual_seed(0)
    alone = torch.randn(3, 1, 4, 8)
    mate = 5.0 * torch.randn(3, 1, 4, 8) + 3.0
    together = torch.cat([alone, mate], dim=1)  # [3, 2, 4, 8]
    mask_alone, mask_together = torch.ones(1, 4, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool)
    mix = ScalarMix(3, do_layer_norm=True)
    torch.testing.assert_close(mix(together, mask_together)[0], mix(alone, mask_alone)[0], atol=1e-6, rtol=1e-6)
    batch_mix = ScalarMix(3, do_layer_norm=True, layer_norm_scope="batch")  # the original's statistics
    assert (batch_mix(together, mask_together)[0] - batch_mix(alone, mask_alone)[0]).abs().max() > 0.1


def test_unknown_layer_norm_scope_is_refused():
    with pytest.raises(ValueError, match="layer_norm_scope must be one of"):
        ScalarMix(3, do_layer_norm=True, layer_norm_scope="corpus")


def test_mix_of_a_sequence_of_layers_passes_gradients_to_each_layer():
    layers = [torch.randn(2, 3, 4, requires_grad=True) for _ in range(3)]
    ScalarMix(3)(layers).sum().backward()
    for layer in layers:
        torch.testing.assert_close(layer.grad, torch.full_like(layer, 1 / 3))


# ---------------------------------------------------------------- the formula as functions
def test_scalar_mix_function_is_the_module_forward_and_the_paper_formula():
    torch.manual_seed(0)
    layers = torch.randn(3, 2, 4, 5).unbind(0)
    w, gamma = torch.tensor([0.1, -0.3, 0.7]), torch.tensor([1.7])
    s = torch.softmax(w, 0)
    expected = 1.7 * (s[0] * layers[0] + s[1] * layers[1] + s[2] * layers[2])
    torch.testing.assert_close(scalar_mix(layers, w, gamma), expected, atol=1e-6, rtol=1e-6)
    module = ScalarMix(3, initial_scalar_parameters=w.tolist(), gamma=1.7)
    torch.testing.assert_close(module(layers), scalar_mix(layers, w, gamma), atol=0, rtol=0)
    torch.testing.assert_close(softmax_weights(w), s, atol=0, rtol=0)


def test_weighted_layer_sum_gives_numpy_and_torch_the_same_values():
    rng = np.random.default_rng(0)
    layers = rng.normal(size=(3, 4, 5)).astype("float32")
    weights, gamma = np.array([0.2, 0.3, 0.5], dtype="float32"), np.float32(1.3)
    out = weighted_layer_sum(layers, weights, gamma)
    assert out.dtype == np.float32 and out.shape == (4, 5)
    as_torch = weighted_layer_sum(torch.from_numpy(layers), torch.from_numpy(weights), torch.tensor(1.3))
    np.testing.assert_allclose(out, as_torch.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out, 1.3 * np.tensordot(weights, layers, axes=1), rtol=1e-5, atol=1e-6)


def test_the_hand_written_gradients_match_autograd():
    torch.manual_seed(0)
    layers = torch.randn(3, 6, 4, requires_grad=True)
    w = torch.tensor([0.4, -1.0, 0.2], requires_grad=True)
    gamma = torch.tensor([1.7], requires_grad=True)
    d_mixed = torch.randn(6, 4)
    out = scalar_mix(layers.unbind(0), w, gamma)
    d_layers, d_w, d_gamma = torch.autograd.grad(out, (layers, w, gamma), d_mixed)
    with torch.no_grad():
        s = softmax_weights(w)
        dots = torch.stack([(d_mixed * h).sum() for h in layers])
        scales, d_s, my_d_gamma = weighted_layer_sum_backward(s, gamma[0], dots)
        torch.testing.assert_close(scales[:, None, None] * d_mixed, d_layers, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(softmax_weights_backward(s, d_s), d_w, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(my_d_gamma.reshape(1), d_gamma, atol=1e-6, rtol=1e-5)


def test_reset_parameters_restores_the_starting_values():
    mix = ScalarMix(3, initial_scalar_parameters=[0.0, 0.0, 1.0], gamma=2.0)
    with torch.no_grad():
        mix.scalar_weights.fill_(5.0)
        mix.gamma.fill_(-1.0)
    mix.reset_parameters()
    assert torch.equal(mix.scalar_weights, torch.tensor([0.0, 0.0, 1.0]))
    assert torch.equal(mix.gamma, torch.tensor([2.0]))
