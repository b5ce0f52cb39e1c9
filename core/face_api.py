"""What the faces (`spacy_elmo`, `hf_elmo`) use of the core, beyond `elmo_core`'s public names.

Pinned by `tests/test_public_api.py`. Not for users: a name may change with its faces.
"""

from __future__ import annotations

from .apps.training.model import BiLMLanguageModel, load_language_model, save_language_model
from .apps.training.perplexity import Perplexity, evaluate, text_sentences
from .apps.training.vocab import Vocabulary
from .files.atomic_files import atomic_folder, atomic_path, disk_full_error
from .files.model_folder import (
    ELMO_SETTINGS,
    NON_FINITE_FIX,
    check_model_folder,
    resolve_model_source,
    tokenizer_settings,
)
from .files.safetensors_files import folder_variant
from .files.text_files import check_input_file, iter_conll_rows, read_text
from .files.tokenizers import (
    DEFAULT_TOKENIZER,
    get_tokenizer,
    spacy_sentence_splitter,
    spacy_word_splitter,
    token_offsets,
)
from .files.weights import count_non_finite, non_finite_error
from .model.bilm import check_char_ids
from .model.capture import capturing
from .model.char_cnn import Highway
from .model.characters import (
    BEGINNING_OF_SENTENCE_CHARACTER,
    BEGINNING_OF_WORD_CHARACTER,
    CHAR_ID_OFFSET,
    END_OF_SENTENCE_CHARACTER,
    END_OF_WORD_CHARACTER,
    PADDING_CHARACTER,
    check_sentences,
    word_to_char_ids,
)
from .model.checks import check_int
from .model.elmo import (
    bilm_is_trainable,
    mix_representations,
    run_bilm,
    softmax_weights,
    softmax_weights_backward,
    weighted_layer_sum,
    weighted_layer_sum_backward,
)
from .model.errors import missing_extra
from .model.options import MAX_CHARACTERS_PER_TOKEN, CharCNNOptions
from .runtime.batching import DEFAULT_BATCH_TOKENS
from .runtime.embedding import inference_step
from .runtime.first_use import first_use_lock
from .runtime.memory import release_when_collected
from .runtime.parts import serving_parts
from .runtime.windows import (
    DEFAULT_WINDOW_TOKENS,
    check_window_settings,
    read_in_windows,
    run_in_windows,
    window_batches,
)

__all__ = [
    # files: model folders, weight files, the atomic writer
    "atomic_folder",
    "atomic_path",
    "disk_full_error",
    "ELMO_SETTINGS",
    "NON_FINITE_FIX",
    "check_model_folder",
    "count_non_finite",
    "folder_variant",
    "non_finite_error",
    "resolve_model_source",
    "tokenizer_settings",
    # text and tokenizers
    "DEFAULT_TOKENIZER",
    "check_input_file",
    "iter_conll_rows",
    "get_tokenizer",
    "read_text",
    "spacy_sentence_splitter",
    "spacy_word_splitter",
    "token_offsets",
    # characters and checks
    "MAX_CHARACTERS_PER_TOKEN",
    "BEGINNING_OF_SENTENCE_CHARACTER",
    "BEGINNING_OF_WORD_CHARACTER",
    "CHAR_ID_OFFSET",
    "END_OF_SENTENCE_CHARACTER",
    "END_OF_WORD_CHARACTER",
    "PADDING_CHARACTER",
    "check_char_ids",
    "check_int",
    "check_sentences",
    "missing_extra",
    "word_to_char_ids",
    # the model's pieces a face builds on
    "CharCNNOptions",
    "Highway",
    "bilm_is_trainable",
    "capturing",
    "mix_representations",
    "run_bilm",
    "softmax_weights",
    "softmax_weights_backward",
    "weighted_layer_sum",
    "weighted_layer_sum_backward",
    # the runtime: parts, the embed chain (batches, windows, run, assemble)
    "DEFAULT_BATCH_TOKENS",
    "DEFAULT_WINDOW_TOKENS",
    "check_window_settings",
    "first_use_lock",
    "inference_step",
    "read_in_windows",
    "release_when_collected",
    "run_in_windows",
    "serving_parts",
    "window_batches",
    # the biLM as a language model (hf_elmo's ElmoLMHeadModel)
    "BiLMLanguageModel",
    "Perplexity",
    "Vocabulary",
    "evaluate",
    "load_language_model",
    "save_language_model",
    "text_sentences",
]
