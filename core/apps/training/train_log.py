"""`train_log.jsonl`: the rows a run logs, the line shown for each, and the sums behind them.

One JSON object per line:

    {"step": 500, "tokens": 1024000, "train_ppl": 412.3, "valid_forward_ppl": 390.1,
     "valid_backward_ppl": 401.7, "valid_ppl": 395.9, "elapsed_s": 812.4, "lr": 0.001}

`valid_*` are null on rows without a validation. `valid_ppl` is `Perplexity.average`.
`tokens` counts words over all ranks.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...files.atomic_files import atomic_write

if TYPE_CHECKING:
    from .trainer import StepResult

LOG_NAME = "train_log.jsonl"


def log_line(row: dict[str, Any], words_per_s: float | None = None) -> str:
    """A `train_log.jsonl` row as one line for people. What a row lacks is left out.

    `step N  loss L  ppl P  valid ppl V  lr R  words/s W  elapsed H:MM:SS`
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


class LogInterval:
    """Running sums on this rank since the last log row."""

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


def truncate_log(path: Path, step: int) -> None:
    """Drop the rows after `step`, written by an interrupted run after its checkpoint."""
    if not path.is_file():
        return
    rows = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    kept = [line for line in rows if json.loads(line)["step"] <= step]
    if len(kept) != len(rows):
        atomic_write(path, lambda tmp: tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8"))
