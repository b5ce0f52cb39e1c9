"""Checkpoint files of `Trainer`: what they hold, and the RNG and file helpers around them.

A checkpoint is a `torch.save`d dict of tensors and plain Python values only, so that
`torch.load(..., weights_only=True)` reads it (no pickled objects):

    format, version, step, tokens_seen, elapsed_s, world_size
    options, head_config, dropout, vocab, vocab_counts      -> lm_from_checkpoint()
    config, elmo_settings, extra                            the run's settings
    model, optimizer, scaler                                state dicts
    ranks[r] = {"stream": data position, "rng": Python / NumPy / torch (/ CUDA) states}
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...files.atomic_files import atomic_write
from ...files.text_files import check_input_file
from ...model.errors import ElmoError
from ...model.options import BiLMOptions
from .model import BiLMLanguageModel
from .vocab import Vocabulary

CHECKPOINT_FORMAT = "elmo-bilm-training-checkpoint"


def load_checkpoint_file(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by `Trainer.save` (tensors on the CPU).

    Raises:
        ElmoError: (a ValueError) if the file is missing, empty, cut short or damaged, or
            not a training checkpoint of this package: one line naming it and the fix.
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
    """A model (random weights; `load_checkpoint` fills them) and vocabulary shaped as in `state`."""
    head = state["head_config"]
    lm = BiLMLanguageModel(
        BiLMOptions.from_dict(state["options"]),
        head["n_classes"],
        dropout=state["dropout"] if dropout is None else dropout,
        cutoffs=head["cutoffs"],
        div_value=head["div_value"],
    )
    return lm, Vocabulary(state["vocab"], state["vocab_counts"])


def get_rng_state(device: torch.device) -> dict[str, Any]:
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": random.getstate(),
        # Plain lists, so that torch.load(weights_only=True) can read them back.
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": np_state["state"]["key"].tolist(),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": n["bit_generator"],
            "state": {"key": np.array(n["key"], dtype=np.uint32), "pos": n["pos"]},
            "has_gauss": n["has_gauss"],
            "gauss": n["gauss"],
        }
    )
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def atomic_torch_save(obj: Any, path: Path) -> None:
    """`torch.save(obj, path)`, the file appearing only when complete."""

    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: a full disk surfaces as an OSError (ENOSPC)
            torch.save(obj, f)

    atomic_write(path, save)


def truncate_log(path: Path, step: int) -> None:
    """Drop log rows after `step` (written by the interrupted run after its checkpoint)."""
    if not path.is_file():
        return
    rows = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    kept = [line for line in rows if json.loads(line)["step"] <= step]
    if len(kept) != len(rows):
        atomic_write(path, lambda tmp: tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8"))
