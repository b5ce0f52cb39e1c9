"""The training loop: optimiser, clipping, autocast, checkpoints, validation, data parallel.

One step, on every rank r of W (W = 1 without torchrun):

    batch_r  = next(stream_r)                       disjoint lines of the data per rank
    n_r      = predictions per direction in batch_r;  N = all_reduce_sum(n_r)
    loss_r   = (fwd_mean_r + bwd_mean_r) * n_r / (2N) * W
    backward through DistributedDataParallel       grads averaged over ranks ->
                                                    grad of the mean loss over all N
    clip_grad_norm_(clip_norm); optimizer.step()

so a W-process step equals one process on the union of the W batches (up to float
summation order). bilm-tf instead averaged the per-GPU mean losses and clipped the
gradient of `unroll_steps` (20) x that loss at `all_clip_norm_val` = 10: the same as
clipping our mean-loss gradient at 0.5 (Adam is indifferent to the scale, Adagrad nearly).

Checkpoints resume exactly: model, optimiser (and fp16 grad scaler), step and token
counters, every rank's data position and every rank's Python / NumPy / torch RNG states.
Only rank 0 writes files: `checkpoint.pt`, the model folder (`save_language_model`) and
`train_log.jsonl`, one JSON object per line:

    {"step": 500, "tokens": 1024000, "train_ppl": 412.3, "valid_forward_ppl": 390.1,
     "valid_backward_ppl": 401.7, "valid_ppl": 395.9, "elapsed_s": 812.4, "lr": 0.001}

(`valid_*` are null on rows without a validation; `valid_ppl` is the average defined in
`perplexity.py`; `tokens` counts words, without `<S>`/`</S>`, over all ranks.)

Early stopping (`TrainConfig.patience`, for adapting a trained biLM to a task's text): the
model is validated once before its first step, the model folder is written only when
`valid_ppl` is lower than at every earlier validation (so it always holds the best weights,
as spaCy's `model-best`), and the run stops after `patience` validations in a row without
a lower one. `checkpoint.pt` still holds the latest step, for an exact resume, and the
best perplexity so far with it.

Learning-rate halving on a plateau (`TrainConfig.halve_lr_below`, for a long pretraining run
that nobody watches): at every validation whose `valid_ppl` is not at least that fraction
below the best so far, the learning rate is halved (torch's `ReduceLROnPlateau` with
factor 0.5, patience 0 and a relative threshold, stepped with `valid_ppl`). It does by
rule what the shipped model's run did by hand ("halve when a validation gains under about
5%", core/default_model/README.md), and its state is in the checkpoint, so a resumed run
goes on with the same best and rate.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ...files.atomic_files import full_disk_as_one_error
from ...files.model_folder import MODEL_FOLDER_FILES
from ...files.text_files import check_output_is_new
from ...model.errors import ElmoError
from ...runtime.memory import release_free_memory
from ..console import progress_bar
from .checkpoint import (
    CHECKPOINT_FORMAT,
    atomic_torch_save,
    get_rng_state,
    load_checkpoint_file,
    set_rng_state,
    truncate_log,
)
from .data import Batch
from .interrupt import StopSignals
from .model import LM_HEAD_NAME, VOCAB_NAME, BiLMLanguageModel, save_language_model
from .perplexity import Perplexity, autocast_context, check_precision, evaluate
from .vocab import Vocabulary

__all__ = ["TrainConfig", "Trainer"]

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
"""`TrainConfig.precision` values."""

RELEASE_EVERY = 25
"""Training steps between two `release_free_memory()` calls (glibc's `malloc_trim`)."""

logger = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.pt"
LOG_NAME = "train_log.jsonl"

TRAINING_FILES = (CHECKPOINT_NAME, LOG_NAME, VOCAB_NAME, LM_HEAD_NAME, *MODEL_FOLDER_FILES)
"""Name patterns of the files a run writes in its output folder."""


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


class StepResult:
    """One step's numbers on this rank: `loss` = 0.5 * (forward + backward) mean loss."""

    __slots__ = ("forward_loss", "backward_loss", "tokens", "words", "grad_norm")

    def __init__(self, forward_loss: float, backward_loss: float, tokens: int, words: int, grad_norm: float) -> None:
        self.forward_loss = forward_loss
        self.backward_loss = backward_loss
        self.tokens = tokens
        self.words = words
        self.grad_norm = grad_norm

    @property
    def loss(self) -> float:
        return 0.5 * (self.forward_loss + self.backward_loss)


class Trainer:
    """Trains a `BiLMLanguageModel` on a stream of batches.

    Args:
        lm: The model (moved to `device`). Build it after seeding so that every rank
            starts from the same weights (DDP also broadcasts rank 0's).
        vocab: Its softmax vocabulary (saved with the model folder).
        stream: This rank's batches: a `TrainingStream` or `PrefetchingStream`
            (resumable; `config.max_epochs`, when set, becomes its `epochs`), or any
            iterable of `Batch` (then checkpoints cannot restore the data position).
        config: `TrainConfig`.
        valid_sentences: Held-out tokenised sentences for validation perplexity (all of
            them; each rank scores its share).
        out_dir: Where rank 0 writes checkpoint, model folder and log. None = nowhere.
        device: torch device of this rank.
        elmo_settings: `Elmo` settings written to the model folder's config.json.
        checkpoint_extra: Anything else to keep in the checkpoint (the CLI stores its data
            settings there).

    Uses `torch.distributed` when a process group is initialised (`init_distributed`).
    """

    def __init__(
        self,
        lm: BiLMLanguageModel,
        vocab: Vocabulary,
        stream: Iterable[Batch],
        config: TrainConfig,
        *,
        valid_sentences: Sequence[Sequence[str]] | None = None,
        out_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        elmo_settings: dict[str, Any] | None = None,
        checkpoint_extra: dict[str, Any] | None = None,
    ) -> None:
        if len(vocab) != lm.vocab_size:
            raise ValueError(f"the vocabulary has {len(vocab)} tokens but the model's softmax {lm.vocab_size}.")
        if config.patience is not None and not valid_sentences:
            raise ValueError("patience watches the validation perplexity, but there are no validation sentences.")
        if config.halve_lr_below is not None and not valid_sentences:
            raise ValueError("halve_lr_below watches the validation perplexity, but there are no validation sentences.")
        self.device = torch.device(device)
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world_size = dist.get_world_size() if self.distributed else 1
        self.config = config
        self.precision = config.precision
        if self.precision == "auto":
            self.precision = "bf16" if self.device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
        check_precision(self.device, self.precision)  # none slower than fp32 (elmo_core.model.precision)
        seed_everything(config.seed + self.rank)
        self.lm = lm.to(self.device)
        self.vocab = vocab
        self.model: nn.Module = self.lm
        if self.distributed:
            from torch.nn.parallel import DistributedDataParallel

            # Adaptive-softmax clusters that no target of a batch falls in get no gradient.
            self.model = DistributedDataParallel(
                self.lm,
                device_ids=[self.device] if self.device.type == "cuda" else None,
                find_unused_parameters=True,
            )
        params = [p for p in self.lm.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(params, config)
        self.plateau = make_plateau_scheduler(self.optimizer, config)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.precision == "fp16")
        self.stream = stream
        if config.max_epochs is not None:
            _limit_epochs(stream, config.max_epochs)
        self.valid_sentences = list(valid_sentences) if valid_sentences is not None else None
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.elmo_settings = elmo_settings
        self.checkpoint_extra = dict(checkpoint_extra or {})
        self.step = 0
        self.tokens_seen = 0  # words, all ranks
        self.elapsed_before = 0.0  # seconds trained by earlier invocations
        self.early_stopping = _EarlyStopping()
        self._iterator: Iterator[Batch] | None = None
        self._out_dir_is_ours = False  # checked, or a checkpoint was loaded: out_dir holds this run

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # ------------------------------------------------------------------ one step
    def train_step(self, batch: Batch) -> StepResult:
        """Forward, backward, clip and update on one batch (a collective step under DDP)."""
        self.model.train()
        batch = batch.to(self.device)
        rows = batch.char_ids.shape[0]
        tokens = batch.num_words + rows  # predictions per direction
        counts = self._all_reduce(torch.tensor([tokens, batch.num_words], dtype=torch.float64))
        total_tokens = float(counts[0])
        with autocast_context(self.device, self.precision):
            out = self.model(batch.char_ids, batch.mask, batch.targets)
        # Sum of both directions' NLL over all ranks' predictions; DDP averages the
        # gradients over ranks, hence the * world_size.
        loss = (out.forward_loss + out.backward_loss) * (tokens * self.world_size / (2.0 * total_tokens))
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        if self.config.clip_norm > 0:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.lm.parameters(), self.config.clip_norm))
        else:
            grad_norm = math.nan
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.step += 1
        self.tokens_seen += int(counts[1])
        result = StepResult(out.forward_loss.item(), out.backward_loss.item(), tokens, batch.num_words, grad_norm)
        del out, loss
        # Every batch has new shapes: hand the freed heap back, or the resident size
        # grows over the run (1.1 -> 3.0 GB for the default model; elmo_core.runtime.memory).
        # Every RELEASE_EVERY steps, not every step: the pages handed back are faulted in
        # again by the next step (elmo_core.runtime.memory has the measurement).
        if self.step % RELEASE_EVERY == 0:
            release_free_memory()
        return result

    # ------------------------------------------------------------------ validation
    def validate(self) -> Perplexity | None:
        """Perplexity on the validation sentences (each rank scores every W-th; summed)."""
        if not self.valid_sentences:
            return None
        share = self.valid_sentences[self.rank :: self.world_size]
        result = evaluate(
            self.lm,
            share,
            self.vocab,
            batch_tokens=self.config.valid_batch_tokens,
            device=self.device,
            precision=self.precision,
        )
        if self.distributed:
            summed = self._all_reduce(torch.tensor(list(result), dtype=torch.float64))
            result = Perplexity(float(summed[0]), float(summed[1]), *(int(x) for x in summed[2:]))
        return result

    # ------------------------------------------------------------------ the loop
    def fit(
        self, callback: Callable[[int, StepResult], None] | None = None, *, stop_on_signals: bool = False
    ) -> dict[str, Any]:
        """Train until `max_steps` / `max_hours` (or the stream ends, or early stopping's
        `patience` runs out); returns a summary (with `patience`: also `best_valid_ppl`,
        `best_step` and `stopped_early`; with `stop_on_signals`: `interrupted`).

        Writes checkpoints, the model folder and log rows as configured (rank 0), and
        always validates, logs and saves at the last step. Log rows go to the `logging`
        module as one readable line each, through tqdm while the bar is shown, so that a
        line never runs into the bar.

        Args:
            callback: Called as `callback(step, result)` after every step.
            stop_on_signals: Stop at the next step boundary on SIGINT (Ctrl-C) or SIGTERM,
                and save the checkpoint an exact resume needs (without the last step's
                validation); a second signal stops at once, without saving
                (`elmo_core.apps.training.interrupt`). The summary's `interrupted` is True
                when a signal stopped the run.
        """
        from tqdm.contrib.logging import logging_redirect_tqdm

        self._check_no_other_run()
        run = _FitRun(time.monotonic())
        if self._iterator is None:
            self._iterator = iter(self.stream)
        show = self.config.progress and self.is_main
        bar = progress_bar(self.config.max_steps, unit="step", show=show, initial=self.step)
        notice = "stopping after this step to save a checkpoint (a second Ctrl-C stops at once, without saving)"
        signals = StopSignals(notice if self.is_main else None) if stop_on_signals else contextlib.nullcontext()
        with signals as run.signals, logging_redirect_tqdm() if show else contextlib.nullcontext():
            try:
                if self.config.patience is not None and self.early_stopping.best is None:
                    self._validate_before_training(run)
                self._train_until_stopped(run, bar, callback)
            finally:
                bar.close()
                self._leave_stream(run)
            return self._finish_fit(run)

    def _leave_stream(self, run: _FitRun) -> None:
        """Close the batch iterator; the stream keeps its position (a batch taken but not trained goes back)."""
        close = getattr(self._iterator, "close", None)
        if close is not None:  # a generator: the stream keeps its position
            close()  # (and a prefetching worker stops)
            self._iterator = None
        if run.put_back is not None:  # only taken from a stream with state_dict()
            stream: Any = self.stream
            stream.load_state_dict(run.put_back)
            self._iterator = None

    def _train_until_stopped(self, run: _FitRun, bar: Any, callback: Callable[[int, StepResult], None] | None) -> None:
        """Steps until `max_steps`, `max_hours` (on any rank) or the end of the stream; validates,
        logs and saves on schedule, except at the last step (see `_finish_fit`)."""
        config = self.config
        while config.max_steps is None or self.step < config.max_steps:
            out_of_time = config.max_hours is not None and time.monotonic() - run.started > config.max_hours * 3600
            interrupted = run.signals is not None and run.signals.received is not None
            if self._agree(out_of_time or interrupted):
                run.interrupted = self._agree(interrupted)  # on any rank: all save and stop together
                break
            before = self.stream.state_dict() if hasattr(self.stream, "state_dict") else None
            assert self._iterator is not None  # made in fit()
            batch = next(self._iterator, None)
            if self._agree(batch is None):  # a rank's stream has ended: all stop together
                if batch is not None:  # taken from this rank's stream but not trained: put it back
                    run.put_back = before
                break
            assert batch is not None  # every rank has one (agreed above)
            result = self.train_step(batch)
            run.interval.add(result)
            if callback is not None:
                callback(self.step, result)
            bar.update(1)
            if self.step % 10 == 0 or self.step == 1:
                bar.set_postfix(
                    tok_s=f"{run.interval.words / max(run.interval.seconds(), 1e-9):.0f}",
                    ppl=f"{run.interval.perplexity():.1f}",
                    refresh=False,
                )
            if config.max_steps is not None and self.step >= config.max_steps:
                break  # the last step is validated, logged and saved by _finish_fit
            self._validate_log_save_on_schedule(run)
            if self.early_stopping.is_out_of_patience(config.patience):
                logger.info(
                    "early stopping at step %d: no better validation since step %d",
                    self.step,
                    self.early_stopping.best_step,
                )
                break

    def _validate_log_save_on_schedule(self, run: _FitRun) -> None:
        """Validation every `validate_every` steps, a log row every `log_every` steps (and with
        each validation), checkpoint and model folder every `checkpoint_every` steps."""
        config = self.config
        validate = config.validate_every and self.step % config.validate_every == 0
        valid = self.validate() if validate else None
        if valid is not None:
            self._record_validation(run, valid)
        if valid is not None or (config.log_every and self.step % config.log_every == 0):
            self._log_row(run.interval, valid, run.started)
            run.interval = _LogInterval()
        if config.checkpoint_every and self.step % config.checkpoint_every == 0:
            self.save(run.started)
            run.saved_at = self.step

    def _validate_before_training(self, run: _FitRun) -> None:
        """Early stopping's first reference: the model as it starts (so that a run that never
        improves on it keeps it), logged as a row without train_ppl and written as the model
        folder."""
        valid = self.validate()
        assert valid is not None  # Trainer refuses patience without validation sentences
        self._record_validation(run, valid)
        self._log_row(run.interval, valid, run.started)

    def _record_validation(self, run: _FitRun, valid: Perplexity) -> None:
        """Note a validation; with early stopping, write the model folder when it is the best so far."""
        run.last_valid, run.validated_at = valid, self.step
        if self.plateau is not None:
            self.plateau.step(valid.average)
        if self.config.patience is not None and self.early_stopping.update(self.step, valid.average):
            self.save_model_folder()

    def _finish_fit(self, run: _FitRun) -> dict[str, Any]:
        """Validate (unless a signal stopped the run: it saves at once), log and save the last
        step, unless already done; return `fit`'s summary."""
        valid = self.validate() if run.validated_at != self.step and not run.interrupted else None
        if valid is not None:
            self._record_validation(run, valid)
        if run.interval.steps or valid is not None:
            self._log_row(run.interval, valid, run.started)
        if run.saved_at != self.step:
            self.save(run.started)
        elapsed = self.elapsed_before + time.monotonic() - run.started
        summary: dict[str, Any] = {"step": self.step, "tokens": self.tokens_seen, "elapsed_s": round(elapsed, 1)}
        if run.signals is not None:
            summary["interrupted"] = run.interrupted
        if run.last_valid is not None:
            summary.update(
                valid_forward_ppl=run.last_valid.forward,
                valid_backward_ppl=run.last_valid.backward,
                valid_ppl=run.last_valid.average,
            )
        if self.config.patience is not None:
            stopping = self.early_stopping
            stopped = stopping.is_out_of_patience(self.config.patience)
            summary.update(best_valid_ppl=stopping.best, best_step=stopping.best_step, stopped_early=stopped)
        return summary

    def _agree(self, flag: bool) -> bool:
        """True on every rank if `flag` is True on any rank (all ranks stop together)."""
        if not self.distributed:
            return flag
        t = self._all_reduce(torch.tensor([1.0 if flag else 0.0], dtype=torch.float64), dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def _all_reduce(self, t: torch.Tensor, op: Any = None) -> torch.Tensor:
        """All-reduce a small CPU tensor (sum by default); moved to the GPU for nccl."""
        if not self.distributed:
            return t
        on_device = t.to(self.device) if dist.get_backend() == "nccl" else t
        dist.all_reduce(on_device, op=dist.ReduceOp.SUM if op is None else op)
        return on_device.cpu()

    def _log_row(self, interval: _LogInterval, valid: Perplexity | None, started: float) -> None:
        sums = self._all_reduce(
            torch.tensor(
                [interval.forward_nll, interval.backward_nll, interval.tokens, interval.words], dtype=torch.float64
            )
        )
        train_ppl = math.exp((sums[0] + sums[1]).item() / (2 * sums[2].item())) if sums[2] > 0 else None
        row = {
            "step": self.step,
            "tokens": self.tokens_seen,
            "train_ppl": train_ppl,
            "valid_forward_ppl": valid.forward if valid else None,
            "valid_backward_ppl": valid.backward if valid else None,
            "valid_ppl": valid.average if valid else None,
            "elapsed_s": round(self.elapsed_before + time.monotonic() - started, 2),
            "lr": self.optimizer.param_groups[0]["lr"],
        }
        if not self.is_main:
            return
        logger.info("%s", log_line(row, words_per_s=sums[3].item() / max(interval.seconds(), 1e-9)))
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            log = self.out_dir / LOG_NAME
            with full_disk_as_one_error(log), open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")

    # ------------------------------------------------------------------ checkpoints
    def save(self, started: float | None = None) -> None:
        """Write `checkpoint.pt` and (without early stopping, which writes the model folder
        only at a best validation) the model folder into `out_dir` (rank 0; collective)."""
        elapsed = self.elapsed_before + (time.monotonic() - started if started is not None else 0.0)
        state = self.checkpoint_state(elapsed)
        if self.is_main and self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            atomic_torch_save(state, self.out_dir / CHECKPOINT_NAME)
            logger.info("saved checkpoint at step %d to %s", self.step, self.out_dir)
        if self.config.patience is None:
            self.save_model_folder()

    def save_model_folder(self) -> None:
        """Write the model folder (`save_language_model`) into `out_dir` (rank 0)."""
        if self.is_main and self.out_dir is not None:
            # Building the Elmo to save draws random initial weights: keep that draw out of
            # the training RNG, or a run that saved here would differ from one resumed here.
            with torch.random.fork_rng(devices=[]):
                save_language_model(self.lm, self.vocab, self.out_dir, elmo_settings=self.elmo_settings)
            logger.info("saved the model folder at step %d to %s", self.step, self.out_dir)

    def checkpoint_state(self, elapsed_s: float = 0.0) -> dict[str, Any]:
        """Everything needed to resume exactly (collective under DDP: gathers per-rank state)."""
        stream_state = self.stream.state_dict() if hasattr(self.stream, "state_dict") else None
        rank_state = {"stream": stream_state, "rng": get_rng_state(self.device)}
        if self.distributed:
            gathered: list[Any] = [None] * self.world_size
            dist.all_gather_object(gathered, rank_state)
        else:
            gathered = [rank_state]
        return {
            "format": CHECKPOINT_FORMAT,
            "version": 1,
            "step": self.step,
            "tokens_seen": self.tokens_seen,
            "elapsed_s": elapsed_s,
            "world_size": self.world_size,
            "options": self.lm.options.to_dict(),
            "head_config": self.lm.head_config(),
            "dropout": self.lm.dropout,
            "vocab": list(self.vocab.tokens),
            "vocab_counts": self.vocab.counts,
            "config": asdict(self.config),
            "elmo_settings": self.elmo_settings,
            "model": {k: v.detach().cpu() for k, v in self.lm.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "ranks": gathered,
            "early_stopping": asdict(self.early_stopping),
            "lr_plateau": self.plateau.state_dict() if self.plateau is not None else None,
            "extra": self.checkpoint_extra,
        }

    def _check_no_other_run(self) -> None:
        """Refuse to start a new run (no checkpoint loaded, no earlier `fit`) in an `out_dir` that
        holds a run's files, on every rank when rank 0 refuses: a run never overwrites another
        run's work.

        Raises:
            ElmoError: one line naming `out_dir`, the files there, `load_checkpoint` and a fresh folder.
        """
        if self._out_dir_is_ours or self.out_dir is None:
            return
        checkpoint = self.out_dir / CHECKPOINT_NAME
        fresh = "a fresh out_dir (a new or empty folder)."
        if checkpoint.is_file():
            fix = f"Continue that run with trainer.load_checkpoint({str(checkpoint)!r}) before fit(), or give {fresh}"
        else:
            fix = f"Give {fresh}"
        refusal: ElmoError | None = None
        if self.is_main:
            try:
                check_output_is_new("out_dir", self.out_dir, fix, patterns=TRAINING_FILES, what="another run's files")
            except ElmoError as err:
                refusal = err
        if self._agree(refusal is not None):  # every rank stops with rank 0 (alone, it would leave them waiting)
            raise refusal or ElmoError(f"rank 0 refused out_dir {self.out_dir}: it holds another run's files. {fix}")
        self._out_dir_is_ours = True

    def load_checkpoint(self, checkpoint: str | Path | dict[str, Any]) -> None:
        """Restore a checkpoint into this trainer (built with the checkpoint's model and vocab).

        Raises:
            ValueError: if the checkpoint is not ours, or its vocabulary, world size or
                model shapes differ from this trainer's.
        """
        state = load_checkpoint_file(checkpoint) if not isinstance(checkpoint, dict) else checkpoint
        if state["vocab"] != self.vocab.tokens:
            raise ValueError(
                "the checkpoint's vocabulary differs from this trainer's; build the trainer "
                "from the checkpoint (lm_from_checkpoint)."
            )
        if state["world_size"] != self.world_size:
            raise ValueError(
                f"the checkpoint was written by {state['world_size']} processes, this run has "
                f"{self.world_size}; an exact resume needs the same number (each rank's data position "
                "is saved separately)."
            )
        self.lm.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.plateau is not None and state.get("lr_plateau"):  # none in older checkpoints
            self.plateau.load_state_dict(state["lr_plateau"])
            self.plateau.threshold = self.config.halve_lr_below  # a resumed run may be given a new one
        if self.config.lr is not None:  # the checkpoint's rate, or a new one a resumed run was given
            for group in self.optimizer.param_groups:
                group["lr"] = self.config.lr
        if state["scaler"]:  # empty when the checkpoint's run had no fp16 scaler: a new one starts here
            self.scaler.load_state_dict(state["scaler"])
        self.step = state["step"]
        self.tokens_seen = state["tokens_seen"]
        self.elapsed_before = state["elapsed_s"]
        self.early_stopping = _EarlyStopping(**state.get("early_stopping", {}))  # none in older checkpoints
        mine = state["ranks"][self.rank]
        if mine["stream"] is not None and hasattr(self.stream, "load_state_dict"):
            self.stream.load_state_dict(mine["stream"])
        set_rng_state(mine["rng"], self.device)
        self._iterator = None
        self._out_dir_is_ours = True
        if self.is_main and self.out_dir is not None:
            truncate_log(self.out_dir / LOG_NAME, self.step)


def log_line(row: dict[str, Any], words_per_s: float | None = None) -> str:
    """A `train_log.jsonl` row as one line for people (the file keeps every digit):

        step N  loss L  ppl P  valid ppl V  lr R  words/s W  elapsed H:MM:SS

    `loss` is the mean of both directions' (the log of `ppl`); what a row lacks (no
    training steps since the last row, no validation) is left out.
    """
    parts = [f"step {row['step']}"]
    if row.get("train_ppl") is not None:
        parts += [f"loss {math.log(row['train_ppl']):.3f}", f"ppl {row['train_ppl']:.1f}"]
    if row.get("valid_ppl") is not None:
        parts.append(f"valid ppl {row['valid_ppl']:.1f}")
    parts.append(f"lr {row['lr']:.3g}")
    if words_per_s is not None and row.get("train_ppl") is not None:
        parts.append(f"words/s {words_per_s:,.0f}")
    seconds = int(row["elapsed_s"])
    parts.append(f"elapsed {seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}")
    return "  ".join(parts)


def _limit_epochs(stream: Iterable[Batch], max_epochs: int) -> None:
    """Make `stream` end after `max_epochs` passes over its files (`TrainingStream.epochs`)."""
    limited = getattr(stream, "stream", stream)  # a PrefetchingStream's TrainingStream
    if not hasattr(limited, "epochs"):
        raise ValueError(
            f"max_epochs needs a TrainingStream (or a PrefetchingStream of one), which counts its "
            f"passes; got {type(stream).__name__}. Stop it with max_steps or max_hours instead."
        )
    limited.epochs = max_epochs


def config_from_checkpoint(state: dict[str, Any], **overrides: Any) -> TrainConfig:
    """The checkpoint's `TrainConfig`, with `overrides` (e.g. a new max_steps)."""
    names = {f.name for f in fields(TrainConfig)}
    return TrainConfig(**{**{k: v for k, v in state["config"].items() if k in names}, **overrides})


class _LogInterval:
    """Running sums since the last log row (this rank)."""

    def __init__(self) -> None:
        self.forward_nll = self.backward_nll = 0.0
        self.tokens = self.words = self.steps = 0
        self.started = time.monotonic()

    def add(self, r: StepResult) -> None:
        self.forward_nll += r.forward_loss * r.tokens
        self.backward_nll += r.backward_loss * r.tokens
        self.tokens += r.tokens
        self.words += r.words
        self.steps += 1

    def seconds(self) -> float:
        return time.monotonic() - self.started

    def perplexity(self) -> float:
        if not self.tokens:
            return math.nan
        return math.exp(min((self.forward_nll + self.backward_nll) / (2 * self.tokens), 700.0))


@dataclass
class _EarlyStopping:
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


@dataclass
class _FitRun:
    """Where one `Trainer.fit` call stands: its start time, the running log interval, the
    last validation, and the steps last validated and saved at (-1: not yet)."""

    started: float
    interval: _LogInterval = field(default_factory=_LogInterval)
    last_valid: Perplexity | None = None
    validated_at: int = -1
    saved_at: int = -1
    put_back: dict[str, Any] | None = None  # the stream's position before a batch taken but not trained
    signals: StopSignals | None = None  # with stop_on_signals: the signals that stop the run
    interrupted: bool = False  # a signal stopped the run (on any rank)


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


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
