"""The training loop: the step, validation, and when to log and save.

One step, on every rank r of W (W = 1 without torchrun):

    batch_r  = next(stream_r)                       disjoint lines of the data per rank
    n_r      = predictions per direction in batch_r,  N = all_reduce_sum(n_r)
    loss_r   = (fwd_mean_r + bwd_mean_r) * n_r / (2N) * W
    backward through DistributedDataParallel       grads averaged over ranks ->
                                                    grad of the mean loss over all N
    clip_grad_norm_(clip_norm), then optimizer.step()

So a W-process step equals one process on the union of the W batches (up to float
summation order). bilm-tf clipped the gradient of `unroll_steps` (20) x its mean loss at
`all_clip_norm_val` = 10: the same as clipping our mean-loss gradient at 0.5.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ...files.atomic_files import full_disk_as_one_error
from ...runtime.memory import release_free_memory
from ..console import progress_bar
from .checkpoint import CHECKPOINT_NAME, atomic_torch_save, checkpoint_state, load_checkpoint_file, restore_checkpoint
from .config import TrainConfig
from .data import Batch
from .early_stopping import EarlyStopping
from .interrupt import StopSignals
from .model import BiLMLanguageModel, save_language_model
from .optimizer import make_optimizer, make_plateau_scheduler
from .perplexity import Perplexity, autocast_context, check_precision, evaluate
from .rng import seed_everything
from .run_folder import check_out_dir_is_new
from .train_log import LOG_NAME, LogInterval, log_line, truncate_log
from .vocab import Vocabulary

__all__ = ["Trainer"]

RELEASE_EVERY = 25
"""Training steps between two `release_free_memory()` calls (glibc's `malloc_trim`)."""

logger = logging.getLogger(__name__)


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

    Uses `torch.distributed` when a process group is initialised (`init_distributed`).

    Args:
        lm: The model, moved to `device`. Build it after seeding, so every rank starts
            from the same weights.
        vocab: Its softmax vocabulary, saved with the model folder.
        stream: This rank's batches. A `TrainingStream` or `PrefetchingStream` resumes
            exactly. A checkpoint cannot restore the position of another iterable of `Batch`.
        config: The `TrainConfig`.
        valid_sentences: Held-out tokenised sentences. Each rank scores its share.
        out_dir: Where rank 0 writes checkpoint, model folder and log. None: nowhere.
        device: This rank's torch device.
        elmo_settings: `Elmo` settings for the model folder's config.json.
        checkpoint_extra: More to keep in the checkpoint (the CLI's data settings).
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
        self.early_stopping = EarlyStopping()
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
        """Perplexity on the validation sentences. Each rank scores every W-th, then they are summed."""
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
        """Train until a stop condition of the `TrainConfig`, or the end of the stream.

        Rank 0 writes checkpoints, the model folder and log rows as configured. The last
        step is always validated, logged and saved. Log rows go to `logging`, through tqdm
        while the bar is shown.

        Args:
            callback: Called as `callback(step, result)` after every step.
            stop_on_signals: On SIGINT (Ctrl-C) or SIGTERM, stop at the next step and save
                a checkpoint (`interrupt.StopSignals`). A second signal stops at once.

        Returns:
            `step`, `tokens`, `elapsed_s` and the last `valid_*ppl`. With `patience`, also
            `best_valid_ppl`, `best_step` and `stopped_early`. With `stop_on_signals`,
            `interrupted`.
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
        close = getattr(self._iterator, "close", None)
        if close is not None:  # a generator: the stream keeps its position
            close()  # (and a prefetching worker stops)
            self._iterator = None
        if run.put_back is not None:  # only taken from a stream with state_dict()
            stream: Any = self.stream
            stream.load_state_dict(run.put_back)
            self._iterator = None

    def _train_until_stopped(self, run: _FitRun, bar: Any, callback: Callable[[int, StepResult], None] | None) -> None:
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
        config = self.config
        validate = config.validate_every and self.step % config.validate_every == 0
        valid = self.validate() if validate else None
        if valid is not None:
            self._record_validation(run, valid)
        if valid is not None or (config.log_every and self.step % config.log_every == 0):
            self._log_row(run.interval, valid, run.started)
            run.interval = LogInterval()
        if config.checkpoint_every and self.step % config.checkpoint_every == 0:
            self.save(run.started)
            run.saved_at = self.step

    def _validate_before_training(self, run: _FitRun) -> None:
        """Early stopping's first reference: a run that never improves keeps the model it started with."""
        valid = self.validate()
        assert valid is not None  # Trainer refuses patience without validation sentences
        self._record_validation(run, valid)
        self._log_row(run.interval, valid, run.started)

    def _record_validation(self, run: _FitRun, valid: Perplexity) -> None:
        run.last_valid, run.validated_at = valid, self.step
        if self.plateau is not None:
            self.plateau.step(valid.average)
        if self.config.patience is not None and self.early_stopping.update(self.step, valid.average):
            self.save_model_folder()

    def _finish_fit(self, run: _FitRun) -> dict[str, Any]:
        # A signal stopped the run: save at once, without validating.
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
        """True on every rank if `flag` is True on any rank, so all ranks stop together."""
        if not self.distributed:
            return flag
        t = self._all_reduce(torch.tensor([1.0 if flag else 0.0], dtype=torch.float64), dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def _all_reduce(self, t: torch.Tensor, op: Any = None) -> torch.Tensor:
        if not self.distributed:
            return t
        on_device = t.to(self.device) if dist.get_backend() == "nccl" else t
        dist.all_reduce(on_device, op=dist.ReduceOp.SUM if op is None else op)
        return on_device.cpu()

    def _log_row(self, interval: LogInterval, valid: Perplexity | None, started: float) -> None:
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
        """Write `checkpoint.pt` and the model folder into `out_dir` (rank 0, collective).

        With early stopping, the model folder is written only at a best validation.
        """
        elapsed = self.elapsed_before + (time.monotonic() - started if started is not None else 0.0)
        state = checkpoint_state(self, elapsed)
        if self.is_main and self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            atomic_torch_save(state, self.out_dir / CHECKPOINT_NAME)
            logger.info("saved checkpoint at step %d to %s", self.step, self.out_dir)
        if self.config.patience is None:
            self.save_model_folder()

    def save_model_folder(self) -> None:
        if self.is_main and self.out_dir is not None:
            # Building the Elmo to save draws random initial weights: keep that draw out of
            # the training RNG, or a run that saved here would differ from one resumed here.
            with torch.random.fork_rng(devices=[]):
                save_language_model(self.lm, self.vocab, self.out_dir, elmo_settings=self.elmo_settings)
            logger.info("saved the model folder at step %d to %s", self.step, self.out_dir)

    def _check_no_other_run(self) -> None:
        if self._out_dir_is_ours or self.out_dir is None:
            return
        check_out_dir_is_new(self.out_dir, self.is_main, self._agree)
        self._out_dir_is_ours = True

    def load_checkpoint(self, checkpoint: str | Path | dict[str, Any]) -> None:
        """Restore a checkpoint into this trainer, built with the checkpoint's model and vocab.

        Raises:
            ValueError: If it is not a checkpoint, or its vocabulary, world size or model
                shapes differ from this trainer's.
        """
        state = load_checkpoint_file(checkpoint) if not isinstance(checkpoint, dict) else checkpoint
        restore_checkpoint(self, state)
        self._iterator = None
        self._out_dir_is_ours = True
        if self.is_main and self.out_dir is not None:
            truncate_log(self.out_dir / LOG_NAME, self.step)


def _limit_epochs(stream: Iterable[Batch], max_epochs: int) -> None:
    limited = getattr(stream, "stream", stream)  # a PrefetchingStream's TrainingStream
    if not hasattr(limited, "epochs"):
        raise ValueError(
            f"max_epochs needs a TrainingStream (or a PrefetchingStream of one), which counts its "
            f"passes; got {type(stream).__name__}. Stop it with max_steps or max_hours instead."
        )
    limited.epochs = max_epochs


@dataclass
class _FitRun:
    """Where one `Trainer.fit` call stands. Steps validated and saved at are -1 until then."""

    started: float
    interval: LogInterval = field(default_factory=LogInterval)
    last_valid: Perplexity | None = None
    validated_at: int = -1
    saved_at: int = -1
    put_back: dict[str, Any] | None = None  # the stream's position before a batch taken but not trained
    signals: StopSignals | None = None  # with stop_on_signals: the signals that stop the run
    interrupted: bool = False  # a signal stopped the run (on any rank)
