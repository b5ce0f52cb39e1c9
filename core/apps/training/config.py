"""`TrainConfig`: the optimisation and bookkeeping settings of a `Trainer`."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["TrainConfig"]

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
"""`TrainConfig.precision` values."""


def option_help(text: str, **cli: Any) -> dict[str, Any]:
    """A settings field's metadata: the help of its `elmo train` option, and `cli` extras.

    `cli` may hold `type` (where the field's type does not suit a command line) and
    `metavar` (how help names the value).
    """
    return {"help": text, "cli": cli}


@dataclass(kw_only=True)
class TrainConfig:
    """Optimisation and bookkeeping settings. The model's are in `BiLMOptions`.

    Attributes:
        optimizer: "adam" (lr 1e-3) or "adagrad" (bilm-tf's: lr 0.2).
        lr: Constant learning rate. None: the optimizer's default. A resumed run may get a new one.
        clip_norm: Clip the gradient norm of the mean loss to this. 10.0 is bilm-tf's
            `all_clip_norm_val` (see `trainer`). 0: no clipping.
        precision: "auto" (bf16 on CUDA, fp32 on CPU), "fp32", "bf16" or "fp16" (with a
            gradient scaler). On a CPU, any that would run slower than fp32 is refused.
        max_steps: Stop at this total step count, counted across resumes.
        max_hours: Stop after this many hours of this invocation.
        max_epochs: Stop after this many passes over the training files, counted across
            resumes (bilm-tf's `n_epochs`). Under DDP, when the first rank's share is done.
        patience: Early stopping (`early_stopping`): stop after this many validations
            without a new best. 1 stops at the first one no better. None: off.
        halve_lr_below: Halve the learning rate at each validation not at least this
            fraction below the best (`optimizer`), e.g. 0.05. None: a constant rate.
        checkpoint_every: Checkpoint and model folder every N steps. 0: only at the end.
        validate_every: Validation every N steps. 0: only at the end.
        log_every: A `train_log.jsonl` row every N steps.
        valid_batch_tokens: Batch budget for validation (memory only).
        seed: Seeds Python, NumPy and torch. Each rank adds its rank, so dropout differs.
        progress: Show a tqdm bar on rank 0.
    """

    # Each field's `metadata["help"]` is the help of `elmo train`'s option of the same name.
    optimizer: str = field(default="adam", metadata=option_help("adam or adagrad (bilm-tf's).", metavar="NAME"))
    lr: float | None = field(
        default=None,
        metadata=option_help(
            "Learning rate (default 1e-3 for adam, 0.2 for adagrad). With --resume: a new rate from the "
            "first resumed step on (default: the checkpoint's)."
        ),
    )
    clip_norm: float = field(default=10.0, metadata=option_help("Clip the gradient norm to this (0 = off)."))
    precision: str = "auto"
    max_steps: int | None = field(default=None, metadata=option_help("Stop at this total number of steps."))
    max_hours: float | None = field(default=None, metadata=option_help("Stop after this many hours of this run."))
    max_epochs: int | None = field(
        default=None,
        metadata=option_help(
            "Stop at the end of this many passes over the training files (counted across resumes; "
            "under torchrun, when the first rank has read its share)."
        ),
    )
    patience: int | None = field(
        default=None,
        metadata=option_help(
            "Early stopping: validate before the first step, write the model folder only when the validation "
            "perplexity is the best so far, and stop after N validations in a row without a better one "
            "(needs --valid)."
        ),
    )
    halve_lr_below: float | None = field(
        default=None,
        metadata=option_help(
            "Halve the learning rate at each validation whose perplexity is not at least this fraction below "
            "the best so far, e.g. 0.05 (needs --valid). With --resume: the checkpoint's unless given."
        ),
    )
    checkpoint_every: int = field(default=1000, metadata=option_help("Save checkpoint and model folder every N steps."))
    validate_every: int = field(default=1000, metadata=option_help("Validation perplexity every N steps."))
    log_every: int = field(default=50, metadata=option_help("A train_log.jsonl row every N steps."))
    valid_batch_tokens: int = 8192
    seed: int = field(default=0, metadata=option_help("Seed for weights, shuffling and dropout."))
    progress: bool = field(default=True, metadata=option_help("Show a progress bar."))

    def __post_init__(self) -> None:
        if self.optimizer not in ("adam", "adagrad"):
            raise ValueError(f"optimizer must be 'adam' or 'adagrad'; got {self.optimizer!r}.")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}.")
        if self.max_steps is None and self.max_hours is None and self.max_epochs is None:
            raise ValueError("give max_steps, max_hours or max_epochs (or several); otherwise training never stops.")
        for name in ("checkpoint_every", "validate_every", "log_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0; got {getattr(self, name)}.")
        if self.patience is not None and self.patience < 1:
            raise ValueError(f"patience must be >= 1 validations (or None: no early stopping); got {self.patience}.")
        if self.patience is not None and self.validate_every == 0:
            raise ValueError(
                "patience counts validations, but validate_every is 0 (validate only at the end); "
                "give validate_every > 0 steps."
            )
        if self.halve_lr_below is not None and not 0.0 <= self.halve_lr_below < 1.0:
            raise ValueError(
                f"halve_lr_below is a fraction of the best perplexity in [0, 1), e.g. 0.05; got {self.halve_lr_below}."
            )
        if self.halve_lr_below is not None and self.validate_every == 0:
            raise ValueError(
                "halve_lr_below acts at validations, but validate_every is 0 (validate only at the end); "
                "give validate_every > 0 steps."
            )

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return self.lr
        return 1e-3 if self.optimizer == "adam" else 0.2


def config_from_checkpoint(state: dict[str, Any], **overrides: Any) -> TrainConfig:
    """The checkpoint's `TrainConfig`, with `overrides` such as a new max_steps."""
    names = {f.name for f in fields(TrainConfig)}
    return TrainConfig(**{**{k: v for k, v in state["config"].items() if k in names}, **overrides})
