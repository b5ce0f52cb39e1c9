from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch

from elmo_core import Elmo, words_to_char_ids
from elmo_core.model.elmo import mix_representations, run_bilm
from tests.conftest import make_tiny_elmo


def test_output_shapes_and_boundaries(tiny_options):
    elmo = Elmo(tiny_options, num_output_representations=2, dropout=0.0).eval()
    sentences = [["The", "sentence", "."], ["ELMo", "helps", "disambiguate", "ELMo", "from", "Elmo", "."]]
    out = elmo(*words_to_char_ids(sentences))
    assert len(out.representations) == 2
    assert out.representations[0].shape == (2, 7, 16) and out.mask.shape == (2, 7)
    assert out.activations.shape == (3, 2, 7, 16)
    kept = Elmo(tiny_options, keep_sentence_boundaries=True).eval()(*words_to_char_ids(sentences))
    assert kept.representations[0].shape == (2, 9, 16) and kept.mask.shape == (2, 9)
    assert kept.mask.sum(1).tolist() == [5, 9]


def test_representation_is_zero_at_padding_and_the_mix_of_layers():
    elmo = make_tiny_elmo(dropout=0.0)
    out = elmo(*words_to_char_ids([["a", "b", "c"], ["d"]]))
    assert out.representations[0][1, 1:].abs().max() == 0
    torch.testing.assert_close(out.representations[0], out.activations.mean(0), atol=1e-6, rtol=1e-6)


# Frozen means frozen, and the mix is what trains.
def test_frozen_biLM_trains_only_the_scalar_mixes():
    elmo = make_tiny_elmo(num_output_representations=2, dropout=0.0)
    trainable = {n for n, p in elmo.named_parameters() if p.requires_grad}
    assert trainable == {f"scalar_mixes.{k}.{p}" for k in (0, 1) for p in ("scalar_weights", "gamma")}
    before = {n: p.detach().clone() for n, p in elmo.bilm.named_parameters()}
    mix_before = elmo.scalar_mixes[0].scalar_weights.detach().clone()
    optimizer = torch.optim.SGD([p for p in elmo.parameters() if p.requires_grad], lr=0.1)
    out = elmo(*words_to_char_ids([["a", "b", "c"]]))
    assert out.activations.grad_fn is None and not out.activations.requires_grad
    (out.representations[0] * torch.arange(16.0)).sum().backward()
    optimizer.step()
    for name, p in elmo.bilm.named_parameters():
        assert torch.equal(p, before[name]), name
    assert not torch.equal(elmo.scalar_mixes[0].scalar_weights, mix_before)


def test_fixed_scalar_mix_leaves_nothing_trainable():
    elmo = make_tiny_elmo(scalar_mix_parameters=[0.0, 0.0, 1.0])
    assert [n for n, p in elmo.named_parameters() if p.requires_grad] == []


def test_requires_grad_trains_the_biLM_too():
    elmo = make_tiny_elmo(requires_grad=True, dropout=0.0)
    out = elmo(*words_to_char_ids([["a", "b"]]))
    out.representations[0].sum().backward()
    assert elmo.bilm.forward_layers.layers[0].input_linear.weight.grad is not None


# Fine-tuning: trainability follows the parameters' requires_grad at call time (R44).
SENTENCES = [["The", "river", "bank", "."], ["a", "bank", "loan"]]


def _fine_tune(elmo, steps: int = 2, lr: float = 0.1) -> list[float]:
    """`steps` SGD steps over all of `elmo.parameters()` on a fixed loss of the mixed output."""
    optimizer = torch.optim.SGD(elmo.parameters(), lr=lr)
    char_ids, mask = words_to_char_ids(SENTENCES)
    elmo.train()
    losses = []
    for _ in range(steps):
        mixed = elmo(char_ids, mask).representations[0]
        loss = (mixed * torch.linspace(-1.0, 1.0, mixed.shape[-1])).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def test_biLM_unfrozen_after_construction_gets_gradients_and_changes():
    from elmo_core import load_elmo

    elmo = load_elmo(dropout=0.0)  # the default model, frozen as loaded
    assert not elmo.requires_grad
    elmo.bilm.requires_grad_(True)
    assert elmo.requires_grad
    before = {n: p.detach().clone() for n, p in elmo.bilm.named_parameters()}
    _fine_tune(elmo, lr=0.01)
    for name, p in elmo.bilm.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        assert not torch.equal(p, before[name]), name


SUBSETS = {
    "char_cnn": lambda bilm: bilm.char_cnn,
    "one_lstm_layer": lambda bilm: bilm.forward_layers.layers[1],
    "backward_stack": lambda bilm: bilm.backward_layers,
}


@pytest.mark.parametrize("subset", sorted(SUBSETS))
def test_unfrozen_subset_of_the_biLM_alone_gets_gradients_and_changes(subset):
    elmo = make_tiny_elmo(dropout=0.0)
    part = SUBSETS[subset](elmo.bilm)
    part.requires_grad_(True)
    unfrozen = {id(p) for p in part.parameters()}
    before = {n: p.detach().clone() for n, p in elmo.bilm.named_parameters()}
    _fine_tune(elmo)
    for name, p in elmo.bilm.named_parameters():
        if id(p) in unfrozen:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
            assert not torch.equal(p, before[name]), name
        else:
            assert p.grad is None, name
            assert torch.equal(p, before[name]), name


def test_char_cnn_alone_unfrozen_keeps_the_lstms_on_a_differentiable_path(monkeypatch):
    """With only the char CNN trainable, its gradient flows back through the frozen LSTMs:
    the recurrence must be chosen as needing gradients (on a GPU, never a CUDA graph replay)."""
    import elmo_core.model.recurrence as recurrence_module

    seen = []
    real = recurrence_module.resolve_recurrence

    def recording(mode, stacks, device, needs_grad, stateful):
        seen.append(needs_grad)
        return real(mode, stacks, device, needs_grad, stateful)

    monkeypatch.setattr(recurrence_module, "resolve_recurrence", recording)
    elmo = make_tiny_elmo(dropout=0.0)
    elmo.bilm.char_cnn.requires_grad_(True)
    _fine_tune(elmo, steps=1)
    with torch.no_grad():
        elmo.eval()(*words_to_char_ids(SENTENCES))
    assert seen == [True, False]


@pytest.mark.gpu
def test_char_cnn_alone_fine_tunes_on_the_gpu_as_on_the_cpu():
    from elmo_core import BiLMOptions
    from elmo_core.model.options import CharCNNOptions, LSTMOptions
    from elmo_core.runtime.parts import serving_parts

    options = BiLMOptions(  # clipped cells: "auto" would replay CUDA graphs without gradients
        char_cnn=CharCNNOptions(embedding_dim=4, filters=((1, 4), (2, 8)), n_highway=1),
        lstm=LSTMOptions(dim=16, projection_dim=8, n_layers=2, cell_clip=3.0, proj_clip=3.0),
    )
    grads = []
    for device in ("cpu", "cuda"):
        torch.manual_seed(0)
        elmo = Elmo(options, dropout=0.0, **serving_parts()).to(device)
        elmo.bilm.char_cnn.requires_grad_(True)
        char_ids, mask = words_to_char_ids(SENTENCES)
        mixed = elmo.train()(char_ids, mask).representations[0]
        (mixed * torch.linspace(-1.0, 1.0, mixed.shape[-1], device=device)).sum().backward()
        grads.append(elmo.bilm.char_cnn.char_embedding.grad.cpu())
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[1], grads[0], atol=1e-4, rtol=1e-4)


def test_unfreezing_later_trains_as_requires_grad_at_construction():
    built = make_tiny_elmo(dropout=0.0, requires_grad=True)
    later = make_tiny_elmo(dropout=0.0)
    later.requires_grad = True  # the property sets every biLM parameter
    assert all(p.requires_grad for p in later.bilm.parameters())
    assert _fine_tune(later) == _fine_tune(built)
    for (name, a), b in zip(later.named_parameters(), built.parameters()):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)
    later.requires_grad = False  # frozen again: no graph through the biLM
    assert later(*words_to_char_ids(SENTENCES)).activations.grad_fn is None


def test_dropout_only_in_training_mode():
    elmo = make_tiny_elmo(dropout=0.5)
    inputs = words_to_char_ids([["a", "b", "c"]])
    a, b = elmo(*inputs).representations[0], elmo(*inputs).representations[0]
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    elmo.train()
    assert (elmo(*inputs).representations[0] == 0).sum() > (a == 0).sum()


# Plain pickle, deepcopy and torch.save work.
def test_pickle_deepcopy_and_torch_save_round_trip():
    elmo = make_tiny_elmo()
    inputs = words_to_char_ids([["a", "b", "c"]])
    expected = elmo(*inputs).representations[0]
    buffer = io.BytesIO()
    torch.save(elmo, buffer)
    buffer.seek(0)
    for clone in (pickle.loads(pickle.dumps(elmo)), copy.deepcopy(elmo), torch.load(buffer, weights_only=False)):
        torch.testing.assert_close(clone(*inputs).representations[0], expected, atol=1e-6, rtol=0)


def test_bad_constructor_arguments(tiny_options):
    with pytest.raises(ValueError, match="dropout must be in \\[0, 1\\); got 1.5"):
        Elmo(tiny_options, dropout=1.5)


def test_mix_representations_reads_the_given_layers_and_zeroes_padding():
    elmo = make_tiny_elmo(num_output_representations=2, dropout=0.0)
    out = run_bilm(elmo.bilm, *words_to_char_ids([["a", "b", "c"], ["d"]]), frozen=True)
    assert not out.activations.requires_grad  # frozen: no graph through the biLM
    layers = [layer.clone().requires_grad_(True) for layer in out.activations.unbind(0)]
    mixed = mix_representations(elmo.scalar_mixes, layers, out.mask, dropout=0.0, training=False)
    assert len(mixed) == 2 and mixed[0][1, 1:].abs().max() == 0
    grads = torch.autograd.grad(mixed[0].sum(), layers)
    # d(sum of the mix)/d h_k = gamma * s_k = 1/3 at real positions, 0 at padding.
    for grad in grads:
        torch.testing.assert_close(grad[out.mask], torch.full_like(grad[out.mask], 1 / 3), atol=1e-6, rtol=1e-6)
        assert grad[~out.mask].abs().max() == 0


# ---------------------------------------------------------------- ids in other integer types
@pytest.mark.parametrize("dtype", [torch.int32, torch.int16], ids=str)
def test_int32_and_int16_char_ids_give_the_int64_vectors_exactly(dtype):
    elmo = make_tiny_elmo(dropout=0.0)
    char_ids, mask = words_to_char_ids([["The", "river", "bank", "."], ["naïve", "😀"]])
    want = elmo(char_ids, mask)
    got = elmo(char_ids.to(dtype), mask.to(dtype))
    assert torch.equal(got.activations, want.activations) and torch.equal(got.mask, want.mask)
    assert torch.equal(elmo.bilm(char_ids.to(dtype), mask).activations, elmo.bilm(char_ids, mask).activations)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.float32, torch.bool], ids=str)
def test_char_ids_in_a_dtype_that_cannot_hold_them_are_refused_naming_the_dtype(dtype):
    elmo = make_tiny_elmo(dropout=0.0)
    char_ids, mask = words_to_char_ids([["The", "river"]])
    with pytest.raises(TypeError, match=rf"char_ids .*{dtype}"):
        elmo(char_ids.to(dtype), mask)


# ---------------------------------------------------------------- torch.compile
@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad], ids=["inference_mode", "no_grad"])
def test_torch_compile_of_elmo_with_the_token_cache_gives_the_uncompiled_activations(mode):
    """Dynamo (backend "eager", no C++ compiler) over the whole model, the token cache on: the
    cache's lookup stays out of the graph, and calls after the first reuse the graph and the cache."""
    elmo = make_tiny_elmo(dropout=0.0)
    assert elmo.bilm.token_cache is not None
    sentences = [["The", "river", "bank", "."], ["a", "bank"], ["naïve", "😀", "x" * 60]]
    ids, mask = words_to_char_ids(sentences)
    with torch.no_grad():
        expected = elmo(ids, mask)
    torch._dynamo.reset()
    compiled = torch.compile(elmo, backend="eager")
    try:
        for call in range(2):
            with mode():
                got = compiled(ids, mask)
            torch.testing.assert_close(got.activations, expected.activations, atol=1e-6, rtol=0)
            for a, b in zip(got.representations, expected.representations, strict=True):
                torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
            assert torch.equal(got.mask, expected.mask), f"call {call}"
        assert elmo.bilm.token_cache.hits > 0  # the later call was answered by the cache
    finally:
        torch._dynamo.reset()
