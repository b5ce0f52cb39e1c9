"""Pretraining the biLM: vocabulary, data stream, language model, trainer.

    from elmo_core.apps.training.data import TrainingStream
    from elmo_core.apps.training.model import BiLMLanguageModel
    from elmo_core.apps.training.trainer import Trainer
    from elmo_core.apps.training.vocab import Vocabulary

Commands: `elmo train`, `elmo perplexity`, `elmo widen`, `elmo data`. Nothing is re-exported.
"""

__all__: list[str] = []
