"""Forward, backward and average perplexity of a `BiLMLanguageModel` over sentences.

    forward  = exp(NLL_fwd / N)          NLL_* = sum over every prediction of -ln p(target)
    backward = exp(NLL_bwd / N)          N     = predictions per direction
    average  = exp((NLL_fwd + NLL_bwd) / (2N)) = sqrt(forward * backward)

N counts the words plus one `</S>` (forward) or `<S>` (backward) per sentence. "Average"
is bilm-tf's `test()`: the geometric mean of the two perplexities. The paper's "average"
(39.7) does not say which mean. We print all three numbers. Every prediction has equal
weight, and each sentence starts from the zero state. Words outside the vocabulary are
predicted as `<UNK>`, as in bilm-tf. `unknown` counts them: a smaller vocabulary lowers
perplexity without a better model.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from ...files.model_folder import resolve_model_source
from ...model.precision import check_cpu_precision
from ..console import progress_bar
from .corpus import DEFAULT_SPLITTER, get_sentence_splitter, line_sentences
from .data import eval_batches
from .model import BiLMLanguageModel, load_language_model
from .vocab import Vocabulary

__all__ = ["Perplexity", "evaluate", "perplexity", "text_sentences"]


class Perplexity(NamedTuple):
    """Summed losses over a text. The perplexities are properties.

    Attributes:
        forward_nll: Sum of -ln p over the forward predictions, accumulated in float64.
        backward_nll: The same, backward.
        tokens: Predictions per direction: words + one per sentence.
        sentences: Sentences scored.
        unknown: Words mapped to `<UNK>`.
    """

    forward_nll: float
    backward_nll: float
    tokens: int
    sentences: int
    unknown: int

    @property
    def forward(self) -> float:
        return _exp(self.forward_nll / self.tokens) if self.tokens else math.nan

    @property
    def backward(self) -> float:
        return _exp(self.backward_nll / self.tokens) if self.tokens else math.nan

    @property
    def average(self) -> float:
        """exp((forward loss + backward loss) / 2), bilm-tf's "average perplexity"."""
        return _exp((self.forward_nll + self.backward_nll) / (2 * self.tokens)) if self.tokens else math.nan

    @property
    def forward_log_likelihood(self) -> float:
        """Sum of ln p over the forward predictions: `-forward_nll`."""
        return -self.forward_nll

    @property
    def backward_log_likelihood(self) -> float:
        """Sum of ln p over the backward predictions: `-backward_nll`."""
        return -self.backward_nll

    @property
    def average_log_likelihood(self) -> float:
        """The mean of the two directions' sums. `average == exp(-average_log_likelihood / tokens)`."""
        return -(self.forward_nll + self.backward_nll) / 2

    def __add__(self, other: object) -> Perplexity:
        if not isinstance(other, Perplexity):
            return NotImplemented
        return Perplexity._make(a + b for a, b in zip(self, other))


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def precision_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of a precision's name: None for "fp32"."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def check_precision(device: torch.device, precision: str) -> None:
    """Raise `ValueError` for a precision slower than float32 on `device` (`check_cpu_precision`)."""
    if device.type == "cpu":
        check_cpu_precision(precision_dtype(precision))


def autocast_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """`torch.autocast` for "bf16"/"fp16", a no-op for "fp32".

    Raises:
        ValueError: For a precision slower than float32 on `device`.
    """
    dtype = precision_dtype(precision)
    if dtype is None:
        return contextlib.nullcontext()
    check_precision(device, precision)
    return torch.autocast(device_type=device.type, dtype=dtype)


@torch.no_grad()
def evaluate(
    lm: BiLMLanguageModel,
    sentences: Sequence[Sequence[str]],
    vocab: Vocabulary,
    *,
    batch_tokens: int = 4096,
    device: str | torch.device | None = None,
    precision: str = "fp32",
    progress: str | None = None,
) -> Perplexity:
    """Score tokenised `sentences`, given without boundaries, with `lm` in eval mode.

    Args:
        lm: The language model. Its train/eval mode is restored after.
        sentences: Sentences to score. Empty ones are skipped.
        vocab: The softmax vocabulary of `lm`.
        batch_tokens: Padded positions per batch (memory, not results).
        device: Where to run. None: the model's device.
        precision: "fp32", "bf16" or "fp16" (autocast).
        progress: Label of a progress bar on stderr, in predictions. None: no bar.

    Returns:
        `Perplexity` sums. Combine shards with `+`.
    """
    device = torch.device(device) if device is not None else next(lm.parameters()).device
    sentences = [s for s in sentences if len(s)]
    was_training = lm.training
    lm.eval()
    forward_nll = backward_nll = 0.0
    tokens = 0
    total = sum(len(s) + 1 for s in sentences)  # predictions per direction: words + </S>
    bar = progress_bar(total, unit="tok", desc=progress, show=progress is not None)
    try:
        for batch in eval_batches(sentences, vocab, batch_tokens, lm.options.char_cnn.max_characters_per_token):
            batch = batch.to(device)
            with autocast_context(device, precision):
                out = lm(batch.char_ids, batch.mask, batch.targets)
            forward_nll += float(out.forward_loss) * out.forward_tokens
            backward_nll += float(out.backward_loss) * out.backward_tokens
            tokens += out.forward_tokens
            bar.update(out.forward_tokens)
    finally:
        bar.close()
        lm.train(was_training)
    unknown = sum(1 for s in sentences for w in s if w not in vocab)
    return Perplexity(forward_nll, backward_nll, tokens, len(sentences), unknown)


def text_sentences(texts: Iterable[str | Sequence[str]], splitter: str = DEFAULT_SPLITTER) -> list[list[str]]:
    """Sentences of `texts`, as `elmo perplexity` reads a file's lines.

    A string is one paragraph, split by `splitter` (loaded only when a string comes). A
    list of strings is one tokenised sentence.

    Raises:
        TypeError: For an item that is neither.
    """
    sentences: list[list[str]] = []
    split = None
    for text in texts:
        if isinstance(text, str):
            split = split or get_sentence_splitter(splitter)
            if text.strip():
                sentences.extend(line_sentences(text, split))
        elif isinstance(text, Sequence) and all(isinstance(word, str) for word in text):
            sentences.append(list(text))
        else:
            raise TypeError(
                f"each text must be a string (raw text) or a list of token strings (one sentence); got "
                f"{type(text).__name__}."
            )
    return sentences


def perplexity(
    texts: Iterable[str | Sequence[str]],
    model: str | Path | None = None,
    *,
    batch_tokens: int = 4096,
    device: str = "cpu",
    precision: str = "fp32",
) -> Perplexity:
    """Forward, backward and average perplexity of text under a model folder's biLM.

    The numbers `elmo perplexity` prints for the same text.

        p = perplexity(["The cat sat on the mat."])
        p.forward, p.backward, p.average, p.forward_log_likelihood

    Args:
        texts: Raw strings (each a paragraph, split by spaCy's English rules) and token
            lists (each one sentence).
        model: A model folder with a language-model head, as `elmo train` writes. None:
            the default model.
        batch_tokens: Padded positions per batch (memory, not results).
        device: Where to run.
        precision: "fp32", "bf16" or "fp16" (autocast).

    Returns:
        The perplexities, log-likelihoods and counts (`tokens` per direction, `sentences`,
        `unknown` words).

    Raises:
        WeightFileError: If the folder has no language-model head.
        TypeError: For a text that is neither a string nor a token list.
    """
    folder = resolve_model_source(model).folder
    assert folder is not None  # one path (or none: the default model) always names a folder
    lm, vocab, _ = load_language_model(folder, map_location=device)
    sentences = text_sentences(texts)
    return evaluate(lm, sentences, vocab, batch_tokens=batch_tokens, device=device, precision=precision)
