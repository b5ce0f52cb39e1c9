"""What `elmo train`, `elmo perplexity` and `elmo data` do, as functions.

The typer layer (`elmo_core.apps.cli`) only parses arguments and prints;
everything else is here, so that it can be called and tested without a shell.
"""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ...files.folder_lock import LOCK_NAME, FolderLock
from ...files.model_folder import load_model_folder, read_model_config, resolve_model_source
from ...files.options_file import read_options
from ...files.text_files import (
    check_input_file,
    check_output_is_new,
    check_output_spares_inputs,
    is_stream,
    iter_lines,
    same_file,
)
from ...model.checks import check_int
from ...model.errors import ElmoError
from ...runtime.distributed import init_distributed
from ..console import progress_bar
from .checkpoint import lm_from_checkpoint, load_checkpoint_file
from .corpus import DEFAULT_SPLITTER, Splitter, get_sentence_splitter, iter_sentences
from .data import PrefetchingStream, TrainingStream
from .model import BiLMLanguageModel, has_lm_head, load_language_model
from .perplexity import Perplexity, check_precision, evaluate
from .trainer import (
    CHECKPOINT_NAME,
    PRECISIONS,
    TRAINING_FILES,
    TrainConfig,
    Trainer,
    config_from_checkpoint,
    option_help,
    seed_everything,
)
from .vocab import Vocabulary

__all__ = ["TrainingSettings", "run_perplexity", "run_training"]

logger = logging.getLogger(__name__)

DEFAULT_VOCAB_SIZE = 100_000

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
    """`--cutoffs 4000,20000` -> [4000, 20000]."""
    return [int(c) for c in text.split(",")] if text else None


def _path_option(text: str, metavar: str = "FILE") -> dict[str, Any]:
    """`option_help` for a path field that may be None (`metavar`: how help names it)."""
    return option_help(text, type=Path | None, metavar=metavar)


def _check_glob_spares_out(pattern: str, out: Path) -> None:
    """Refuse a --train glob that would pick up what the run writes in --out (`tg/*.txt`
    with `--out tg` reads the run's own vocab.txt as training text when it is resumed)."""
    folder, name = os.path.split(pattern)
    if not any(c in name for c in "*?[") or any(c in folder for c in "*?["):
        return
    if Path(folder or ".").resolve() != out.resolve():
        return
    written = [w.replace("*", "") for w in TRAINING_FILES]  # a name of each kind the run writes
    caught = [w for w in written if fnmatch.fnmatch(w, name)]
    if caught:
        raise ElmoError(
            f"--train {pattern!r} is a pattern in --out {out}, where this command writes {caught[0]!r}: a resumed "
            "run would read it as training text. Keep the training text in another folder, or give another --out."
        )


def expand_files(patterns: Sequence[str | Path]) -> list[Path]:
    """Paths, with glob patterns (`train/*.txt.xz`) expanded in sorted order; a stream
    (`-` for standard input, a pipe) is kept as it is.

    Raises:
        ElmoError: if a pattern matches nothing or a named file does not exist.
    """
    files: list[Path] = []
    for pattern in patterns:
        text = str(pattern)
        if is_stream(text):
            files.append(Path(text))
        elif any(c in text for c in "*?["):
            matches = sorted(glob.glob(text))
            if not matches:
                raise ElmoError(f"no file matches {text!r}.")
            files.extend(Path(m) for m in matches)
        elif not Path(text).is_file():
            raise ElmoError(f"file {text} does not exist.")
        else:
            files.append(Path(text))
    return files


def build_vocabulary(
    files: Sequence[Path],
    splitter: Splitter | None,
    *,
    vocab_size: int | None,
    min_count: int | None,
    progress: bool = False,
) -> Vocabulary:
    """Count the words of `files` (one full pass) and keep the frequent ones; `progress`
    shows a bar of the sentences counted on stderr."""
    if vocab_size is None and min_count is None:
        vocab_size = DEFAULT_VOCAB_SIZE
    logger.info("building the vocabulary from %d file%s", len(files), "" if len(files) == 1 else "s")
    sentences = iter_sentences(files, splitter)
    with progress_bar(None, unit=" sentences", desc="counting words", show=progress, items=sentences) as bar:
        return Vocabulary.build(bar, min_count=min_count or 1, max_size=vocab_size)


def _shared_vocabulary(make: Any, distributed: bool) -> Vocabulary:
    """Rank 0 makes the vocabulary; the others receive it."""
    if not distributed:
        return make()
    box: list[Any] = [None]
    if dist.get_rank() == 0:
        vocab = make()
        box = [(vocab.tokens, vocab.counts)]
    dist.broadcast_object_list(box, src=0)
    return Vocabulary(*box[0])


@dataclass(kw_only=True)
class TrainingSettings(TrainConfig):
    """Everything `elmo train` takes: the `TrainConfig` fields (optimisation, stopping,
    logging) and the run's data, output folder and starting point, one field per option of
    the same name (`elmo train --help`, whose options are made from these fields: their
    defaults, and `metadata["help"]`); plus `splitter`, the sentence splitter for raw text,
    and `valid_batch_tokens`, which have no option.

    Exactly one starting point: `options` (a new model), `model` (continue from a model
    folder: its weights, and its vocabulary and softmax when it has them) or `resume`
    (a checkpoint: model, optimiser, data position and RNG exactly; the data settings
    come from the checkpoint, the stopping and logging settings from these fields).

    Checked on construction (`ElmoError`, in the options' spelling); the files are checked
    by `check_files`, which `run_training` calls before anything is read or written.
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
        """Raise ElmoError unless there is exactly one starting point, one vocabulary size rule,
        and every number is in range. (`TrainConfig`'s own checks, such as a stop condition,
        run when the run's config is made: `train_config`, or the checkpoint's.)"""
        if sum(x is not None for x in (self.options, self.model, self.resume)) != 1:
            raise ElmoError(
                "give exactly one of --options options.json (a new model), --model DIR (continue from a "
                "model folder) or --resume CHECKPOINT (continue a run exactly)."
            )
        if self.vocab_size is not None and self.min_count is not None:
            raise ElmoError("give --vocab-size or --min-count, not both.")
        self._check_numbers()

    def _check_numbers(self) -> None:
        """Before the vocabulary is counted or anything is written, in the options' spelling."""
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
            raise ElmoError(_patience_without_valid())
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
            raise ElmoError(_halving_without_valid())
        if not 0.0 <= self.dropout < 1.0:
            raise ElmoError(f"--dropout must be in [0, 1); got {self.dropout}.")

    def check_files(self) -> None:
        """Raise a one-line ElmoError, before anything is read or written, for a training file
        that is a stream (it is read once per epoch), or an input that --out would replace:
        --out itself, or a file there named as one the run writes (`TRAINING_FILES`); an --out
        that is a file; a --valid file without sentences (only blank lines: the run would have
        no validation perplexity); no stop condition, new run or resumed (`TrainConfig` refuses
        it too, later and in its field names). The --resume checkpoint is the one file of --out
        a run reads and then replaces."""
        reason = "elmo train reads its training files again on every epoch"
        train: list[tuple[str, str | Path | None]] = []
        for pattern in self.train or []:
            if is_stream(pattern):
                check_input_file(pattern, "--train", streams=reason)
            _check_glob_spares_out(str(pattern), Path(self.out))
            train.extend(("--train", p) for p in expand_files([pattern]))
        others = [("--valid", self.valid), ("--options", self.options), ("--vocab", self.vocab)]
        inputs = [*train, *others, ("--model", self.model)]
        check_output_spares_inputs([], inputs, folders=[("--out", self.out, TRAINING_FILES)])
        if Path(self.out).exists() and not Path(self.out).is_dir():
            raise ElmoError(f"--out {self.out} is a file; give the folder to write the model into.")
        valid = self.valid
        if valid is not None and not is_stream(valid) and Path(valid).is_file():
            if not any(line.strip() for line in iter_lines(valid)):  # reads up to the first words
                raise ElmoError(_no_validation_sentences(valid))
        if self.max_steps is None and self.max_hours is None and self.max_epochs is None:
            raise ElmoError(
                "give --max-steps, --max-hours or --max-epochs (or several); otherwise training never stops. A "
                "resumed run takes when to stop from its command, not from the checkpoint: give it again with "
                "--resume (--max-steps and --max-epochs count what the run did before the resume)."
            )

    def stop_settings(self) -> dict[str, Any]:
        """When to stop, validate, log and save: `TrainConfig` fields a run always takes from here."""
        return {name: getattr(self, name) for name in STOP_SETTINGS}

    def resume_settings(self) -> dict[str, Any]:
        """The `TrainConfig` fields a resumed run takes from here rather than from its checkpoint:
        `stop_settings`, and `lr`, `precision` and `halve_lr_below` when given (for the rest of
        the run: none changes the data order, so the resume stays exact in everything else)."""
        taken = ("lr", "precision", "halve_lr_below")
        given = {name: getattr(self, name) for name in taken if getattr(self, name) is not None}
        return {**self.stop_settings(), **given}

    def data_settings(self) -> dict[str, Any]:
        """The data stream's settings, as every checkpoint stores them (globs expanded).

        Raises:
            ElmoError: if a training file does not exist or a glob matches nothing.
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
        """The optimisation, stopping and logging settings of a new run: this object's
        `TrainConfig` fields, with precision "auto" when none is given.

        Raises:
            ValueError: if there is no stop condition (`TrainConfig`).
        """
        config = {f.name: getattr(self, f.name) for f in fields(TrainConfig)}
        return TrainConfig(**{**config, "precision": self.precision or TrainConfig.precision})


def run_training(
    settings: TrainingSettings | None = None, /, *, stop_on_signals: bool = False, **fields: Any
) -> dict[str, Any]:
    """Train (or continue training) a biLM language model; see `elmo train --help`.

    Args:
        settings: The run's `TrainingSettings`.
        stop_on_signals: On Ctrl-C (SIGINT) or SIGTERM, stop at the next step boundary and
            save a checkpoint to resume from (`Trainer.fit`); what `elmo train` does.
        **fields: `TrainingSettings` fields, as keywords: the settings when `settings` is
            None (`run_training(train=[...], valid=None, out="run", options="options.json")`),
            else changes to it.

    Returns:
        The trainer's summary (`step`, `tokens`, `elapsed_s`, `valid_*ppl`; `interrupted`
        with `stop_on_signals`).

    Raises:
        ElmoError: for missing or conflicting arguments.
        TypeError: for a keyword that is not a `TrainingSettings` field.
    """
    if settings is None:
        settings = TrainingSettings(**fields)
    elif fields:
        settings = replace(settings, **fields)
    settings.check_files()
    rank, world_size, device = init_distributed(settings.device)
    distributed = world_size > 1
    lock = None
    try:
        lock = _own_out_folder(Path(settings.out), settings.resume, rank, distributed)
        if settings.resume is not None:
            start = _start_from_checkpoint(settings.resume, settings.train, settings.resume_settings())
            start.data["valid"] = start.data.get("valid") if settings.valid is None else str(settings.valid)
            if start.config.patience is not None and start.data["valid"] is None:
                raise ElmoError(_patience_without_valid())
            if start.config.halve_lr_below is not None and start.data["valid"] is None:
                raise ElmoError(_halving_without_valid())
        else:
            start = _start_from_scratch_or_folder(settings, distributed)
        prefetch = settings.prefetch
        if prefetch is None:
            prefetch = 8 if device.startswith("cuda") else 0
        trainer = _make_trainer(start, start.data["valid"], settings.out, device, rank, world_size, prefetch)
        summary = trainer.fit(stop_on_signals=stop_on_signals)
        if distributed:
            dist.barrier()  # leave together: gloo can abort a process whose peer has gone
        return summary
    finally:
        if lock is not None:
            lock.release(delete=True)
        if distributed:
            dist.destroy_process_group()


def _halving_without_valid() -> str:
    """The message for --halve-lr-below in a run without validation text."""
    return (
        "--halve-lr-below acts when the validation perplexity stops improving, but there is no --valid; "
        "give held-out text with --valid FILE, or leave --halve-lr-below out."
    )


def _patience_without_valid() -> str:
    """The message for --patience in a run without validation text."""
    return (
        "--patience stops when the validation perplexity stops improving, but there is no --valid; "
        "give held-out text with --valid FILE, or leave --patience out."
    )


def _no_validation_sentences(valid: str | Path) -> str:
    """The message for a --valid file without sentences: refused, since a run that was
    asked for validation perplexity would train for hours without any."""
    return (
        f"--valid {valid} holds no sentences, so there would be no validation perplexity; "
        "give held-out text, or leave --valid out to train without validation."
    )


def _own_out_folder(out: Path, resume: str | Path | None, rank: int, distributed: bool) -> FolderLock | None:
    """Rank 0 (the process that writes) takes --out's `FolderLock` for the run's life, before
    anything is read or written, and checks that --out holds no other run's work
    (`_check_no_other_run`); the other ranks learn its answer. A killed run's lock dies
    with it, so the next run resumes its folder.

    Raises:
        ElmoError: on every rank, at once, when another run holds --out, or --out holds
            another run's files.
    """
    answer: list[str | None] = [None]
    lock = None
    if rank == 0:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            lock = FolderLock(out, busy=_busy_message(out))
            _check_no_other_run(out, resume)
        except (ElmoError, OSError) as err:  # an OSError too: the other ranks must hear of it, not hang
            answer[0] = str(err)
            if lock is not None:
                lock.release(delete=True)
                lock = None
    if distributed:
        dist.broadcast_object_list(answer, src=0)
    if answer[0] is not None:
        raise ElmoError(answer[0])
    return lock


def _check_no_other_run(out: Path, resume: str | Path | None) -> None:
    """Refuse an --out that holds files a run writes (`TRAINING_FILES`), unless this run
    resumes the checkpoint in it: a run never overwrites another run's work.

    Raises:
        ElmoError: one line naming --out, the files there, --resume and a fresh --out.
    """
    if resume is not None and same_file(Path(resume).parent, out):
        return
    checkpoint = out / CHECKPOINT_NAME
    if resume is not None:
        fix = (
            f"Resume a run in its own folder (--out {Path(resume).parent} --resume {resume}), "
            "or give a fresh --out (a new or empty folder)."
        )
    elif checkpoint.is_file():
        fix = f"Continue that run with --resume {checkpoint}, or give a fresh --out (a new or empty folder)."
    else:
        fix = f"Give a fresh --out (a new or empty folder); there is no {CHECKPOINT_NAME} there to --resume from."
    check_output_is_new("--out", out, fix, patterns=TRAINING_FILES, what="another training run's files")


def _busy_message(out: Path) -> str:
    return (
        f"another elmo train is running in --out {out} (it holds {out / LOCK_NAME}): wait for it to finish "
        f"(if it stops, --resume {out / CHECKPOINT_NAME} continues it), or give another --out. To train on "
        "several processes or GPUs at once, start them together with torchrun: "
        "torchrun --nproc-per-node N -m elmo_core train ..."
    )


@dataclass
class _Start:
    """Where a run starts: the language model, its vocabulary, the optimisation settings,
    the data settings (stored in every checkpoint), and a checkpoint to restore, if any."""

    lm: BiLMLanguageModel
    vocabulary: Vocabulary
    config: TrainConfig
    data: dict[str, Any]
    elmo_settings: dict[str, Any] | None = None
    state: dict[str, Any] | None = None

    def splitter(self) -> Splitter | None:
        name = self.data["splitter"]
        return None if name is None else get_sentence_splitter(name)


def _start_from_checkpoint(resume: str | Path, train: Sequence[str | Path] | None, stop: dict[str, Any]) -> _Start:
    """`--resume`: model, optimiser, data position and RNG exactly as the checkpoint left them;
    the data settings come from the checkpoint, the stopping and logging ones (and a new
    learning rate, if given) from `stop`."""
    state = load_checkpoint_file(resume)
    data = state["extra"]["data"]
    if train:
        given = [str(p) for p in expand_files(train)]
        if given != data["train"]:
            raise ElmoError(
                f"--train names other files than the checkpoint was trained on ({data['train']}); "
                "resume with the same files, or leave --train out to use the checkpoint's."
            )
    lm, vocabulary = lm_from_checkpoint(state)
    return _Start(lm, vocabulary, config_from_checkpoint(state, **stop), data, state["elmo_settings"], state)


def _start_from_scratch_or_folder(settings: TrainingSettings, distributed: bool) -> _Start:
    """`--options` (a new model) or `--model` (a model folder: its weights, and its
    vocabulary and softmax when it has them; otherwise a new vocabulary and softmax)."""
    data, config = settings.data_settings(), settings.train_config()
    options, model, vocab, dropout = settings.options, settings.model, settings.vocab, settings.dropout
    if not data["train"]:
        raise ElmoError("give the training text with --train FILE (repeat it, or use a quoted glob).")
    seed_everything(config.seed)  # before building the model: the same weights on every rank
    elmo_settings: dict[str, Any] | None
    if model is not None and has_lm_head(model):
        lm, vocabulary, elmo_settings = load_language_model(model, dropout=dropout)
        if settings.cutoffs is not None or vocab is not None:
            logger.warning("%s has its own vocabulary and softmax; --vocab and --cutoffs are ignored", model)
        return _Start(lm, vocabulary, config, data, elmo_settings)
    files = [Path(p) for p in data["train"]]
    split = None if data["splitter"] is None else get_sentence_splitter(data["splitter"])

    def make_vocab() -> Vocabulary:
        if vocab is not None:
            return Vocabulary.load(vocab)
        return build_vocabulary(files, split, vocab_size=settings.vocab_size, min_count=settings.min_count)

    elmo_settings = None
    if model is not None:
        elmo = load_model_folder(model, dropout=0.0)
        bilm_options, elmo_settings = elmo.options, read_model_config(model)[1]
        logger.info("%s has no softmax: starting a new one over a new vocabulary", model)
    else:
        bilm_options = read_options(options)  # type: ignore[arg-type]
    vocabulary = _shared_vocabulary(make_vocab, distributed)
    lm = BiLMLanguageModel(bilm_options, len(vocabulary), dropout=dropout, cutoffs=settings.cutoffs)
    if model is not None:
        lm.bilm.load_state_dict(elmo.bilm.state_dict())
    return _Start(lm, vocabulary, config, data, elmo_settings)


def _make_trainer(
    start: _Start, valid: str | Path | None, out: str | Path, device: str, rank: int, world_size: int, prefetch: int
) -> Trainer:
    """The trainer over this rank's share of the data stream, restored from the checkpoint if any."""
    data, split = start.data, start.splitter()
    files = [Path(p) for p in data["train"]]
    if next(iter_sentences(files, split), None) is None:  # before any progress bar is drawn
        raise ElmoError(f"the training files hold no sentences: {[str(p) for p in files]}; give text with --train.")
    stream = TrainingStream(
        files,
        start.vocabulary,
        data["batch_tokens"],
        splitter=split,
        max_sentence_tokens=data["max_sentence_tokens"],
        buffer_sentences=data["buffer_sentences"],
        seed=data["seed"],
        rank=rank,
        world_size=world_size,
        max_characters_per_token=start.lm.options.char_cnn.max_characters_per_token,
    )
    batches = PrefetchingStream(stream, prefetch) if prefetch else stream
    valid_sentences = list(iter_sentences([Path(valid)], split)) if valid is not None else None
    if valid is not None and not valid_sentences:  # a stream, checked only now it is read
        raise ElmoError(_no_validation_sentences(valid))
    trainer = Trainer(
        start.lm,
        start.vocabulary,
        batches,
        start.config,
        valid_sentences=valid_sentences,
        out_dir=out,
        device=device,
        elmo_settings=start.elmo_settings,
        checkpoint_extra={"data": data},
    )
    if start.state is not None:
        trainer.load_checkpoint(start.state)
    return trainer


def run_perplexity(
    files: Sequence[str | Path],
    *,
    model: str | Path | None = None,
    pretokenized: bool = False,
    splitter: str = DEFAULT_SPLITTER,
    batch_tokens: int = 4096,
    device: str = "cpu",
    precision: str = "fp32",
    progress: bool = False,
) -> list[tuple[Path, Perplexity]]:
    """Perplexity of a model folder's language model over each file's sentences.

    Args:
        files: Raw text (one paragraph per line; split by `splitter`) or, with
            `pretokenized`, one tokenised sentence per line; `-` is standard input.
        model: A model folder with a language-model head; the default model when None.
        progress: Show a progress bar per file on stderr (tqdm), in tokens.

    Raises:
        WeightFileError: if there is no such model, or it has no language-model head.
    """
    folder = resolve_model_source(model).folder
    assert folder is not None  # one path (or none: the default model) always names a folder
    lm, vocab, _ = load_language_model(folder, map_location=device)
    split = None if pretokenized else get_sentence_splitter(splitter)
    results = []
    for path in expand_files(files):
        sentences = list(iter_sentences([path], split))
        results.append(
            (
                path,
                evaluate(
                    lm,
                    sentences,
                    vocab,
                    batch_tokens=batch_tokens,
                    device=torch.device(device),
                    precision=precision,
                    progress=str(path) if progress else None,
                ),
            )
        )
    return results
