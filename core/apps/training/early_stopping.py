"""Early stopping's record of the best validation so far.

Early stopping (`TrainConfig.patience`, for adapting a trained biLM to a task's text): the
model is validated once before its first step, the model folder is written only when
`valid_ppl` is lower than at every earlier validation (so it always holds the best weights,
as spaCy's `model-best`), and the run stops after `patience` validations in a row without
a lower one. `checkpoint.pt` still holds the latest step, for an exact resume, and the
best perplexity so far with it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EarlyStopping:
    """Early stopping's record: the best validation perplexity so far (None: none yet), its
    step, and the validations since then that were no better."""

    best: float | None = None
    best_step: int | None = None
    since_best: int = 0

    def update(self, step: int, valid_ppl: float) -> bool:
        """Note a validation at `step`; True when it is the best so far (strictly lower)."""
        if self.best is None or valid_ppl < self.best:
            self.best, self.best_step, self.since_best = valid_ppl, step, 0
            return True
        self.since_best += 1
        return False

    def is_out_of_patience(self, patience: int | None) -> bool:
        return patience is not None and self.since_best >= patience
