"""The optimiser a `TrainConfig` names, and its learning-rate halving on a plateau.

Learning-rate halving on a plateau (`TrainConfig.halve_lr_below`, for a long pretraining run
that nobody watches): at every validation whose `valid_ppl` is not at least that fraction
below the best so far, the learning rate is halved (torch's `ReduceLROnPlateau` with
factor 0.5, patience 0 and a relative threshold, stepped with `valid_ppl`). It does by
rule what the shipped model's run did by hand ("halve when a validation gains under about
5%", core/default_model/README.md), and its state is in the checkpoint, so a resumed run
goes on with the same best and rate.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import TrainConfig


def make_optimizer(params: list[nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer `config.optimizer` names, over `params`, at `config.learning_rate`.

    "adam": torch's Adam with its fused kernel: one pass over every parameter instead of a
    loop of small operators per tensor, and the same update. "adagrad": bilm-tf's optimizer,
    its accumulators starting at 1.0 (`train_elmo.py`).
    """
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.learning_rate, fused=True)
    return torch.optim.Adagrad(params, lr=config.learning_rate, initial_accumulator_value=1.0)


def make_plateau_scheduler(
    optimizer: torch.optim.Optimizer, config: TrainConfig
) -> torch.optim.lr_scheduler.ReduceLROnPlateau | None:
    """torch's `ReduceLROnPlateau` for `config.halve_lr_below` (module docstring), or None:
    the rate halves at the first validation not `halve_lr_below` (relative) below the best."""
    if config.halve_lr_below is None:
        return None
    return torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", factor=0.5, patience=0, threshold=config.halve_lr_below, threshold_mode="rel"
    )
