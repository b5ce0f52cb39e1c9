from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from elmo_core.model.char_cnn import Highway
from elmo_core.model.precision import cpu_bf16_support

native_bf16 = pytest.mark.skipif(cpu_bf16_support() is None, reason="this CPU has no native bf16")


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


@native_bf16
def test_bf16_inference_cuts_each_block_to_its_longest_word_and_keeps_the_max_over_all_50_slots(monkeypatch):
    """Blocks of words sorted by length see `longest + widest` slots. With integer weights every
    response is exact in bf16, so the pooled features must equal float32's over all 50 slots exactly."""
    from elmo_core.apps.training.data import make_batch
    from elmo_core.apps.training.vocab import Vocabulary
    from elmo_core.model import char_cnn as char_cnn_module
    from elmo_core.model.char_cnn import CharCNN
    from tests.conftest import make_tiny_options

    options = make_tiny_options()
    filters = ((1, 4), (2, 8), (3, 4), (7, 8))
    options = dataclasses.replace(options, char_cnn=dataclasses.replace(options.char_cnn, filters=filters))
    cnn = CharCNN(options)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in [cnn.char_embedding, *cnn.convolutions.parameters()]:
            parameter.copy_(torch.randint(-1, 2, parameter.shape, generator=generator))
    letters = "abcdefghijklmnopqrstuvwxyz"
    lengths = [1, 48, 3, 20, 2, 5, *torch.randint(1, 12, (40,), generator=generator).tolist(), 46, 44]
    words = ["".join(letters[(i + k) % 26] for k in range(n)) for i, n in enumerate(lengths)]
    char_ids = make_batch([words], Vocabulary(["<S>", "</S>", "<UNK>"])).char_ids[0]  # [words, 50]
    x = F.embedding(char_ids, cnn.embedding_table()).transpose(1, 2)  # [words, E, 50]
    expected = torch.cat([torch.relu(conv(x).amax(dim=2)) for conv in cnn.convolutions], dim=1)
    slots = []
    convolve = cnn._convolve
    monkeypatch.setattr(
        cnn, "_convolve", lambda table, ids, bf16: slots.append(ids.shape[1]) or convolve(table, ids, bf16)
    )
    monkeypatch.setattr(cnn, "_project", lambda features, bf16: features)  # the pooled features themselves
    monkeypatch.setattr(char_cnn_module, "BF16_BLOCK_TOKENS", 8)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        pooled = cnn(char_ids)
    assert torch.equal(pooled, expected)
    assert min(slots) < 20 and max(slots) == 50  # short blocks were cut, the longest words kept every slot


def test_the_compiled_highway_step_gives_the_eager_values():
    from elmo_core.model.char_cnn import bf16_highway_step, highway_step

    torch.manual_seed(0)
    y, bias, x = (torch.randn(5, 8) * 3).to(torch.bfloat16), torch.randn(8), torch.randn(5, 4)
    assert torch.equal(bf16_highway_step(y, bias, x), highway_step(y, bias, x))
    candidate, gate = (y.float() + bias).chunk(2, dim=-1)
    expected = torch.sigmoid(gate) * torch.relu(candidate) + (1 - torch.sigmoid(gate)) * x
    torch.testing.assert_close(highway_step(y, bias, x), expected, rtol=0, atol=1e-6)
