"""elmo_core: the ELMo biLM (Peters et al., NAACL 2018) in plain PyTorch.

Shared by `spacy_elmo` and `hf_elmo`; imports neither spaCy nor transformers.

    from elmo_core import BiLMOptions, Elmo, load_bilm_tf
    elmo = Elmo(BiLMOptions.from_json("options.json"), dropout=0.0)
    load_bilm_tf(elmo, "weights.hdf5")
    vectors = elmo.embed([["Hello", "world", "."]], layers="all")  # [3, 3, 1024] per sentence
"""

from __future__ import annotations

if __name__ != "elmo_core":  # pragma: no cover - packaging guard
    raise ImportError(
        f"this package must be imported as 'elmo_core', not {__name__!r}. Install the project "
        "(pip install -e .), which maps the folder core/ to elmo_core, and import elmo_core."
    )

from ._version import __version__ as __version__
from .batching import batches_by_token_budget
from .bilm import BiLM, BiLMOutput
from .char_cnn import CharCNN
from .characters import BOS_TOKEN, EOS_TOKEN, word_to_char_ids, words_to_char_ids
from .elmo import Elmo, ElmoOutput
from .embedding import embed_sentences, iter_embeddings
from .errors import ElmoError, OptionsError, WeightFileError
from .feature_cache import CacheStats, FeatureCache
from .highway import Highway
from .lstm import LSTMCellWithProjection, LSTMStack, compile_recurrence
from .memory import MMAP_THRESHOLD, TRAIN_MMAP_THRESHOLD, release_free_memory, use_mmap_for_large_blocks
from .model_folder import (
    ModelSource,
    default_model_dir,
    load_elmo,
    load_model_folder,
    read_model_config,
    resolve_model_source,
    save_model_folder,
)
from .options import PUBLISHED_OPTIONS, BiLMOptions, CharCNNOptions, LSTMOptions
from .precision import cpu_bf16_support
from .quantization import is_quantized, quantize_int8, quantize_linear_layers
from .recurrence import RECURRENCES, set_recurrence
from .scalar_mix import ScalarMix
from .threads import set_thread_policy
from .token_cache import TokenCache

# Pretraining (the applications), for benchmarks/bench_train.py.
from .training import BiLMLanguageModel, LMOutput, Vocabulary, evaluate, make_batch
from .training.model import autocast_log_softmax_dtype
from .training.softmax import adaptive_log_prob
from .training.trainer import RELEASE_EVERY
from .weights import load_bilm_tf, save_bilm_tf
from .windows import DEFAULT_WINDOW_TOKENS, Window, check_window_settings, plan_windows, run_in_windows

__all__ = [
    "BOS_TOKEN",
    "EOS_TOKEN",
    "MMAP_THRESHOLD",
    "TRAIN_MMAP_THRESHOLD",
    "use_mmap_for_large_blocks",
    "default_model_dir",
    "cpu_bf16_support",
    "quantize_linear_layers",
    "BiLMLanguageModel",
    "LMOutput",
    "Vocabulary",
    "evaluate",
    "make_batch",
    "autocast_log_softmax_dtype",
    "adaptive_log_prob",
    "RELEASE_EVERY",
    "DEFAULT_WINDOW_TOKENS",
    "BiLM",
    "BiLMOptions",
    "BiLMOutput",
    "CacheStats",
    "CharCNN",
    "CharCNNOptions",
    "Elmo",
    "ElmoError",
    "ElmoOutput",
    "FeatureCache",
    "Highway",
    "LSTMCellWithProjection",
    "LSTMOptions",
    "LSTMStack",
    "ModelSource",
    "OptionsError",
    "PUBLISHED_OPTIONS",
    "ScalarMix",
    "TokenCache",
    "WeightFileError",
    "Window",
    "batches_by_token_budget",
    "check_window_settings",
    "compile_recurrence",
    "set_recurrence",
    "set_thread_policy",
    "RECURRENCES",
    "embed_sentences",
    "is_quantized",
    "iter_embeddings",
    "load_bilm_tf",
    "load_elmo",
    "load_model_folder",
    "plan_windows",
    "quantize_int8",
    "read_model_config",
    "release_free_memory",
    "resolve_model_source",
    "run_in_windows",
    "save_bilm_tf",
    "save_model_folder",
    "word_to_char_ids",
    "words_to_char_ids",
]
