"""Pretraining the biLM: vocabulary, data stream, language model, trainer.

    from elmo_core.apps.training.data import TrainingStream
    from elmo_core.apps.training.model import BiLMLanguageModel
    from elmo_core.apps.training.trainer import Trainer
    from elmo_core.apps.training.vocab import Vocabulary

The command line is `elmo train`, `elmo perplexity`, `elmo widen` and `elmo data pretokenize|vocab`.

This package re-exports nothing: import from its modules.
"""

__all__: list[str] = []
