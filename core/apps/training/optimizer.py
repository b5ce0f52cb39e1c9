"""The optimiser a `TrainConfig` names, and its learning-rate halving on a plateau.

`TrainConfig.halve_lr_below` halves the rate at every validation whose `valid_ppl` is not
that fraction below the best. It does by rule what the shipped model's run did by hand
(core/default_model/README.md). Its state is in the checkpoint.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import TrainConfig


def make_optimizer(params: list[nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer `config.optimizer` names, over `params`, at `config.learning_rate`.

    "adam" is torch's fused Adam. "adagrad" is bilm-tf's, with accumulators starting at 1.0.
    """
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.learning_rate, fused=True)
    return torch.optim.Adagrad(params, lr=config.learning_rate, initial_accumulator_value=1.0)


def make_plateau_scheduler(
    optimizer: torch.optim.Optimizer, config: TrainConfig
) -> torch.optim.lr_scheduler.ReduceLROnPlateau | None:
    """torch's `ReduceLROnPlateau` for `config.halve_lr_below`, or None when it is None."""
    if config.halve_lr_below is None:
        return None
    return torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, mode="min", factor=0.5, patience=0, threshold=config.halve_lr_below, threshold_mode="rel"
    )
