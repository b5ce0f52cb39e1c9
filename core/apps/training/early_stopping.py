"""Early stopping (`TrainConfig.patience`), for adapting a trained biLM to a task's text.

The model is validated before its first step. The model folder is written only at a new
best `valid_ppl`, so it holds the best weights, as spaCy's `model-best`. The run stops
after `patience` validations without one. `checkpoint.pt` holds the latest step.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EarlyStopping:
    """The best validation perplexity so far, its step, and the validations since then."""

    best: float | None = None
    best_step: int | None = None
    since_best: int = 0

    def update(self, step: int, valid_ppl: float) -> bool:
        """Note a validation at `step`. True when it is strictly the best so far."""
        if self.best is None or valid_ppl < self.best:
            self.best, self.best_step, self.since_best = valid_ppl, step, 0
            return True
        self.since_best += 1
        return False

    def is_out_of_patience(self, patience: int | None) -> bool:
        return patience is not None and self.since_best >= patience
