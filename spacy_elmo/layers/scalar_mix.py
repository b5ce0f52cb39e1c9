"""A downstream component's own weighting of the biLM layers, as a thinc layer.

    ELMo_task = gamma * sum_k softmax(w)_k * h_k      (Peters et al. 2018, equation 1)

The thinc twin of `elmo_core.ScalarMix`: same formula, same start (w = 0, gamma = 1,
i.e. the average of the layers). It learns inside the component that owns it (an NER,
a tagger); the layers it mixes come from the frozen biLM and take no gradient.
"""

from __future__ import annotations

from typing import Any

from thinc.api import Model
from thinc.types import Floats1d, Floats2d, Floats3d

__all__ = ["ScalarMix", "SCALAR_MIX_NAME"]

SCALAR_MIX_NAME = "elmo_scalar_mix"


def ScalarMix(nL: int | None = None, nO: int | None = None) -> Model[list[Floats3d], list[Floats2d]]:
    """Mix each Doc's biLM layers into one vector per token, with learned weights.

    Args:
        nL: Number of layers mixed (`n_layers + 1`); inferred from the first batch.
        nO: Vector width (`2 * projection_dim`); inferred from the first batch.

    Params:
        W: the scalar weights w, [nL], starting at 0.
        gamma: the scale, [1], starting at 1.

    Shape:
        input: one [nL, tokens, nO] array per Doc; output: one [tokens, nO] array per Doc.
    """
    return Model(
        SCALAR_MIX_NAME,
        forward,
        init=init,
        dims={"nL": nL, "nO": nO},
        params={"W": None, "gamma": None},
    )


def forward(model: Model[list[Floats3d], list[Floats2d]], Xs: list[Floats3d], is_train: bool):
    W = model.get_param("W")
    gamma = model.get_param("gamma")
    xp = model.ops.xp
    if not Xs:
        return [], _no_docs_backprop
    weights = model.ops.softmax(W)  # softmax(w), [layers]
    lengths = model.ops.asarray1i([X.shape[1] for X in Xs])
    X = xp.concatenate(Xs, axis=1)  # [layers, all tokens, dim]
    mixed = xp.tensordot(weights, X, axes=1)  # [all tokens, dim]
    Ys = model.ops.unflatten(gamma[0] * mixed, lengths)

    def backprop(dYs: list[Floats2d]) -> list[Floats3d]:
        dY = model.ops.flatten(dYs)  # [all tokens, dim]
        d_gamma = (dY * mixed).sum()
        d_weights = gamma[0] * xp.tensordot(X, dY, axes=([1, 2], [0, 1]))  # [layers]
        dW = weights * (d_weights - (weights * d_weights).sum())  # through the softmax
        model.inc_grad("W", dW.astype("float32"))
        model.inc_grad("gamma", model.ops.asarray1f([float(d_gamma)]))
        dX = (gamma[0] * weights)[:, None, None] * dY[None]  # [layers, all tokens, dim]
        splits = xp.cumsum(lengths)[:-1].tolist()
        return list(xp.split(dX, splits, axis=1))

    return Ys, backprop


def _no_docs_backprop(dYs: list[Floats2d]) -> list[Floats3d]:
    return []


def init(model: Model[list[Floats3d], list[Floats2d]], X: list[Floats3d] | None = None, Y: Any = None) -> None:
    if X:
        if not model.has_dim("nL"):
            model.set_dim("nL", X[0].shape[0])
        if not model.has_dim("nO"):
            model.set_dim("nO", X[0].shape[2])
    model.set_param("W", model.ops.alloc1f(model.get_dim("nL")))
    model.set_param("gamma", model.ops.asarray1f([1.0]))


def normalized_weights(model: Model) -> Floats1d:
    """softmax(w) of an initialised `ScalarMix` layer."""
    return model.ops.softmax(model.get_param("W"))
