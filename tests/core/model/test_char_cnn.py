from __future__ import annotations

import torch

from elmo_core.model.char_cnn import Highway


def test_highway_is_the_gated_formula_and_starts_with_a_carry_bias_of_minus_2():
    torch.manual_seed(0)
    highway = Highway(4, n_highway=2)
    assert len(highway.layers) == 2
    for layer in highway.layers:
        assert torch.equal(layer.bias[4:], torch.full((4,), -2.0))
    x = torch.randn(3, 4)
    expected = x
    for layer in highway.layers:
        candidate = torch.relu(expected @ layer.weight[:4].T + layer.bias[:4])
        gate = torch.sigmoid(expected @ layer.weight[4:].T + layer.bias[4:])
        expected = gate * candidate + (1 - gate) * expected
    torch.testing.assert_close(highway(x), expected, atol=1e-6, rtol=1e-6)


def test_no_highway_layers_is_the_identity():
    x = torch.randn(2, 5, 4)
    assert torch.equal(Highway(4, n_highway=0)(x), x)


def test_init_carry_bias_sets_only_the_gate_half():
    highway = Highway(3, n_highway=1)
    layer = highway.layers[0]
    with torch.no_grad():
        layer.bias.fill_(7.0)
    highway.init_carry_bias(layer)
    assert torch.equal(layer.bias, torch.tensor([7.0, 7.0, 7.0, -2.0, -2.0, -2.0]))
