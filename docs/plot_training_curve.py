"""Plot validation perplexity against tokens seen from an `elmo train` run's train_log.jsonl.

    python docs/plot_training_curve.py RUN_DIR/train_log.jsonl docs/default_model_valid_ppl.png

Needs matplotlib (not a dependency of the package).
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(log_path: str, png_path: str) -> None:
    rows = [json.loads(line) for line in open(log_path, encoding="utf-8")]
    valid = [r for r in rows if r.get("valid_ppl") is not None]
    tokens = [r["tokens"] / 1e6 for r in valid]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(tokens, [r["valid_forward_ppl"] for r in valid], marker="o", label="forward")
    ax.plot(tokens, [r["valid_backward_ppl"] for r in valid], marker="o", label="backward")
    ax.plot(tokens, [r["valid_ppl"] for r in valid], marker="o", label="average")
    ax.plot([r["tokens"] / 1e6 for r in rows], [r["train_ppl"] for r in rows], alpha=0.4, label="train (running)")
    ax.set_xlabel("training tokens seen (millions)")
    ax.set_ylabel("perplexity")
    ax.set_yscale("log")
    ax.set_title("Default model: enwiki2015 validation perplexity")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)


if __name__ == "__main__":
    main(*sys.argv[1:3])
