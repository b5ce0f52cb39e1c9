"""What `elmo train` and `elmo perplexity` do, as functions callable without a shell.

The typer layer (`elmo_core.apps.cli`) only parses arguments and prints.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ...files.model_folder import load_model_folder, read_model_config, resolve_model_source
from ...files.options_file import read_options
from ...model.errors import ElmoError
from ...runtime.distributed import init_distributed
from .checkpoint import lm_from_checkpoint, load_checkpoint_file
from .config import TrainConfig, config_from_checkpoint
from .corpus import DEFAULT_SPLITTER, Splitter, expand_files, get_sentence_splitter, iter_sentences
from .data import PrefetchingStream, TrainingStream
from .model import BiLMLanguageModel, has_lm_head, load_language_model
from .perplexity import Perplexity, evaluate
from .rng import seed_everything
from .run_folder import own_out_folder
from .settings import TrainingSettings, halving_without_valid, no_validation_sentences, patience_without_valid
from .trainer import Trainer
from .vocab import Vocabulary, build_vocabulary

__all__ = ["run_perplexity", "run_training"]

logger = logging.getLogger(__name__)


def _shared_vocabulary(make: Any, distributed: bool) -> Vocabulary:
    if not distributed:
        return make()
    box: list[Any] = [None]
    if dist.get_rank() == 0:
        vocab = make()
        box = [(vocab.tokens, vocab.counts)]
    dist.broadcast_object_list(box, src=0)
    return Vocabulary(*box[0])


def run_training(
    settings: TrainingSettings | None = None, /, *, stop_on_signals: bool = False, **fields: Any
) -> dict[str, Any]:
    """Train, or continue training, a biLM language model. See `elmo train --help`.

    Args:
        settings: The run's `TrainingSettings`.
        stop_on_signals: On Ctrl-C or SIGTERM, stop at the next step and save a
            checkpoint (`Trainer.fit`), as `elmo train` does.
        **fields: `TrainingSettings` fields: the settings when `settings` is None
            (`run_training(train=[...], out="run", options="options.json")`), else changes to it.

    Returns:
        `Trainer.fit`'s summary.

    Raises:
        ElmoError: For missing or conflicting arguments.
        TypeError: For a keyword that is not a `TrainingSettings` field.
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
        lock = own_out_folder(Path(settings.out), settings.resume, rank, distributed)
        if settings.resume is not None:
            start = _start_from_checkpoint(settings.resume, settings.train, settings.resume_settings())
            start.data["valid"] = start.data.get("valid") if settings.valid is None else str(settings.valid)
            if start.config.patience is not None and start.data["valid"] is None:
                raise ElmoError(patience_without_valid())
            if start.config.halve_lr_below is not None and start.data["valid"] is None:
                raise ElmoError(halving_without_valid())
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


@dataclass
class _Start:
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
    # A model folder without a softmax gets a new vocabulary and softmax.
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
        raise ElmoError(no_validation_sentences(valid))
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
        files: Raw text, one paragraph per line, split by `splitter`. With `pretokenized`,
            one tokenised sentence per line. `-` is standard input.
        model: A model folder with a language-model head. None: the default model.
        progress: Show a progress bar per file on stderr, in tokens.

    Raises:
        WeightFileError: If there is no such model, or it has no language-model head.
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
