"""Pretraining the biLM: vocabulary, data stream, language model, trainer.

    from elmo_core.apps.training.data import TrainingStream
    from elmo_core.apps.training.model import BiLMLanguageModel
    from elmo_core.apps.training.trainer import Trainer
    from elmo_core.apps.training.vocab import Vocabulary

The command line is `elmo train`, `elmo perplexity`, `elmo widen` and `elmo data pretokenize|vocab`.
"""

from __future__ import annotations

from .corpus import get_sentence_splitter, hold_out, iter_sentences, pretokenize_files
from .data import Batch, PrefetchingStream, TrainingStream, eval_batches, make_batch
from .model import BiLMLanguageModel, LMOutput, default_cutoffs, load_language_model, save_language_model
from .perplexity import Perplexity, evaluate
from .trainer import TrainConfig, Trainer
from .vocab import Vocabulary
from .widen import widen_language_model

__all__ = [
    "Batch",
    "BiLMLanguageModel",
    "LMOutput",
    "Perplexity",
    "PrefetchingStream",
    "TrainConfig",
    "Trainer",
    "TrainingStream",
    "Vocabulary",
    "default_cutoffs",
    "eval_batches",
    "evaluate",
    "get_sentence_splitter",
    "hold_out",
    "iter_sentences",
    "load_language_model",
    "make_batch",
    "pretokenize_files",
    "save_language_model",
    "widen_language_model",
]
