"""elmo_core: the ELMo biLM (Peters et al., NAACL 2018) in plain PyTorch.

Shared by `spacy_elmo` and `hf_elmo`; imports neither spaCy nor transformers.

    from elmo_core import Elmo, embed_sentences, load_bilm_tf, read_options
    elmo = Elmo(read_options("options.json"), dropout=0.0)
    load_bilm_tf(elmo, "weights.hdf5")
    vectors = embed_sentences(elmo, [["Hello", "world", "."]], layers="all")  # [3, 3, 1024] per sentence
"""

from __future__ import annotations

if __name__ != "elmo_core":  # pragma: no cover - packaging guard
    raise ImportError(
        f"this package must be imported as 'elmo_core', not {__name__!r}. Install the project "
        "(pip install -e .), which maps the folder core/ to elmo_core, and import elmo_core."
    )

from ._version import __version__ as __version__
from .files.model_folder import (
    ModelSource,
    load_elmo,
    load_model_folder,
    read_model_config,
    resolve_model_source,
    save_model_folder,
)
from .files.options_file import read_options
from .files.weights import load_bilm_tf, save_bilm_tf
from .model.bilm import BiLM, BiLMOutput
from .model.char_cnn import CharCNN
from .model.characters import word_to_char_ids, words_to_char_ids
from .model.elmo import Elmo, ElmoOutput
from .model.errors import ElmoError, OptionsError, WeightFileError
from .model.highway import Highway
from .model.lstm import LSTMCellWithProjection, LSTMStack, compile_recurrence
from .model.options import PUBLISHED_OPTIONS, BiLMOptions, CharCNNOptions, LSTMOptions
from .model.scalar_mix import ScalarMix
from .model.windows import DEFAULT_WINDOW_TOKENS, Window, check_window_settings, plan_windows, read_in_windows
from .runtime.attach import attach_runtime, has_runtime, set_token_cache
from .runtime.batching import batches_by_token_budget
from .runtime.embedding import DEFAULT_BATCH_TOKENS, EmbedSettings, embed_sentences, iter_embeddings
from .runtime.feature_cache import CacheStats, FeatureCache
from .runtime.memory import release_free_memory
from .runtime.quantization import is_quantized, quantize_int8
from .runtime.recurrence import RECURRENCES, Recurrence, set_recurrence
from .runtime.threads import set_thread_policy
from .runtime.token_cache import TokenCache
from .runtime.windows import run_in_windows

__all__ = [
    "DEFAULT_BATCH_TOKENS",
    "DEFAULT_WINDOW_TOKENS",
    "BiLM",
    "BiLMOptions",
    "BiLMOutput",
    "CacheStats",
    "CharCNN",
    "CharCNNOptions",
    "Elmo",
    "ElmoError",
    "EmbedSettings",
    "ElmoOutput",
    "FeatureCache",
    "Highway",
    "LSTMCellWithProjection",
    "LSTMOptions",
    "LSTMStack",
    "ModelSource",
    "OptionsError",
    "Recurrence",
    "PUBLISHED_OPTIONS",
    "ScalarMix",
    "TokenCache",
    "WeightFileError",
    "Window",
    "attach_runtime",
    "batches_by_token_budget",
    "check_window_settings",
    "compile_recurrence",
    "set_recurrence",
    "set_thread_policy",
    "set_token_cache",
    "RECURRENCES",
    "embed_sentences",
    "has_runtime",
    "is_quantized",
    "iter_embeddings",
    "load_bilm_tf",
    "load_elmo",
    "load_model_folder",
    "plan_windows",
    "read_in_windows",
    "quantize_int8",
    "read_model_config",
    "read_options",
    "release_free_memory",
    "resolve_model_source",
    "run_in_windows",
    "save_bilm_tf",
    "save_model_folder",
    "word_to_char_ids",
    "words_to_char_ids",
]
