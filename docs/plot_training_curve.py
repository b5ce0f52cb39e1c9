"""Plot validation perplexity against tokens seen from `elmo train` runs' train_log.jsonl files.

    python docs/plot_training_curve.py docs/default_model_valid_ppl.png RUN_DIR/train_log.jsonl [MORE_LOGS ...]

Several logs are one model's stages in order (a run, then a run started from its weights):
each later log's tokens are counted on from where the previous one ended, and a dotted line
marks where each stage starts. A change of learning rate within a log (`elmo train --resume
... --lr`) is marked too. Needs matplotlib (not a dependency of the package).
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_stages(log_paths: list[str]) -> list[dict]:
    """The rows of every log, with `tokens` counted on across stages and a `stage` index."""
    rows: list[dict] = []
    offset = 0
    for stage, path in enumerate(log_paths):
        with open(path, encoding="utf-8") as f:
            stage_rows = [json.loads(line) for line in f if line.strip()]
        rows += [{**r, "tokens": r["tokens"] + offset, "stage": stage} for r in stage_rows]
        offset = rows[-1]["tokens"] if rows else offset
    return rows


def main(png_path: str, *log_paths: str) -> None:
    if not log_paths:
        sys.exit("usage: plot_training_curve.py OUT.png TRAIN_LOG.jsonl [MORE_LOGS ...]")
    rows = read_stages(list(log_paths))
    valid = [r for r in rows if r.get("valid_ppl") is not None]
    tokens = [r["tokens"] / 1e6 for r in valid]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(tokens, [r["valid_forward_ppl"] for r in valid], marker=".", label="forward")
    ax.plot(tokens, [r["valid_backward_ppl"] for r in valid], marker=".", label="backward")
    ax.plot(tokens, [r["valid_ppl"] for r in valid], marker="o", label="average")
    ax.plot([r["tokens"] / 1e6 for r in rows], [r["train_ppl"] for r in rows], alpha=0.3, label="train (running)")
    for before, after in zip(rows, rows[1:]):
        if after["stage"] != before["stage"]:
            ax.axvline(before["tokens"] / 1e6, color="grey", linestyle=":")
        elif after.get("lr") != before.get("lr"):
            ax.axvline(before["tokens"] / 1e6, color="grey", linestyle="--")
            ax.text(before["tokens"] / 1e6, ax.get_ylim()[1], f" lr {after['lr']:g}", va="top", fontsize=8)
    ax.set_xlabel("training tokens seen (millions)")
    ax.set_ylabel("perplexity")
    ax.set_yscale("log")
    ax.set_title("Default model: enwiki2015 validation perplexity")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)


if __name__ == "__main__":
    main(*sys.argv[1:])
