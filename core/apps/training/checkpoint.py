"""`Trainer` checkpoints: what they hold, written and read back, for an exact resume.

A checkpoint is a `torch.save`d dict of tensors and plain values, so that
`torch.load(..., weights_only=True)` reads it:

    format, version, step, tokens_seen, elapsed_s, world_size
    options, head_config, dropout, vocab, vocab_counts      -> lm_from_checkpoint()
    config, elmo_settings, extra                            the run's settings
    model, optimizer, scaler                                state dicts
    ranks[r] = {"stream": data position, "rng": Python / NumPy / torch (/ CUDA) states}
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ...files.atomic_files import atomic_write
from ...files.text_files import check_input_file
from ...model.errors import ElmoError
from ...model.options import BiLMOptions
from .early_stopping import EarlyStopping
from .model import BiLMLanguageModel
from .rng import get_rng_state, set_rng_state
from .vocab import Vocabulary

if TYPE_CHECKING:
    from .trainer import Trainer

CHECKPOINT_FORMAT = "elmo-bilm-training-checkpoint"
CHECKPOINT_NAME = "checkpoint.pt"


def load_checkpoint_file(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by `Trainer.save` (tensors on the CPU).

    Raises:
        ElmoError: One line naming the file and the fix, if it is missing, empty, damaged
            or not a training checkpoint.
    """
    path = check_input_file(path, "checkpoint", streams="a checkpoint is read as a file")
    if path.stat().st_size == 0:
        raise ElmoError(f"checkpoint {path} is empty (0 bytes); resume from another checkpoint, or start again.")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises RuntimeError, EOFError, UnpicklingError, ... (long)
        first = str(err).strip().splitlines()[0][:160] if str(err).strip() else ""
        raise ElmoError(
            f"checkpoint {path} cannot be read by torch.load ({type(err).__name__}{': ' + first if first else ''}): "
            "it is cut short or damaged (a full disk, an interrupted copy) or not a checkpoint. Resume from "
            "another checkpoint, or start again."
        ) from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ElmoError(f"{path} is not an elmo-bilm training checkpoint (written by Trainer.save).")
    return state


def lm_from_checkpoint(state: dict[str, Any], *, dropout: float | None = None) -> tuple[BiLMLanguageModel, Vocabulary]:
    """A model with random weights, and a vocabulary, shaped as in `state`."""
    head = state["head_config"]
    lm = BiLMLanguageModel(
        BiLMOptions.from_dict(state["options"]),
        head["n_classes"],
        dropout=state["dropout"] if dropout is None else dropout,
        cutoffs=head["cutoffs"],
        div_value=head["div_value"],
    )
    return lm, Vocabulary(state["vocab"], state["vocab_counts"])


def checkpoint_state(trainer: Trainer, elapsed_s: float = 0.0) -> dict[str, Any]:
    """Everything needed to resume `trainer` exactly. Collective under DDP."""
    stream_state = trainer.stream.state_dict() if hasattr(trainer.stream, "state_dict") else None
    rank_state = {"stream": stream_state, "rng": get_rng_state(trainer.device)}
    if trainer.distributed:
        gathered: list[Any] = [None] * trainer.world_size
        dist.all_gather_object(gathered, rank_state)
    else:
        gathered = [rank_state]
    return {
        "format": CHECKPOINT_FORMAT,
        "version": 1,
        "step": trainer.step,
        "tokens_seen": trainer.tokens_seen,
        "elapsed_s": elapsed_s,
        "world_size": trainer.world_size,
        "options": trainer.lm.options.to_dict(),
        "head_config": trainer.lm.head_config(),
        "dropout": trainer.lm.dropout,
        "vocab": list(trainer.vocab.tokens),
        "vocab_counts": trainer.vocab.counts,
        "config": asdict(trainer.config),
        "elmo_settings": trainer.elmo_settings,
        "model": {k: v.detach().cpu() for k, v in trainer.lm.state_dict().items()},
        "optimizer": trainer.optimizer.state_dict(),
        "scaler": trainer.scaler.state_dict(),
        "ranks": gathered,
        "early_stopping": asdict(trainer.early_stopping),
        "lr_plateau": trainer.plateau.state_dict() if trainer.plateau is not None else None,
        "extra": trainer.checkpoint_extra,
    }


def restore_checkpoint(trainer: Trainer, state: dict[str, Any]) -> None:
    """Restore `state` into `trainer`, built with the checkpoint's model and vocab.

    Raises:
        ValueError: If the vocabulary, world size or model shapes differ from the trainer's.
    """
    if state["vocab"] != trainer.vocab.tokens:
        raise ValueError(
            "the checkpoint's vocabulary differs from this trainer's; build the trainer "
            "from the checkpoint (lm_from_checkpoint)."
        )
    if state["world_size"] != trainer.world_size:
        raise ValueError(
            f"the checkpoint was written by {state['world_size']} processes, this run has "
            f"{trainer.world_size}; an exact resume needs the same number (each rank's data position "
            "is saved separately)."
        )
    trainer.lm.load_state_dict(state["model"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    if trainer.plateau is not None and state.get("lr_plateau"):  # none in older checkpoints
        trainer.plateau.load_state_dict(state["lr_plateau"])
        trainer.plateau.threshold = trainer.config.halve_lr_below  # a resumed run may be given a new one
    if trainer.config.lr is not None:  # the checkpoint's rate, or a new one a resumed run was given
        for group in trainer.optimizer.param_groups:
            group["lr"] = trainer.config.lr
    if state["scaler"]:  # empty when the checkpoint's run had no fp16 scaler: a new one starts here
        trainer.scaler.load_state_dict(state["scaler"])
    trainer.step = state["step"]
    trainer.tokens_seen = state["tokens_seen"]
    trainer.elapsed_before = state["elapsed_s"]
    trainer.early_stopping = EarlyStopping(**state.get("early_stopping", {}))  # none in older checkpoints
    mine = state["ranks"][trainer.rank]
    if mine["stream"] is not None and hasattr(trainer.stream, "load_state_dict"):
        trainer.stream.load_state_dict(mine["stream"])
    set_rng_state(mine["rng"], trainer.device)


def atomic_torch_save(obj: Any, path: Path) -> None:
    """`torch.save(obj, path)`, the file appearing only when complete."""

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: a full disk surfaces as an OSError (ENOSPC)
            torch.save(obj, f)

    atomic_write(path, save)
