"""Dropout on the mixed ELMo vectors at a rate of their own (Peters et al. 2018, section 3.3).

spaCy sets every `dropout_rate` attr to `[training] dropout` before each update, so this
layer keeps its rate in `elmo_dropout_rate`.
"""

from __future__ import annotations

from collections.abc import Callable

from thinc.api import Model
from thinc.types import Floats2d

__all__ = ["ELMO_DROPOUT_NAME", "ElmoFeatureDropout"]

ELMO_DROPOUT_NAME = "elmo_feature_dropout"


def ElmoFeatureDropout(rate: float) -> Model[list[Floats2d], list[Floats2d]]:
    """Inverted dropout at `rate` in training, the identity at prediction.

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
