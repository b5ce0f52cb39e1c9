"""The thinc ScalarMixLayer: the paper's formula, its gradients, shapes and start values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from thinc.api import Adam

from elmo_core import ScalarMix as CoreScalarMix
from spacy_elmo.layers import ScalarMixLayer
from spacy_elmo.layers.scalar_mix import normalized_weights


def layers_for(lengths, n_outputs=3, dim=5, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n_outputs, n, dim)).astype("float32") for n in lengths]


def test_shapes_and_start_at_the_plain_average():
    X = layers_for([4, 0, 2])
    mix = ScalarMixLayer()
    mix.initialize(X=X)
    assert mix.get_dim("nL") == 3 and mix.get_dim("nO") == 5
    Y = mix.predict(X)
    assert [y.shape for y in Y] == [(4, 5), (0, 5), (2, 5)]
    for x, y in zip(X, Y):
        np.testing.assert_allclose(y, x.mean(axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(normalized_weights(mix), [1 / 3] * 3, rtol=1e-6)


def test_matches_the_core_scalar_mix_and_its_gradients():
    X = layers_for([3, 5])
    mix = ScalarMixLayer(nL=3, nO=5)
    mix.initialize()
    w = np.array([0.3, -1.0, 0.5], dtype="float32")
    mix.set_param("W", w)
    mix.set_param("gamma", np.array([1.7], dtype="float32"))
    dY = layers_for([3, 5], n_outputs=1, seed=1)
    dY = [d[0] for d in dY]

    Y, backprop = mix.begin_update(X)
    dX = backprop(dY)

    core = CoreScalarMix(3, initial_scalar_parameters=w.tolist(), gamma=1.7)
    for x, y, dy, dx in zip(X, Y, dY, dX):
        xt = torch.tensor(x[:, None], requires_grad=True)  # [layers, batch 1, tokens, dim]
        yt = core(xt)[0]
        np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-6)
        (yt * torch.tensor(dy)).sum().backward()
        np.testing.assert_allclose(dx, xt.grad[:, 0].numpy(), rtol=1e-5, atol=1e-6)
    # The parameter gradients sum over the batch; compare with the core on the whole batch.
    core.zero_grad()
    total = sum((core(torch.tensor(x[:, None]))[0] * torch.tensor(dy)).sum() for x, dy in zip(X, dY))
    total.backward()
    np.testing.assert_allclose(mix.get_grad("W"), core.scalar_weights.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mix.get_grad("gamma"), core.gamma.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_a_few_steps_lower_a_loss():
    X = layers_for([6, 4])
    target = [2.0 * x[2] for x in X]  # the best mix puts everything on layer 2, gamma 2
    mix = ScalarMixLayer()
    mix.initialize(X=X)
    optimizer = Adam(0.1)

    def loss() -> float:
        return float(sum(((y - t) ** 2).sum() for y, t in zip(mix.predict(X), target)))

    start = loss()
    for _ in range(20):
        Y, backprop = mix.begin_update(X)
        backprop([y - t for y, t in zip(Y, target)])
        mix.finish_update(optimizer)
    assert loss() < 0.5 * start
    assert int(np.argmax(normalized_weights(mix))) == 2


def test_empty_batch():
    mix = ScalarMixLayer(nL=3, nO=5)
    mix.initialize()
    Y, backprop = mix.begin_update([])
    assert Y == [] and backprop([]) == []


def test_uninitialised_mix_says_so():
    with pytest.raises(KeyError, match="has not been allocated"):
        ScalarMixLayer(nL=3, nO=5).predict(layers_for([2]))


def test_predict_builds_no_autograd_graph_and_training_gradients_accumulate():
    X = layers_for([3, 2])
    mix = ScalarMixLayer()
    mix.initialize(X=X)
    Y = mix.predict(X)
    assert all(isinstance(y, np.ndarray) and y.dtype == np.float32 for y in Y)
    dY = [np.ones_like(y) for y in Y]
    for _ in range(2):  # thinc adds each call's gradient to what is there
        _, backprop = mix.begin_update(X)
        dX = backprop(dY)
    # d/d gamma of sum(Y) = sum(mix without gamma) = sum(mean of layers), twice.
    expected = 2 * sum(float(x.mean(axis=0).sum()) for x in X)
    np.testing.assert_allclose(mix.get_grad("gamma"), [expected], rtol=1e-5)
    assert [dx.shape for dx in dX] == [x.shape for x in X] and all(dx.dtype == np.float32 for dx in dX)
