"""Dropout on the mixed ELMo vectors at a rate of their own.

The paper adds "a moderate amount of dropout to ELMo" (Peters et al. 2018, section
3.3). thinc's `Dropout` reads its rate from the attr `dropout_rate`, which spaCy
overwrites with `[training] dropout` before every update (`set_dropout_rate`), so a rate
chosen for the ELMo features alone needs an attr of another name: this layer's
`elmo_dropout_rate`, which spaCy leaves alone.
"""

from __future__ import annotations

from collections.abc import Callable

from thinc.api import Model
from thinc.types import Floats2d

__all__ = ["ELMO_DROPOUT_NAME", "ElmoFeatureDropout"]

ELMO_DROPOUT_NAME = "elmo_feature_dropout"


def ElmoFeatureDropout(rate: float) -> Model[list[Floats2d], list[Floats2d]]:
    """Zero each value of the per-Doc [tokens, dim] arrays with probability `rate` in
    training (and scale the rest by 1 / (1 - rate)); the identity at prediction.

    Raises:
        ValueError: if `rate` is not a number in [0, 1).
    """
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate < 1.0:
        raise ValueError(f"the ELMo feature dropout must be a number in [0, 1); got {rate!r}.")
    return Model(ELMO_DROPOUT_NAME, forward, attrs={"elmo_dropout_rate": float(rate)})


def forward(
    model: Model[list[Floats2d], list[Floats2d]], Xs: list[Floats2d], is_train: bool
) -> tuple[list[Floats2d], Callable[[list[Floats2d]], list[Floats2d]]]:
    rate = model.attrs["elmo_dropout_rate"]
    if not is_train or rate == 0.0:
        return Xs, lambda dYs: dYs
    masks = [model.ops.get_dropout_mask(X.shape, rate) for X in Xs]  # 0 or 1 / (1 - rate)

    def backprop(dYs: list[Floats2d]) -> list[Floats2d]:
        return [dY * mask for dY, mask in zip(dYs, masks)]

    return [X * mask for X, mask in zip(Xs, masks)], backprop
