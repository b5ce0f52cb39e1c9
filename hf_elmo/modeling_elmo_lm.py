"""ElmoLMHeadModel: the biLM with its own softmax, to score text as a language model.

It loads the softmax an `elmo train` folder holds and scores text with the core's code, so its
numbers are `elmo perplexity`'s. A saved folder's own code does not carry it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.utils import ModelOutput

from elmo_core.face_api import (
    BiLMLanguageModel,
    Perplexity,
    Vocabulary,
    evaluate,
    load_language_model,
    save_language_model,
    text_sentences,
)

from .configuration_elmo import ElmoConfig
from .modeling_elmo import ElmoPreTrainedModel

__all__ = ["ElmoLMHeadModel", "ElmoLMOutput"]


@dataclass
class ElmoLMOutput(ModelOutput):
    """What `ElmoLMHeadModel` returns for a batch.

    Attributes:
        loss: bilm-tf's objective, `(forward_loss + backward_loss) / 2`.
        forward_loss: Mean negative log-likelihood (natural log) per forward prediction.
        backward_loss: The same, backward.
    """

    loss: torch.Tensor | None = None
    forward_loss: torch.Tensor | None = None
    backward_loss: torch.Tensor | None = None


class ElmoLMHeadModel(ElmoPreTrainedModel):
    """The biLM and the softmax both directions share (Peters et al. 2018, section 3.1).

    Load it from a folder `elmo train` wrote (the default model is one):

        lm = ElmoLMHeadModel.from_pretrained(folder)
        p = lm.perplexity(["The cat sat on the mat."])   # p.forward, p.backward, p.average

    Args:
        config: The folder's config, with `lm_head` (the softmax's `n_classes`, `cutoffs`
            and `div_value`), which `from_pretrained` adds.
        vocab: The softmax vocabulary (`vocab.txt`).

    Raises:
        ValueError: if the config has no `lm_head` or `vocab` does not fit it.
    """

    def __init__(self, config: ElmoConfig, vocab: Vocabulary) -> None:
        super().__init__(config)
        head = getattr(config, "lm_head", None)
        if not isinstance(head, dict) or head.get("n_classes") != len(vocab):
            raise ValueError(
                "ElmoLMHeadModel needs a trained folder's softmax: load it with ElmoLMHeadModel.from_pretrained("
                "folder), a folder with vocab.txt and lm_head.safetensors (elmo train writes them)."
            )
        self.lm = BiLMLanguageModel(
            config.to_options(), len(vocab), dropout=0.0, cutoffs=head["cutoffs"], div_value=head["div_value"]
        )
        self.vocab = vocab
        self.post_init()

    @classmethod
    def from_pretrained(  # type: ignore[override]  # a local folder only: the core reads its softmax files
        cls, pretrained_model_name_or_path: str | os.PathLike, *args: Any, **kwargs: Any
    ) -> ElmoLMHeadModel:
        """The biLM and softmax of a local model folder, in eval mode.

        Args:
            pretrained_model_name_or_path: A folder with `vocab.txt` and `lm_head.safetensors`.
            **kwargs: Config overrides, as transformers' `from_pretrained`.

        Raises:
            WeightFileError: if the folder has no language-model head, or its files disagree.
        """
        folder = os.fspath(pretrained_model_name_or_path)
        lm, vocab, _ = load_language_model(folder)
        config = ElmoConfig.from_pretrained(folder, *args, **kwargs)
        config.lm_head = {k: v for k, v in lm.head_config().items() if k != "in_features"}
        model = cls(config, vocab)
        model.lm.load_state_dict(lm.state_dict())
        return model.eval()

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """Write the folder as `elmo train` does: a model folder, `vocab.txt` and `lm_head.safetensors`."""
        save_language_model(self.lm, self.vocab, os.fspath(save_directory), elmo_settings=self.config.elmo_settings())

    def perplexity(
        self, texts: Iterable[str | Sequence[str]], *, batch_tokens: int = 4096, precision: str = "fp32"
    ) -> Perplexity:
        """Forward, backward and average perplexity (and log-likelihoods) of `texts`.

        Args:
            texts: Raw text strings (split into sentences and tokens as `elmo perplexity`
                splits a file's lines) and/or token lists (one sentence each).
            batch_tokens: Padded positions per batch (memory, not results).
            precision: "fp32", "bf16" or "fp16" (autocast).

        Returns:
            `Perplexity`, as `elmo_core.perplexity` gives.
        """
        sentences = text_sentences(texts)
        return evaluate(
            self.lm, sentences, self.vocab, batch_tokens=batch_tokens, device=self.device, precision=precision
        )

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        char_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> ElmoLMOutput:
        """Both directions' mean losses over a batch.

        Args:
            input_ids: Char ids [batch, tokens, 50] when `char_ids` is not given.
            attention_mask: 1 for real tokens. Default: from the char ids.
            char_ids: Char ids from `ElmoTokenizer` (no `<S>`/`</S>`).
            labels: Softmax-vocabulary ids of `<S> w1 .. wn </S>` per row, [batch, tokens + 2]
                (`self.vocab.encode` gives a sentence's words).

        Raises:
            ValueError: without `labels`, or with labels of the wrong shape.
        """
        ids = char_ids if char_ids is not None else input_ids
        if labels is None or ids is None or ids.dim() != 3:
            raise ValueError(
                "ElmoLMHeadModel needs char_ids [batch, tokens, 50] and labels [batch, tokens + 2] (vocabulary ids "
                "of <S> w1 .. wn </S>); lm.perplexity(texts) scores text directly."
            )
        mask = attention_mask.bool() if attention_mask is not None else None
        out = self.lm(ids.to(self.device), mask, labels)
        return ElmoLMOutput(loss=out.loss, forward_loss=out.forward_loss, backward_loss=out.backward_loss)
