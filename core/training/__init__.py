"""Pretraining the biLM: vocabulary, data stream, language model, trainer.

    from elmo_core.training import Vocabulary, TrainingStream, BiLMLanguageModel, Trainer

The command line is `elmo train` / `elmo perplexity`; `python -m elmo_core.training`
adds `pretokenize` and `vocab`.
"""

from __future__ import annotations

from .data import Batch, TrainingStream, eval_batches, get_sentence_splitter, iter_sentences, make_batch, pretokenize_files
from .model import BiLMLanguageModel, LMOutput, default_cutoffs, load_language_model, save_language_model
from .vocab import Vocabulary

__all__ = [
    "Batch",
    "BiLMLanguageModel",
    "LMOutput",
    "TrainingStream",
    "Vocabulary",
    "default_cutoffs",
    "eval_batches",
    "get_sentence_splitter",
    "iter_sentences",
    "load_language_model",
    "make_batch",
    "pretokenize_files",
    "save_language_model",
]
