"""`TrainConfig`: the optimisation and bookkeeping settings of a `Trainer`.

Each field's `metadata["help"]` (`option_help`) is the help of `elmo train`'s option of
the same name.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["TrainConfig"]

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
"""`TrainConfig.precision` values."""


def option_help(text: str, **cli: Any) -> dict[str, Any]:
    """A settings field's metadata: `help`, the help of the `elmo train` option made from the
    field, and `cli`, anything the option needs besides (`type`: its type, where the
    field's does not suit a command line; `metavar`: how help names its value)."""
    return {"help": text, "cli": cli}


@dataclass(kw_only=True)
class TrainConfig:
    """Optimisation and bookkeeping settings (the model's are in `BiLMOptions`).

    Attributes:
        optimizer: "adam" (default; lr 1e-3) or "adagrad" (bilm-tf's choice: lr 0.2,
            initial accumulator 1.0).
        lr: Learning rate; None = the optimizer's default above. Constant (no schedule);
            a resumed run may be given a new one (`elmo train --resume ... --lr`), which holds
            from its first step on.
        clip_norm: Clip the global gradient norm of the mean loss to this (10.0, bilm-tf's
            `all_clip_norm_val`; see the module docstring for the 0.5 equivalence).
            0 disables clipping.
        precision: "auto" (bf16 autocast on CUDA, fp32 on CPU), "fp32", "bf16" or
            "fp16" (uses a gradient scaler). On the CPU, bf16 needs native bf16 and fp16
            is refused: neither may run slower than fp32
            (`elmo_core.model.precision.check_cpu_precision`).
        max_steps: Stop at this total step count (counted across resumes). None = no
            step limit.
        max_hours: Stop after this many hours of this invocation. None = no limit.
        max_epochs: Stop at the end of this many passes over the training files (the data
            stream's epochs, counted across resumes; bilm-tf's `n_epochs`). None = no limit.
            `Trainer` sets it as its `TrainingStream`'s `epochs`. Under DDP every rank reads
            its own share, and all stop when the first rank's share is done.
        patience: Early stopping (module docstring): stop after this many validations in a
            row without a lower validation perplexity than the best so far, and keep the
            best-validated weights in the model folder. Needs validation sentences and
            `validate_every` > 0; 1 stops at the first validation that is no better, a large
            value only keeps the best model. None = no early stopping (the model folder
            holds the last step's weights).
        halve_lr_below: Halve the learning rate at each validation whose perplexity is not at
            least this fraction below the best so far (module docstring); e.g. 0.05. Needs
            validation sentences and `validate_every` > 0. None = a constant rate.
        checkpoint_every: Write the checkpoint and the model folder every N steps (and
            at the end). 0 = only at the end.
        validate_every: Validation perplexity every N steps (and at the end); 0 = only
            at the end. Ignored without validation sentences.
        log_every: A row in `train_log.jsonl` every N steps.
        valid_batch_tokens: Batch budget for validation (memory only).
        seed: Seeds Python, NumPy and torch (plus the rank, so dropout differs per rank).
        progress: Show a tqdm bar (rank 0).
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
    """The checkpoint's `TrainConfig`, with `overrides` (e.g. a new max_steps)."""
    names = {f.name for f in fields(TrainConfig)}
    return TrainConfig(**{**{k: v for k, v in state["config"].items() if k in names}, **overrides})
