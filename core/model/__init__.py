"""The model: what the paper defines, as torch modules (Peters et al. 2018, sections 3.1-3.2).

Options (bilm-tf's `options.json` keys), character ids, the char CNN with highway and
projection, the LSTM cells with projections and clips, the biLM, the scalar mix, `Elmo`,
and the window plan for inputs longer than one pass. Lowest layer: imports nothing else
of `elmo_core`. A `BiLM` is handed its recurrence and layer-0 cache (`StackRunner`,
`TokenVectors`) by the runtime; without them it runs the step loop, with no cache.
"""

from __future__ import annotations

from .bilm import BiLM, BiLMOutput, StackOutputs, StackRunner, TokenVectors, check_char_ids, reverse_index
from .char_cnn import BLOCK_TOKENS, HIGHWAY_BLOCK_TOKENS, CharCNN
from .characters import (
    BEGINNING_OF_SENTENCE_CHARACTER,
    BEGINNING_OF_WORD_CHARACTER,
    BOS_TOKEN,
    CHAR_ID_OFFSET,
    END_OF_SENTENCE_CHARACTER,
    END_OF_WORD_CHARACTER,
    EOS_TOKEN,
    PADDING_CHARACTER,
    check_sentences,
    word_to_char_ids,
    words_to_char_ids,
)
from .checks import check_int
from .elmo import Elmo, ElmoOutput, bilm_is_trainable, mix_representations, run_bilm
from .errors import ElmoError, OptionsError, SettingError, WeightFileError, missing_extra
from .highway import Highway
from .lstm import LSTMCellWithProjection, LSTMStack, LSTMState, compile_recurrence, lstm_gates
from .options import PUBLISHED_OPTIONS, BiLMOptions, CharCNNOptions, LSTMOptions
from .precision import (
    bf16_linear,
    bf16_weight,
    check_cpu_bf16,
    check_cpu_precision,
    cpu_bf16_active,
    cpu_bf16_support,
    keep_bf16_copies,
)
from .scalar_mix import (
    LAYER_NORM_SCOPES,
    ScalarMix,
    scalar_mix,
    softmax_weights,
    softmax_weights_backward,
    weighted_layer_sum,
    weighted_layer_sum_backward,
)
from .windows import (
    DEFAULT_WINDOW_TOKENS,
    PlanBatches,
    ReadPieces,
    Window,
    check_window_settings,
    default_context,
    plan_windows,
    read_in_windows,
)

__all__ = [
    "BEGINNING_OF_SENTENCE_CHARACTER",
    "BEGINNING_OF_WORD_CHARACTER",
    "bf16_linear",
    "bf16_weight",
    "BiLM",
    "bilm_is_trainable",
    "BiLMOptions",
    "BiLMOutput",
    "BLOCK_TOKENS",
    "BOS_TOKEN",
    "CHAR_ID_OFFSET",
    "CharCNN",
    "CharCNNOptions",
    "check_char_ids",
    "check_cpu_bf16",
    "check_cpu_precision",
    "check_int",
    "check_sentences",
    "check_window_settings",
    "compile_recurrence",
    "cpu_bf16_active",
    "cpu_bf16_support",
    "default_context",
    "DEFAULT_WINDOW_TOKENS",
    "Elmo",
    "ElmoError",
    "ElmoOutput",
    "END_OF_SENTENCE_CHARACTER",
    "END_OF_WORD_CHARACTER",
    "EOS_TOKEN",
    "Highway",
    "HIGHWAY_BLOCK_TOKENS",
    "keep_bf16_copies",
    "LAYER_NORM_SCOPES",
    "lstm_gates",
    "LSTMCellWithProjection",
    "LSTMOptions",
    "LSTMStack",
    "LSTMState",
    "missing_extra",
    "mix_representations",
    "OptionsError",
    "PADDING_CHARACTER",
    "plan_windows",
    "PlanBatches",
    "PUBLISHED_OPTIONS",
    "read_in_windows",
    "ReadPieces",
    "StackRunner",
    "reverse_index",
    "run_bilm",
    "scalar_mix",
    "ScalarMix",
    "SettingError",
    "softmax_weights",
    "softmax_weights_backward",
    "StackOutputs",
    "TokenVectors",
    "weighted_layer_sum",
    "weighted_layer_sum_backward",
    "WeightFileError",
    "Window",
    "word_to_char_ids",
    "words_to_char_ids",
]
