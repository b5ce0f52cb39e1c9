"""Linear probes: how much of a token label each biLM layer holds (Peters et al. 2018, 5.3).

For each layer k (layer 0 = the char CNN) and for the average of all layers, a softmax
regression is fitted on the frozen vectors of a training file's tokens and scored on an
evaluation file's:

    p(label | token) = softmax(W_k h_k + b_k)        h_k: [2 * projection_dim]

The paper found the first LSTM layer best for POS tags and the top layer best for word
senses. Labels come from one column of a CoNLL-format file: `column=1` is CoNLL-2003's POS
tag, `column=-1` its NER tag. The same seed, data and model give the same accuracies.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..files.atomic_files import atomic_path
from ..files.text_files import check_input_file, iter_conll_rows, iter_lines
from ..model.checks import check_setting
from ..model.errors import ElmoError, SettingError
from ..runtime.embedding import DEFAULT_BATCH_TOKENS, iter_embeddings
from .console import progress_bar

if TYPE_CHECKING:
    from ..model.elmo import Elmo


logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbeResult:
    """Accuracy of a linear probe on each representation.

    Attributes:
        names: "layer 0" (char CNN), "layer 1", ..., "average".
        accuracy: Fraction of evaluation tokens labelled right, one per name.
        correct: Tokens labelled right, one per name.
        num_tokens: Evaluation tokens. Labels never seen in training count as wrong.
        majority_accuracy: Accuracy of always answering the most frequent training label.
        labels: The training labels, in index order.
    """

    names: tuple[str, ...]
    accuracy: tuple[float, ...]
    correct: tuple[int, ...]
    num_tokens: int
    majority_accuracy: float
    labels: tuple[str, ...]


# ------------------------------------------------------------------ data
def read_conll_column(path: str | Path, column: int) -> tuple[list[list[str]], list[list[str]]]:
    """Sentences (first column) and their labels (`column`) from a CoNLL-format file.

    Args:
        path: One token per line, whitespace-separated columns, a blank line between
            sentences. `-DOCSTART-` lines are skipped.
        column: Index of the label column, Python style: 1 = the second, -1 = the last.

    Returns:
        (sentences, labels), both lists of lists of str, aligned token by token.

    Raises:
        ElmoError: if the file is missing, empty or not CoNLL, or its lines lack the column.
    """
    path = check_input_file(path, "CoNLL file")
    sentences: list[list[str]] = []
    labels: list[list[str]] = []
    words: list[str] = []
    tags: list[str] = []
    for number, fields in enumerate(iter_conll_rows(iter_lines(path), path), start=1):  # BOM and CRLF as LF
        if fields and fields[0].startswith("-DOCSTART-"):
            fields = []
        if not fields:
            if words:
                sentences.append(words)
                labels.append(tags)
                words, tags = [], []
            continue
        if not -len(fields) <= column < len(fields) or column == 0 or column == -len(fields):
            raise ElmoError(
                f"{path}, line {number}: --column {column} needs a label column after the token, "
                f"but the line has {len(fields)} column(s): {' '.join(fields)!r}. Use 1 for the second "
                "column, -1 for the last."
            )
        words.append(fields[0])
        tags.append(fields[column])
    if words:
        sentences.append(words)
        labels.append(tags)
    if not sentences:
        raise ElmoError(f"no tokens found in {path}; expected 'token ... label' lines.")
    return sentences, labels


def _features(elmo: Elmo, sentences: Sequence[Sequence[str]], batch_tokens: int, bar: Any) -> torch.Tensor:
    """Every layer's vector of every token, in file order: `[n_outputs, tokens, dim]` float32."""
    offsets = np.cumsum([0] + [len(s) for s in sentences])
    out = torch.empty(elmo.n_outputs, int(offsets[-1]), elmo.output_dim)
    for i, vectors in iter_embeddings(elmo, sentences, layers="all", batch_tokens=batch_tokens):
        out[:, offsets[i] : offsets[i + 1]] = torch.from_numpy(vectors)  # [layers, tokens, dim]
        bar.update(len(sentences[i]))
    return out


# ------------------------------------------------------------------ training
def _train_softmax_regression(
    x: torch.Tensor, y: torch.Tensor, num_labels: int, epochs: int, batch_size: int, lr: float, seed: int, bar: Any
) -> torch.nn.Linear:
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    probe = torch.nn.Linear(x.shape[1], num_labels)
    optimizer = torch.optim.Adam(probe.parameters(), lr=lr)
    # Standardise with the training statistics so one learning rate suits every layer.
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    probe.register_buffer("mean", mean)
    probe.register_buffer("std", std)
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), batch_size):
            index = order[start : start + batch_size]
            logits = probe((x[index] - mean) / std)  # [batch, labels]
            loss = torch.nn.functional.cross_entropy(logits, y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            bar.update(1)
    return probe


def _correct(probe: torch.nn.Linear, x: torch.Tensor, y: torch.Tensor) -> int:
    with torch.no_grad():
        predicted = probe((x - probe.get_buffer("mean")) / probe.get_buffer("std")).argmax(-1)
    return int((predicted == y).sum())


def _label_ids(train_tags: list[list[str]], eval_tags: list[list[str]]) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    train_labels = [t for tags in train_tags for t in tags]
    labels = sorted(set(train_labels))
    if len(labels) < 2:
        raise ElmoError(f"the training labels must have at least 2 values to probe; got {labels}. Check --column.")
    index = {label: i for i, label in enumerate(labels)}
    y_train = torch.tensor([index[t] for t in train_labels])
    y_eval = torch.tensor([index.get(t, -1) for tags in eval_tags for t in tags])  # -1: never right
    return labels, y_train, y_eval


def run_probe(
    elmo: Elmo,
    train: tuple[list[list[str]], list[list[str]]],
    evaluation: tuple[list[list[str]], list[list[str]]],
    *,
    epochs: int = 5,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = False,
) -> ProbeResult:
    """Train and score a linear probe on each biLM layer and on their average.

    Args:
        elmo: The (stateless) model whose frozen layers are probed.
        train: (sentences, labels) to fit the probes on, e.g. from `read_conll_column`.
        evaluation: (sentences, labels) to score them on. Tokens of a label not seen in
            training count as wrong.
        epochs: Passes over the training tokens. 5 is plenty on ~200k tokens, tiny data needs more.
        batch_size: Tokens per Adam step.
        lr: Adam's learning rate, on standardised features.
        seed: Seeds the probes' init and the token order.
        batch_tokens: Padded positions per biLM batch.
        progress: Show progress bars on stderr: the biLM's tokens, then the probes' steps.

    Returns:
        A `ProbeResult`.

    Raises:
        ElmoError: if the training labels have fewer than 2 values.
        SettingError: if `epochs`, `batch_size` or `lr` is not positive.
    """
    check_setting("epochs", epochs)
    check_setting("batch_size", batch_size, meaning="tokens per Adam step")
    if not lr > 0:
        raise SettingError(f"lr must be a positive learning rate; got {lr}.", "lr")
    labels, y_train, y_eval = _label_ids(train[1], evaluation[1])
    counts = np.bincount(y_train.numpy(), minlength=len(labels))
    majority = float((y_eval == int(counts.argmax())).float().mean())

    logger.info("computing biLM layers for %d + %d tokens", len(y_train), len(y_eval))
    with progress_bar(len(y_train) + len(y_eval), unit="tok", desc="biLM layers", show=progress) as bar:
        x_train = _features(elmo, train[0], batch_tokens, bar)  # [layers, train tokens, dim]
        x_eval = _features(elmo, evaluation[0], batch_tokens, bar)  # [layers, eval tokens, dim]
    representations = [(f"layer {k}", x_train[k], x_eval[k]) for k in range(elmo.n_outputs)]
    representations.append(("average", x_train.mean(0), x_eval.mean(0)))
    steps = len(representations) * epochs * -(-len(y_train) // batch_size)
    with progress_bar(steps, unit="step", desc="probes", show=progress) as bar:
        correct = [
            _correct(_train_softmax_regression(x, y_train, len(labels), epochs, batch_size, lr, seed, bar), x_e, y_eval)
            for _, x, x_e in representations
        ]
    accuracy = [n / len(y_eval) for n in correct]
    names = tuple(name for name, _, _ in representations)
    for name, value in zip(names, accuracy):
        logger.info("%s: accuracy %.4f", name, value)
    return ProbeResult(names, tuple(accuracy), tuple(correct), len(y_eval), majority, tuple(labels))


# ------------------------------------------------------------------ plot
def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend. Call it before a long probe to fail early.

    Raises:
        ElmoError: if matplotlib is not installed, saying how to install it.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ElmoError(
            "the probe's plot needs matplotlib: pip install 'elmo-bilm[probe]' (or pass no --plot)."
        ) from None
    return plt


def plot_path(path: str | Path) -> Path:
    """The file a plot named `path` is written to: `path` + `.png` without a suffix, as `savefig` does.

    Call it before a long probe to fail early.

    Raises:
        ElmoError: if matplotlib is missing or cannot write the suffix (names the formats).
    """
    plt = pyplot()
    path = Path(path)
    if not path.suffix:
        return path.with_name(path.name + ".png")
    formats = sorted(plt.figure().canvas.get_supported_filetypes())
    plt.close("all")
    if path.suffix[1:].lower() not in formats:
        raise ElmoError(
            f"--plot {path}: matplotlib cannot write {path.suffix!r} files; give a name ending in one of "
            f"{', '.join('.' + f for f in formats)} (.png is the usual one)."
        )
    return path


def plot_probe(result: ProbeResult, path: str | Path, title: str = "") -> Path:
    """Save a bar plot of `result`'s accuracies to `plot_path(path)`.

    Returns:
        The file written (`plot_path(path)`).

    Raises:
        ElmoError: if matplotlib is missing or cannot write that suffix.
    """
    plt = pyplot()
    path = plot_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    values = [100 * a for a in result.accuracy]
    fig, ax = plt.subplots(figsize=(5, 3.2), dpi=120)
    bars = ax.bar(result.names, values, color=["#999999"] + ["#4c72b0"] * (len(values) - 2) + ["#dd8452"])
    for bar, value in zip(bars, values):
        x = bar.get_x() + bar.get_width() / 2
        ax.annotate(f"{value:.1f}", (x, value), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=8)
    # Zoom on the bars: the differences between layers are a few points. Headroom above 100
    # keeps the labels of full bars under the title; the ticks stop at 100.
    low = max(0.0, min(values) - 5)
    majority = 100 * result.majority_accuracy
    note = f"majority label: {majority:.1f}%"
    if majority >= low:
        ax.axhline(majority, color="black", linestyle=":", linewidth=1)
        note += " (dotted line)"
    ax.set_ylim(low, 100 + 0.12 * (100 - low))
    ax.set_yticks([t for t in ax.get_yticks() if low <= t <= 100])
    ax.set_ylabel("accuracy (%)")
    ax.set_xlabel(note, fontsize=7)  # under the bars, where no bar reaches
    ax.set_title(title or f"linear probe, {result.num_tokens} tokens", fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp:  # the name's suffix stays last: matplotlib picks the format by it
        fig.savefig(tmp)
    plt.close(fig)
    return path
