"""The biLM as a language model: `BiLM` + dropout + one softmax shared by both directions.

Peters et al. 2018, section 3.1: both directions share the char CNN and the softmax.
Per sentence `<S> w1 .. wn </S>`, from one `BiLM` call (P = projection_dim):

    position t          0     1     2    ...   n     n+1
    token               <S>   w1    w2   ...   wn    </S>
    forward half [:P]   ->w1  ->w2  ->w3 ...   -></S>          (t predicts t + 1)
    backward half [P:]        <S><- w1<- ...   w(n-1)<- wn<-   (t predicts t - 1)

The softmax is `torch.nn.AdaptiveLogSoftmaxWithLoss` (Grave et al. 2017). It is exact,
so `exp(loss)` is the true perplexity (bilm-tf trained with a sampled softmax).

`save_language_model` adds `vocab.txt` and `lm_head.safetensors` to a model folder.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from ...files.atomic_files import atomic_write
from ...files.model_folder import ELMO_SETTINGS, load_model_folder, read_model_config, save_model_folder
from ...model.bilm import BiLM
from ...model.checks import check_int
from ...model.elmo import Elmo
from ...model.errors import WeightFileError
from ...model.options import BiLMOptions
from ...model.recurrence.dropout import fast_dropout
from ...runtime.memory import release_when_collected
from ...runtime.parts import serving_parts
from .softmax import adaptive_log_prob
from .vocab import Vocabulary

__all__ = ["BiLMLanguageModel", "has_lm_head", "load_language_model", "save_language_model"]

VOCAB_NAME = "vocab.txt"
LM_HEAD_NAME = "lm_head.safetensors"


class LMOutput(NamedTuple):
    """What `BiLMLanguageModel.forward` returns.

    Attributes:
        forward_loss: Mean negative log-likelihood (natural log) per forward prediction.
            Forward perplexity = exp(forward_loss). Scalar float32 tensor.
        backward_loss: The same for the backward direction.
        forward_tokens: Forward predictions: words + one `</S>` per sentence.
        backward_tokens: Backward predictions, equal to `forward_tokens`.
    """

    forward_loss: torch.Tensor
    backward_loss: torch.Tensor
    forward_tokens: int
    backward_tokens: int

    @property
    def loss(self) -> torch.Tensor:
        """The training objective, bilm-tf's `0.5 * (forward_loss + backward_loss)`."""
        return 0.5 * (self.forward_loss + self.backward_loss)


def default_cutoffs(vocab_size: int, projection_dim: int, div_value: float = 4.0) -> list[int]:
    """Adaptive-softmax cluster boundaries for a vocabulary of `vocab_size` ids.

    The head holds the 4,000 most frequent ids. Clusters end at 20,000 and 100,000 when
    the vocabulary is that large. Cluster `i` is `projection_dim / div_value**(i+1)` wide,
    so clusters narrower than 1 merge into the last. Up to 4,001 ids: in effect a full softmax.
    """
    max_clusters = max(1, int(math.log(projection_dim, div_value) + 1e-9))
    cutoffs = [c for c in (4_000, 20_000, 100_000) if c < vocab_size][:max_clusters]
    return cutoffs or [vocab_size - 1]


class BiLMLanguageModel(nn.Module):
    """Forward and backward language model over one `BiLM`, with a shared adaptive softmax.

    Args:
        options: biLM hyperparameters.
        vocab_size: Softmax classes, `len(vocabulary)`, specials included.
        dropout: On every LSTM layer's input and the top output, in training only. bilm-tf
            used 0.1. Much above 0.3 slows learning of a model this size.
        cutoffs: Adaptive-softmax cluster boundaries, ascending ids. None: `default_cutoffs`.
            Ids must be sorted by descending frequency, as `Vocabulary.build` does.
        div_value: Each further cluster's projection is this many times narrower.
        recurrence: How the LSTMs run (`elmo_core.model.recurrence`).

    Attributes:
        bilm: The same `BiLM` as `Elmo.bilm`, so its state dict loads into `Elmo` unchanged.
        softmax: The `AdaptiveLogSoftmaxWithLoss` over `projection_dim` features.
    """

    def __init__(
        self,
        options: BiLMOptions,
        vocab_size: int,
        *,
        dropout: float = 0.1,
        cutoffs: Sequence[int] | None = None,
        div_value: float = 4.0,
        recurrence: str = "auto",
    ) -> None:
        super().__init__()
        check_int("vocab_size", vocab_size, minimum=3, meaning="<S>, </S>, <UNK>")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {dropout}.")
        P = options.lstm.projection_dim
        cutoffs = list(cutoffs) if cutoffs is not None else default_cutoffs(vocab_size, P, div_value)
        for i in range(len(cutoffs)):
            if P // div_value ** (i + 1) < 1:
                raise ValueError(
                    f"cutoffs {cutoffs} make {len(cutoffs)} clusters, but projection_dim {P} / "
                    f"div_value {div_value}**{i + 1} < 1 leaves cluster {i} no features. Use fewer "
                    "cutoffs or a smaller div_value."
                )
        self.options = options
        self.dropout = dropout
        # token_cache_words=0: the char CNN trains, a cache would only cost
        parts = serving_parts(recurrence=recurrence, token_cache_words=0)
        self.bilm = BiLM(options, keep_sentence_boundaries=True, dropout=dropout, **parts)
        release_when_collected(self.bilm)  # a dropped model's heap goes back to the OS
        self.softmax = nn.AdaptiveLogSoftmaxWithLoss(P, vocab_size, cutoffs, div_value=div_value, head_bias=True)

    @property
    def vocab_size(self) -> int:
        return self.softmax.n_classes

    def head_config(self) -> dict[str, Any]:
        """The softmax's constructor settings (stored beside its weights)."""
        return {
            "n_classes": self.softmax.n_classes,
            "cutoffs": self.softmax.cutoffs[:-1],
            "div_value": self.softmax.div_value,
            "in_features": self.softmax.in_features,
        }

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None, targets: torch.Tensor) -> LMOutput:
        """Both directions' mean losses over the real predictions of a batch.

        Args:
            char_ids: Character ids of the words, without `<S>`/`</S>`.
            mask: True = real word. None: derived from `char_ids`.
            targets: Vocabulary ids of `<S> w1 .. wn </S>` per row (`make_batch`). Values
                after each row's `</S>` are ignored.

        Returns:
            `LMOutput`.

        Shape:
            char_ids: [batch, tokens, chars] int64
            mask: [batch, tokens] bool
            targets: [batch, tokens + 2] int64

        Raises:
            ValueError: If `targets` does not have `tokens + 2` columns.
        """
        out = self.bilm(char_ids, mask)  # activations [L+1, batch, tokens+2, 2P]
        full_mask = out.mask  # [batch, tokens + 2], True on <S> w1 .. wn </S>
        if tuple(targets.shape) != tuple(full_mask.shape):
            raise ValueError(
                f"targets must be [batch, tokens + 2] = {tuple(full_mask.shape)} (ids of <S> w1 .. wn "
                f"</S> per row); got {tuple(targets.shape)}. Build batches with make_batch()."
            )
        targets = targets.to(full_mask.device)
        P = self.options.lstm.projection_dim
        top = fast_dropout(out.activations[-1], self.dropout, self.training)  # [batch, tokens+2, 2P]
        # Position t + 1 is real <=> forward t predicts it and backward t + 1 predicts t.
        has_next = full_mask[:, 1:]  # [batch, tokens + 1]
        forward_hidden = top[:, :-1, :P][has_next]  # [N, P]: <S> .. wn
        forward_targets = targets[:, 1:][has_next]  # [N]: w1 .. </S>
        backward_hidden = top[:, 1:, P:][has_next]  # [N, P]: w1 .. </S>
        backward_targets = targets[:, :-1][has_next]  # [N]: <S> .. wn
        n = forward_targets.shape[0]
        hidden = torch.cat([forward_hidden, backward_hidden])  # [2N, P]
        # One softmax call for both directions (the softmax is shared); the module's
        # numbers, without its full log-softmax tensors (see softmax.py).
        log_probs = adaptive_log_prob(self.softmax, hidden, torch.cat([forward_targets, backward_targets]))  # [2N]
        return LMOutput(-log_probs[:n].mean(), -log_probs[n:].mean(), n, n)


# ---------------------------------------------------------------------- model folders
def save_language_model(
    lm: BiLMLanguageModel,
    vocab: Vocabulary,
    path: str | Path,
    *,
    elmo_settings: dict[str, Any] | None = None,
    extra_config: dict[str, Any] | None = None,
) -> None:
    """Write `lm` as a model folder that `Elmo` loads, plus `vocab.txt` and `lm_head.safetensors`.

    Args:
        lm: The language model (any device).
        vocab: Its softmax vocabulary.
        path: The folder, created if needed. Files are replaced atomically.
        elmo_settings: `Elmo` settings for config.json. None: defaults. Pass the stored
            ones when continuing from a model folder.
        extra_config: More keys for config.json.

    Raises:
        ValueError: If `len(vocab)` differs from the softmax size.
    """
    from safetensors.torch import save_file

    if len(vocab) != lm.vocab_size:
        raise ValueError(f"the vocabulary has {len(vocab)} tokens but the softmax {lm.vocab_size} classes.")
    settings = {**ELMO_SETTINGS, **(elmo_settings or {})}
    elmo = Elmo(lm.options, **settings)
    elmo.bilm.load_state_dict(lm.bilm.state_dict())
    folder = Path(path)
    save_model_folder(elmo, folder, extra_config=extra_config)
    atomic_write(folder / VOCAB_NAME, vocab.save)
    head = {k: v.detach().cpu().contiguous() for k, v in lm.softmax.state_dict().items()}
    metadata = {"format": "pt", **{k: json.dumps(v) for k, v in lm.head_config().items()}}
    atomic_write(folder / LM_HEAD_NAME, lambda tmp: save_file(head, tmp, metadata=metadata))


def has_lm_head(path: str | Path) -> bool:
    """Whether a model folder also holds a language-model head (vocab.txt + lm_head.safetensors)."""
    folder = Path(path)
    return (folder / VOCAB_NAME).is_file() and (folder / LM_HEAD_NAME).is_file()


def load_language_model(
    path: str | Path, map_location: str | torch.device = "cpu", *, dropout: float = 0.0
) -> tuple[BiLMLanguageModel, Vocabulary, dict[str, Any]]:
    """Read a model folder written by `save_language_model`.

    Args:
        path: The model folder.
        map_location: Device of the returned model.
        dropout: 0 for evaluation, the training value (0.1) to continue training.

    Returns:
        `(lm, vocab, elmo_settings)`. Pass the settings back to `save_language_model`.

    Raises:
        WeightFileError: If the folder is not a model folder, has no language-model head
            (`elmo train --model` adds one), or the head does not match the vocabulary.
    """
    from safetensors import safe_open

    folder = Path(path)
    elmo = load_model_folder(folder, dropout=0.0)
    _, settings = read_model_config(folder)
    if not has_lm_head(folder):
        raise WeightFileError(
            f"model folder {folder} has no language-model head ({VOCAB_NAME} and {LM_HEAD_NAME}): it "
            "can embed text but not score it. Train one on top of it with `elmo train --model "
            f"{folder} ...`, which adds a new softmax."
        )
    vocab = Vocabulary.load(folder / VOCAB_NAME)
    head_path = folder / LM_HEAD_NAME
    try:
        with safe_open(str(head_path), framework="pt", device="cpu") as f:
            metadata = f.metadata() or {}
            state = {key: f.get_tensor(key) for key in f.keys()}
        config = {k: json.loads(metadata[k]) for k in ("n_classes", "cutoffs", "div_value")}
    except (KeyError, json.JSONDecodeError) as err:
        raise WeightFileError(f"{head_path} lacks its cutoffs/div_value metadata ({err}).") from None
    except Exception as err:  # safetensors raises its own error types
        raise WeightFileError(f"{head_path} is not a readable safetensors file ({err}).") from None
    if config["n_classes"] != len(vocab):
        raise WeightFileError(
            f"{head_path} predicts {config['n_classes']} classes but {folder / VOCAB_NAME} has "
            f"{len(vocab)} tokens; the two files belong to different models."
        )
    lm = BiLMLanguageModel(
        elmo.options, len(vocab), dropout=dropout, cutoffs=config["cutoffs"], div_value=config["div_value"]
    )
    lm.bilm.load_state_dict(elmo.bilm.state_dict())
    expected = lm.softmax.state_dict()
    for name, tensor in expected.items():
        if name not in state or state[name].shape != tensor.shape:
            found = tuple(state[name].shape) if name in state else "missing"
            raise WeightFileError(f"{head_path}: tensor '{name}' is {found}, expected {tuple(tensor.shape)}.")
    lm.softmax.load_state_dict(state)
    return lm.to(map_location), vocab, settings
