"""A downstream component's own weighting of the biLM layers, as a thinc layer.

    ELMo_task = gamma * sum_k softmax(w)_k * h_k      (Peters et al. 2018, equation 1)

The thinc face of `elmo_core.ScalarMix`: w and gamma (params `W`, `gamma`) train with
thinc, the arithmetic is the core's. It starts at the average (w = 0, gamma = 1).
"""

from __future__ import annotations

from typing import Any, cast

from thinc.api import Model, torch2xp, xp2torch
from thinc.types import Floats1d, Floats2d, Floats3d

from elmo_core.face_api import (
    softmax_weights,
    softmax_weights_backward,
    weighted_layer_sum,
    weighted_layer_sum_backward,
)

__all__ = ["SCALAR_MIX_NAME", "ScalarMixLayer", "normalized_weights"]

SCALAR_MIX_NAME = "elmo_scalar_mix"
"""The layer's thinc name, by which `get_scalar_mix_weights` finds it in saved pipelines."""


def ScalarMixLayer(
    nL: int | None = None, nO: int | None = None, l2: float = 0.0
) -> Model[list[Floats3d], list[Floats2d]]:
    """Mix each Doc's biLM layers into one vector per token, with learned weights.

    Args:
        nL: Layers mixed (`n_layers + 1`). None: from the first batch.
        nO: Vector width (`2 * projection_dim`). None: from the first batch.
        l2: lambda of a penalty lambda * ||w||^2 on w (paper section 3.3). 0: none.

    Shape:
        input: [nL, tokens, nO] per Doc. output: [tokens, nO] per Doc.

    Raises:
        ValueError: if `l2` is not a finite number >= 0.
    """
    if isinstance(l2, bool) or not isinstance(l2, (int, float)) or not 0.0 <= l2 < float("inf"):
        raise ValueError(f"the scalar mix's l2 must be a finite number >= 0; got {l2!r}.")
    return Model(
        SCALAR_MIX_NAME,
        forward,
        init=init,
        dims={"nL": nL, "nO": nO},
        params={"W": None, "gamma": None},
        attrs={"l2": float(l2)},
    )


def forward(model: Model[list[Floats3d], list[Floats2d]], Xs: list[Floats3d], is_train: bool):
    if not Xs:
        return [], _no_docs_backprop
    xp = model.ops.xp
    gamma = model.get_param("gamma")[0]
    weights = normalized_weights(model)  # s = softmax(w), [layers]
    lengths = model.ops.asarray1i([X.shape[1] for X in Xs])
    X = xp.concatenate(Xs, axis=1)  # [layers, all tokens, dim]
    Ys = model.ops.unflatten(weighted_layer_sum(X, weights, gamma), lengths)

    def backprop(dYs: list[Floats2d]) -> list[Floats3d]:
        dY = model.ops.flatten(dYs)  # [all tokens, dim]
        layer_dots = xp.tensordot(X, dY, axes=([1, 2], [0, 1]))  # sum(dY * h_k), [layers]
        scales, d_weights, d_gamma = weighted_layer_sum_backward(weights, gamma, layer_dots)
        dW = softmax_weights_backward(weights, d_weights)
        if model.attrs["l2"]:
            dW = dW + 2.0 * model.attrs["l2"] * model.get_param("W")
        model.inc_grad("W", dW.astype("float32"))
        model.inc_grad("gamma", xp.reshape(d_gamma, (1,)).astype("float32"))
        dX = scales[:, None, None] * dY[None]  # type: ignore[call-overload]  # thinc's stub lacks [None]; [layers, all tokens, dim]
        return list(xp.split(dX, xp.cumsum(lengths)[:-1].tolist(), axis=1))

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
    """softmax(w) of an initialised `ScalarMixLayer`, float32 [nL] (the core's `softmax_weights`)."""
    W = xp2torch(model.get_param("W").copy())  # a copy: torch never shares thinc's param
    return cast(Floats1d, torch2xp(softmax_weights(W), ops=model.ops))  # torch2xp is typed for any rank
