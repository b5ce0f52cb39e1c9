"""`TrainingSettings`: everything `elmo train` takes, one field per option."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from ...files.text_files import check_input_file, check_output_spares_inputs, is_stream, iter_lines
from ...model.checks import check_int
from ...model.errors import ElmoError
from .config import PRECISIONS, TrainConfig, option_help
from .corpus import DEFAULT_SPLITTER, expand_files
from .perplexity import check_precision
from .run_folder import TRAINING_FILES, check_glob_spares_out
from .vocab import DEFAULT_VOCAB_SIZE

__all__ = ["TrainingSettings"]

STOP_SETTINGS = (
    "max_steps",
    "max_hours",
    "max_epochs",
    "patience",
    "checkpoint_every",
    "validate_every",
    "log_every",
    "progress",
)
"""The `TrainConfig` fields a resumed run takes from its command rather than from its checkpoint."""


def _cutoffs_from_text(text: str | None) -> list[int] | None:
    return [int(c) for c in text.split(",")] if text else None


def _path_option(text: str, metavar: str = "FILE") -> dict[str, Any]:
    return option_help(text, type=Path | None, metavar=metavar)


@dataclass(kw_only=True)
class TrainingSettings(TrainConfig):
    """Everything `elmo train` takes: the `TrainConfig` fields plus the data, output folder
    and starting point.

    `elmo train --help` is made from these fields, one option each. `splitter` and
    `valid_batch_tokens` have no option.

    Exactly one starting point: `options` (a new model), `model` (a model folder) or
    `resume` (a checkpoint, exactly). A resumed run takes its data settings from the
    checkpoint and its stopping and logging settings from here.

    Numbers are checked on construction, files by `check_files`. Both raise `ElmoError`.
    """

    # The output folder, the data, and where the run starts.
    out: str | Path = field(
        metadata=option_help("Output folder: model folder, checkpoint.pt, train_log.jsonl.", type=Path, metavar="DIR")
    )
    train: Sequence[str | Path] | None = field(
        default=None,
        metadata=option_help(
            "Training text: a file or a quoted glob ('train/*.txt.xz'); repeat for more. Optional with --resume.",
            type=list[str] | None,
            metavar="FILE",
        ),
    )
    valid: str | Path | None = field(
        default=None,
        metadata=_path_option("Held-out text for validation perplexity. With --resume: the checkpoint's unless given."),
    )
    options: str | Path | None = field(default=None, metadata=_path_option("bilm-tf options.json of a new model."))
    model: str | Path | None = field(
        default=None,
        metadata=_path_option(
            "Continue from this model folder (weights; vocabulary and softmax if it has them).", metavar="DIR"
        ),
    )
    resume: str | Path | None = field(
        default=None, metadata=_path_option("Continue a run exactly from its checkpoint.pt.")
    )
    # A new vocabulary: read from `vocab`, or the words of the training text kept by size or count.
    vocab: str | Path | None = field(
        default=None,
        metadata=_path_option("Vocabulary file (bilm-tf vocab.txt) instead of counting the training text."),
    )
    vocab_size: int | None = field(
        default=None,
        metadata=option_help(f"Keep the N most frequent words (specials included). Default {DEFAULT_VOCAB_SIZE}."),
    )
    min_count: int | None = field(
        default=None, metadata=option_help("Keep words seen at least N times (instead of --vocab-size).")
    )
    # The data stream (stored in every checkpoint; `seed` too).
    batch_tokens: int = field(
        default=4096, metadata=option_help("Padded positions per batch and process (<S>/</S> included).")
    )
    pretokenized: bool = field(
        default=False,
        metadata=option_help("Input is one tokenised sentence per line (see elmo data pretokenize)."),
    )
    splitter: str = DEFAULT_SPLITTER
    max_sentence_tokens: int | None = field(
        default=100, metadata=option_help("Cut longer sentences into pieces of this many tokens.", type=int)
    )
    buffer_sentences: int = field(
        default=20_000, metadata=option_help("Sentences shuffled and length-sorted together.")
    )
    # The model.
    dropout: float = field(
        default=0.1,
        metadata=option_help(
            "Dropout on LSTM inputs and the top output (bilm-tf: 0.1). The paired recurrences and the top "
            "output draw 16 random bits per element, so they round it to a multiple of 2**-16."
        ),
    )
    cutoffs: Sequence[int] | None = field(
        default=None,
        metadata=option_help(
            "Adaptive-softmax cluster ends, e.g. '4000,20000' (default: from the vocabulary size).",
            type=str | None,
            parse=_cutoffs_from_text,
            metavar="N,N,...",
        ),
    )
    # None: "auto" for a new run (TrainConfig's default); a resumed run's checkpoint's.
    precision: str | None = field(  # type: ignore[assignment]
        default=None,
        metadata=option_help(
            "auto (bf16 on CUDA, fp32 on CPU; the default), fp32, bf16 or fp16. On a CPU: bf16 only where it "
            "has AVX512-BF16 or AMX, no fp16 (slower than fp32). With --resume: the checkpoint's unless given, "
            "a new one from here on when given.",
            metavar=f"[{'|'.join(PRECISIONS)}]",
        ),
    )
    # Where it runs; `prefetch` batches are built ahead in a worker process (`PrefetchingStream`);
    # None = 8 on CUDA, 0 (build in the training process) on the CPU, where the worker would
    # only take a core from training.
    device: str = field(
        default="cpu",
        metadata=option_help(
            "torch device, e.g. cpu or cuda; under torchrun each process uses cuda:LOCAL_RANK.", metavar="DEVICE"
        ),
    )
    prefetch: int | None = field(
        default=None, metadata=option_help("Batches built ahead in a worker process (default 8 on CUDA, 0 on CPU).")
    )

    def __post_init__(self) -> None:
        # `TrainConfig`'s own checks run later, on `train_config()` or the checkpoint's config.
        if sum(x is not None for x in (self.options, self.model, self.resume)) != 1:
            raise ElmoError(
                "give exactly one of --options options.json (a new model), --model DIR (continue from a "
                "model folder) or --resume CHECKPOINT (continue a run exactly)."
            )
        if self.vocab_size is not None and self.min_count is not None:
            raise ElmoError("give --vocab-size or --min-count, not both.")
        self._check_numbers()

    def _check_numbers(self) -> None:
        check_int("--batch-tokens", self.batch_tokens, error=ElmoError)
        check_int("--max-steps", self.max_steps, none_ok=True, error=ElmoError)
        check_int("--max-epochs", self.max_epochs, none_ok=True, error=ElmoError)
        if self.precision is not None and self.precision not in PRECISIONS:
            raise ElmoError(f"--precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}.")
        if self.precision is not None and self.precision != "auto":
            try:
                check_precision(torch.device(self.device), self.precision)
            except ValueError as err:
                raise ElmoError(str(err)) from None
        specials = "3 specials and 1 word"
        check_int("--vocab-size", self.vocab_size, minimum=4, none_ok=True, meaning=specials, error=ElmoError)
        check_int("--min-count", self.min_count, none_ok=True, error=ElmoError)
        for name in ("checkpoint_every", "validate_every", "log_every"):
            check_int("--" + name.replace("_", "-"), getattr(self, name), minimum=0, error=ElmoError)
        check_int("--max-sentence-tokens", self.max_sentence_tokens, none_ok=True, error=ElmoError)
        check_int("--buffer-sentences", self.buffer_sentences, error=ElmoError)
        check_int("--prefetch", self.prefetch, minimum=0, none_ok=True, meaning="0 = no worker", error=ElmoError)
        check_int(
            "--patience",
            self.patience,
            none_ok=True,
            meaning="validations without a better perplexity",
            error=ElmoError,
        )
        if self.patience is not None and self.valid is None and self.resume is None:  # resume: the checkpoint's
            raise ElmoError(patience_without_valid())
        if self.patience is not None and self.validate_every == 0:
            raise ElmoError("--patience counts validations; give --validate-every N > 0 steps with it.")
        if self.max_hours is not None and not self.max_hours > 0:
            raise ElmoError(f"--max-hours must be a positive number of hours; got {self.max_hours}.")
        if self.lr is not None and not self.lr > 0:
            raise ElmoError(f"--lr must be a positive learning rate; got {self.lr}.")
        if self.halve_lr_below is not None and not 0.0 <= self.halve_lr_below < 1.0:
            raise ElmoError(f"--halve-lr-below is a fraction in [0, 1), e.g. 0.05; got {self.halve_lr_below}.")
        if self.halve_lr_below is not None and self.validate_every == 0:
            raise ElmoError("--halve-lr-below acts at validations; give --validate-every N > 0 steps with it.")
        if self.halve_lr_below is not None and self.valid is None and self.resume is None:  # resume: the checkpoint's
            raise ElmoError(halving_without_valid())
        if not 0.0 <= self.dropout < 1.0:
            raise ElmoError(f"--dropout must be in [0, 1); got {self.dropout}.")

    def check_files(self) -> None:
        """Check the files before anything is read or written.

        The --resume checkpoint is the one file of --out that a run reads and then replaces.

        Raises:
            ElmoError: One line, for a training file that is a stream (read once per epoch),
                an input that --out would replace, an --out that is a file, a --valid file
                without sentences, or no stop condition.
        """
        reason = "elmo train reads its training files again on every epoch"
        train: list[tuple[str, str | Path | None]] = []
        for pattern in self.train or []:
            if is_stream(pattern):
                check_input_file(pattern, "--train", streams=reason)
            check_glob_spares_out(str(pattern), Path(self.out))
            train.extend(("--train", p) for p in expand_files([pattern]))
        others = [("--valid", self.valid), ("--options", self.options), ("--vocab", self.vocab)]
        inputs = [*train, *others, ("--model", self.model)]
        check_output_spares_inputs([], inputs, folders=[("--out", self.out, TRAINING_FILES)])
        if Path(self.out).exists() and not Path(self.out).is_dir():
            raise ElmoError(f"--out {self.out} is a file; give the folder to write the model into.")
        valid = self.valid
        if valid is not None and not is_stream(valid) and Path(valid).is_file():
            if not any(line.strip() for line in iter_lines(valid)):  # reads up to the first words
                raise ElmoError(no_validation_sentences(valid))
        if self.max_steps is None and self.max_hours is None and self.max_epochs is None:
            raise ElmoError(
                "give --max-steps, --max-hours or --max-epochs (or several); otherwise training never stops. A "
                "resumed run takes when to stop from its command, not from the checkpoint: give it again with "
                "--resume (--max-steps and --max-epochs count what the run did before the resume)."
            )

    def stop_settings(self) -> dict[str, Any]:
        """When to stop, validate, log and save. A run always takes these from here."""
        return {name: getattr(self, name) for name in STOP_SETTINGS}

    def resume_settings(self) -> dict[str, Any]:
        """The fields a resumed run takes from here, not from its checkpoint.

        These are `stop_settings`, and `lr`, `precision` and `halve_lr_below` when given.
        None of them changes the data order, so the resume stays exact otherwise.
        """
        taken = ("lr", "precision", "halve_lr_below")
        given = {name: getattr(self, name) for name in taken if getattr(self, name) is not None}
        return {**self.stop_settings(), **given}

    def data_settings(self) -> dict[str, Any]:
        """The data stream's settings, as every checkpoint stores them, globs expanded.

        Raises:
            ElmoError: If a training file does not exist or a glob matches nothing.
        """
        return {
            "train": [str(p) for p in expand_files(self.train or [])],
            "batch_tokens": self.batch_tokens,
            "max_sentence_tokens": self.max_sentence_tokens,
            "buffer_sentences": self.buffer_sentences,
            "seed": self.seed,
            "splitter": None if self.pretokenized else self.splitter,
            "valid": None if self.valid is None else str(self.valid),
        }

    def train_config(self) -> TrainConfig:
        """A new run's `TrainConfig` from these fields, with precision "auto" when none is given.

        Raises:
            ValueError: If there is no stop condition.
        """
        config = {f.name: getattr(self, f.name) for f in fields(TrainConfig)}
        return TrainConfig(**{**config, "precision": self.precision or TrainConfig.precision})


def halving_without_valid() -> str:
    return (
        "--halve-lr-below acts when the validation perplexity stops improving, but there is no --valid; "
        "give held-out text with --valid FILE, or leave --halve-lr-below out."
    )


def patience_without_valid() -> str:
    return (
        "--patience stops when the validation perplexity stops improving, but there is no --valid; "
        "give held-out text with --valid FILE, or leave --patience out."
    )


def no_validation_sentences(valid: str | Path) -> str:
    # Refused: a run asked for validation would train for hours without any.
    return (
        f"--valid {valid} holds no sentences, so there would be no validation perplexity; "
        "give held-out text, or leave --valid out to train without validation."
    )
