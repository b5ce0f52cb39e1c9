from __future__ import annotations

import pytest
import torch

from elmo_core import ScalarMix


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


def test_layer_norm_uses_one_mean_and_variance_over_real_positions_only():
    torch.manual_seed(0)
    layers = torch.randn(2, 2, 3, 4)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    layers_junk = layers.clone()
    layers_junk[:, ~mask] = 1000.0  # padded positions must not move the statistics
    mix = ScalarMix(2, do_layer_norm=True)
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
