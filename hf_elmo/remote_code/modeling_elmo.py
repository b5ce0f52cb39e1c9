# This file was generated from hf_elmo/modeling_elmo.py and the elmo_core definitions it
# uses (elmo_core/batching.py, elmo_core/characters.py, elmo_core/precision.py,
# elmo_core/highway.py, elmo_core/errors.py, elmo_core/char_cnn.py, elmo_core/lstm.py,
# elmo_core/recurrence.py, elmo_core/threads.py, elmo_core/token_cache.py,
# elmo_core/bilm.py, elmo_core/quantization.py, elmo_core/memory.py,
# elmo_core/windows.py, elmo_core/embedding.py, elmo_core/scalar_mix.py,
# elmo_core/elmo.py, elmo_core/weights.py, elmo_core/model_folder.py,
# elmo_core/paired_bptt.py), so that a saved model folder needs no elmo-bilm. Do not
# edit it: edit those files and run
#     python -m hf_elmo.remote_code.generate
"""ELMo as a transformers model: ElmoPreTrainedModel, ElmoModel, ElmoForTokenClassification.

The modules are elmo_core's (`BiLM`, `ScalarMix`), held directly as `self.bilm` and
`self.scalar_mixes`, so the state dict has the keys of `elmo_core.Elmo` (`bilm.*`,
`scalar_mixes.*`; `elmo.` in front inside a task model): a folder written by
`elmo_core.save_model_folder` loads with `ElmoModel.from_pretrained`, and one written by
`save_pretrained` loads with `elmo_core.load_model_folder`.

    char_ids        [batch, tokens, 50]  character ids (ElmoTokenizer; no <S>/</S>); also
                                         accepted as input_ids (ElmoTokenizer's input_ids
                                         are one id per token, [batch, tokens])
      -> biLM                            n_layers + 1 layers [batch, tokens, 2P]  = hidden_states
      -> scalar mix(es) + dropout        [batch, tokens, 2P]                      = last_hidden_state
      -> (token classification) linear   [batch, tokens, num_labels]
"""

from __future__ import annotations

import bz2
import contextlib
import ctypes.util
import functools
import gzip
import json
import lzma
import math
import os
import re
import stat
import sys
import threading
import time
import warnings
import weakref
import zlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, IO, Literal, NamedTuple, TextIO, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence
from transformers import PreTrainedModel
from transformers.modeling_outputs import TokenClassifierOutput
from transformers.utils import ModelOutput

from .configuration_elmo import (
    BYTE_ORDER_MARK,
    BiLMOptions,
    COMPRESSIONS,
    CharCNNOptions,
    DECOMPRESSION_ERRORS,
    DEFAULT_WINDOW_TOKENS,
    ELMO_SETTINGS,
    ElmoConfig,
    ElmoError,
    LSTMOptions,
    OptionsError,
    STDIN,
    _ACTIVATIONS,
    _Decompressed,
    _TextLines,
    _Unclosed,
    _check_window,
    _clip,
    check_input_file,
    check_int,
    check_window_settings,
    default_context,
    is_stream,
    open_binary,
    open_text,
    read_json,
    read_text,
)


# ---- elmo_core/batching.py ----------------------------------------------------

def batches_by_token_budget(
    lengths: Sequence[int],
    max_tokens: int,
    *,
    max_batch_size: int | None = None,
    tokens_per_sentence_extra: int = 2,
) -> list[list[int]]:
    """Group sentence indices into batches of at most `max_tokens` padded positions.

    Sentences are sorted longest first (stable, so equal lengths keep their input
    order) and cut greedily. A batch's cost is `rows * (longest + extra)`, where
    `extra` = 2 counts the `<S>`/`</S>` positions the biLM adds. A sentence longer than
    the budget gets a batch of its own.

    Args:
        lengths: Token count of each sentence.
        max_tokens: Budget of padded positions per batch (> 0).
        max_batch_size: Optional cap on sentences per batch.

    Returns:
        Lists of indices into `lengths`; every index appears exactly once.

    Raises:
        ValueError: if `max_tokens` or `max_batch_size` is not a positive integer.
    """
    check_int("max_tokens", max_tokens)
    check_int("max_batch_size", max_batch_size, none_ok=True)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        cost = lengths[i] + tokens_per_sentence_extra
        full = max_batch_size is not None and len(current) >= max_batch_size
        if current and (full or max(longest, cost) * (len(current) + 1) > max_tokens):
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, cost)
    if current:
        batches.append(current)
    return batches


# ---- elmo_core/characters.py --------------------------------------------------

# Raw ids, before the +1 offset (bilm-tf's UnicodeCharsVocabulary numbering).
BEGINNING_OF_SENTENCE_CHARACTER = 256
END_OF_SENTENCE_CHARACTER = 257
BEGINNING_OF_WORD_CHARACTER = 258
END_OF_WORD_CHARACTER = 259
PADDING_CHARACTER = 260
CHAR_ID_OFFSET = 1  # every id is shifted by one so that 0 = padded position

BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


def _marker_word(character: int, max_characters_per_token: int) -> tuple[int, ...]:
    ids = [PADDING_CHARACTER] * max_characters_per_token
    ids[0] = BEGINNING_OF_WORD_CHARACTER
    ids[1] = character
    ids[2] = END_OF_WORD_CHARACTER
    return tuple(i + CHAR_ID_OFFSET for i in ids)


def word_to_char_ids(word: str, max_characters_per_token: int = 50) -> tuple[int, ...]:
    """Character ids of one token, offset included.

    Args:
        word: Any string, including the empty string (-> begin/end-of-word only).
        max_characters_per_token: Slots per token; at most `max - 2` UTF-8 bytes are kept.

    Returns:
        A tuple of `max_characters_per_token` ints in `[1, 261]`.

    Raises:
        TypeError: if `word` is not a `str`.
    """
    if not isinstance(word, str):
        raise TypeError(
            f"tokens must be str; got {type(word).__name__} {word!r}. Pass each sentence as a list of token strings."
        )
    if word == BOS_TOKEN:
        return _marker_word(BEGINNING_OF_SENTENCE_CHARACTER, max_characters_per_token)
    if word == EOS_TOKEN:
        return _marker_word(END_OF_SENTENCE_CHARACTER, max_characters_per_token)
    max_bytes = max_characters_per_token - 2
    # A character is at most 4 UTF-8 bytes, so cutting the string first bounds the work
    # for very long tokens without changing which bytes are kept. Lone surrogates cannot
    # be encoded and are dropped, as in the originals.
    data = word[:max_bytes].encode("utf-8", "ignore")[:max_bytes]
    ids = [PADDING_CHARACTER] * max_characters_per_token
    ids[0] = BEGINNING_OF_WORD_CHARACTER
    ids[1 : len(data) + 1] = data
    ids[len(data) + 1] = END_OF_WORD_CHARACTER
    return tuple(i + CHAR_ID_OFFSET for i in ids)


def check_sentences(sentences: object) -> None:
    """Raise a clear `TypeError` unless `sentences` is a sequence of token-string sequences."""
    if isinstance(sentences, (str, bytes)) or not isinstance(sentences, Sequence):
        raise TypeError(
            "sentences must be a list of sentences, each a list of token strings, e.g. "
            f"[['Hello', 'world', '.']]; got {type(sentences).__name__}."
        )
    for k, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)) or not isinstance(sentence, Sequence):
            raise TypeError(
                f"sentence {k} must be a list of token strings; got {type(sentence).__name__} "
                f"{str(sentence)[:60]!r}. Split raw text into tokens first (e.g. text.split())."
            )
        for token in sentence:
            if not isinstance(token, str):
                raise TypeError(f"sentence {k} holds a {type(token).__name__} ({token!r}); every token must be a str.")


def _word_id_bytes(word: str, max_characters_per_token: int) -> bytes:
    """`word_to_char_ids` as int16 bytes (ids are < 262), cached for ordinary words.

    Words longer than the slots are not cached, so the cache never keeps a huge token
    string alive (and they are rare). The cache holds these 100-byte strings only: a
    cached tuple of 50 Python ints (as an lru_cache on `word_to_char_ids` kept) costs
    about 2 kB per word, 130 MB for a full cache, which made the memory of a long run
    grow with the number of distinct words.
    """
    if len(word) <= max_characters_per_token:
        return _cached_word_id_bytes(word, max_characters_per_token)
    return np.asarray(word_to_char_ids(word, max_characters_per_token), dtype=np.int16).tobytes()


@lru_cache(maxsize=2**14)  # the most frequent words; a miss costs a few microseconds
def _cached_word_id_bytes(word: str, max_characters_per_token: int) -> bytes:
    return np.asarray(word_to_char_ids(word, max_characters_per_token), dtype=np.int16).tobytes()


def words_to_char_ids(
    sentences: Sequence[Sequence[str]], max_characters_per_token: int = 50
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch of sentences to right-padded character ids and a mask.

    Sentence-boundary tokens are *not* added here: the biLM adds `<S>`/`</S>` itself.

    Args:
        sentences: One list of token strings per sentence; empty sentences are allowed.

    Returns:
        `(char_ids, mask)`: char_ids int64 `[batch, tokens, chars]` on the CPU, padded
        positions all zeros; mask bool `[batch, tokens]`, True = real token.
        `tokens` is the longest sentence's length (0 if all are empty).

    Raises:
        TypeError: if `sentences` is not a list of lists of str.
    """
    check_sentences(sentences)
    C = max_characters_per_token
    lengths = torch.tensor([len(s) for s in sentences], dtype=torch.long)
    num_tokens = int(lengths.max()) if len(sentences) else 0
    mask = torch.arange(num_tokens)[None, :] < lengths[:, None]  # [batch, tokens]
    char_ids = torch.zeros(len(sentences), num_tokens, C, dtype=torch.long)
    if num_tokens:
        # One bytes object per word (cached), joined and viewed as a [real tokens, C]
        # array: the Python work per token is a dict lookup, not 50 int conversions.
        flat = b"".join(_word_id_bytes(word, C) for sentence in sentences for word in sentence)
        ids = np.frombuffer(flat, dtype=np.int16).reshape(-1, C)
        char_ids[mask] = torch.from_numpy(ids.astype(np.int64))  # row-major: sentence by sentence
    return char_ids, mask


# ---- elmo_core/precision.py ---------------------------------------------------

_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


@functools.cache
def cpu_bf16_support() -> str | None:
    """The CPU's native bf16 instructions ("amx_bf16" or "avx512_bf16"), or None.

    From `/proc/cpuinfo` on Linux; elsewhere from oneDNN's own check (which does not name
    the instructions: "native").
    """
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return next((f for f in _BF16_FLAGS if f in flags), None)
    except OSError:
        pass
    try:
        return "native" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else None
    except (AttributeError, RuntimeError):  # pragma: no cover - depends on the build
        return None


def check_cpu_bf16() -> None:
    """Raise `ValueError` unless this CPU computes bf16 natively (see the module docstring)."""
    if cpu_bf16_support() is None:
        raise ValueError(
            "bf16 on the CPU needs native bf16 instructions (AVX512-BF16 or AMX), which this CPU "
            "does not have: it would run slower than float32 here. Use float32 (the default; "
            "--precision fp32) or int8 (--precision int8), or bf16 on a GPU."
        )


def cpu_bf16_active(x: torch.Tensor) -> bool:
    """True when `x`'s products should take the bf16 path: CPU, bf16 autocast, no autograd."""
    return (
        x.device.type == "cpu"
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
        and not torch.is_grad_enabled()
    )


# id(weight) -> (a weak reference to it, the key it was copied under, its bf16 copy). Not a
# WeakKeyDictionary (tensors compare element-wise) nor an attribute of the weight (it would
# be pickled with the weight, e.g. by torch.save of a state_dict).
_COPIES: dict[int, tuple[weakref.ref, tuple, torch.Tensor]] = {}


def bf16_weight(weight: torch.Tensor) -> torch.Tensor:
    """A bf16 copy of `weight`, made once and kept until the weight changes or is freed."""
    key = (weight._version, weight.data_ptr(), weight.device, weight.shape)
    kept = _COPIES.get(id(weight))
    if kept is None or kept[0]() is not weight or kept[1] != key:
        with torch.autocast("cpu", enabled=False), torch.no_grad():
            copy = weight.detach().to(torch.bfloat16)
        ident = id(weight)
        kept = (weakref.ref(weight, lambda _, ident=ident: _COPIES.pop(ident, None)), key, copy)
        _COPIES[ident] = kept
    return kept[2]


def bf16_linear(x: torch.Tensor, layer: nn.Linear, bias: bool = True) -> torch.Tensor:
    """`layer(x)` with a bf16 product and a float32 result (bias added in float32).

    Shape: x [..., in] (any float dtype) -> [..., out] float32
    """
    # As one 2-D product: a strided 3-D bf16 input would go through a batched product
    # that copies the weight once per batch entry.
    rows = x.to(torch.bfloat16).reshape(-1, x.shape[-1])  # [rows, in]
    y = F.linear(rows, bf16_weight(layer.weight)).float().reshape(*x.shape[:-1], layer.out_features)
    if bias and layer.bias is not None:
        y += layer.bias
    return y


# ---- elmo_core/highway.py -----------------------------------------------------

class Highway(nn.Module):
    """A stack of highway layers with a ReLU candidate.

    For each layer, with `x` of width F::

        candidate = relu(x @ W_transform + b_transform)
        gate      = sigmoid(x @ W_carry + b_carry)
        y         = gate * candidate + (1 - gate) * x

    Despite its name, bilm-tf's "carry" matrix produces the gate that admits the
    *transformed* value. Both matrices are held in one `Linear(F, 2F)` per layer so that
    a layer costs one matrix product: rows `[:F]` are the candidate (`W_transform`), rows
    `[F:]` the gate (`W_carry`). The non-linearity is ReLU whatever the char CNN's
    activation option says, as in bilm-tf.

    Args:
        size: F, the width of the input and output (the char CNN's `n_filters`).
        n_highway: How many highway layers are stacked (bilm-tf's option `n_highway`;
            2 in the published models). 0 makes the stack the identity.

    Shape:
        x: [..., F] -> [..., F]
    """

    def __init__(self, size: int, n_highway: int) -> None:
        super().__init__()
        self.size = size
        self.layers = nn.ModuleList(nn.Linear(size, 2 * size) for _ in range(n_highway))
        for layer in self.layers:
            self.init_carry_bias(layer)

    def init_carry_bias(self, layer: nn.Linear) -> None:
        """Set b_carry (the gate half of `layer`'s bias, rows [F:]) to its starting value, -2.

        bilm-tf initialised b_carry to -2 so that a new layer starts by mostly passing
        its input through; it only matters when training from scratch. The rest of the
        layer keeps torch's default initialisation.
        """
        nn.init.constant_(layer.bias[self.size :], -2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bf16 = cpu_bf16_active(x)  # bf16 products, float32 gating (elmo_core.precision)
        for layer in self.layers:
            candidate, gate = (bf16_linear(x, layer) if bf16 else layer(x)).chunk(2, dim=-1)  # 2 x [..., F]
            gate = torch.sigmoid(gate)
            x = gate * torch.relu(candidate) + (1 - gate) * x
        return x


# ---- elmo_core/errors.py ------------------------------------------------------

class WeightFileError(ElmoError):
    """A weight file (bilm-tf hdf5, safetensors) or model folder cannot be used.

    The message names the file and, for a dataset or tensor, its name and both shapes.
    """


# ---- elmo_core/char_cnn.py ----------------------------------------------------

BLOCK_TOKENS = 32
"""Tokens per block of the convolutions without a gradient (see `CharCNN.forward`)."""

TRAIN_BLOCK_TOKENS = 1024
"""Tokens per block of the convolutions when a gradient flows (see `CharCNN.forward`)."""

PADDING_ID = PADDING_CHARACTER + CHAR_ID_OFFSET
"""The id of the padding character that fills a token's slots after its end-of-word mark."""

HIGHWAY_BLOCK_TOKENS = 256
"""Tokens per block of the highway layers and the projection (see `CharCNN.forward`)."""


class CharCNN(nn.Module):
    """Token vectors from character ids, one token at a time (no context).

    Parameters, with their bilm-tf hdf5 names:

    - `char_embedding` [n_characters - 1, embedding_dim] (`char_embed`): rows for ids
      1..261. Id 0 marks a padded position and always embeds to zeros; it is a fixed
      zero row, not a parameter, which is why the published parameter counts use 261
      rows.
    - `convolutions[i]` Conv1d(embedding_dim, count_i, width_i) (`CNN/W_cnn_i`, `b_cnn_i`).
    - `highway` (`CNN_high_k`), see `Highway`.
    - `projection` Linear(F, projection_dim) (`CNN_proj`). As in bilm-tf it exists only
      when F != projection_dim (true for every published model); otherwise it is the
      identity.

    Shape:
        char_ids: [num_tokens, max_characters_per_token] int64 -> [num_tokens, projection_dim]
    """

    def __init__(self, options: BiLMOptions) -> None:
        super().__init__()
        cc = options.char_cnn
        self.max_characters_per_token = cc.max_characters_per_token
        self.n_characters = cc.n_characters
        self.char_embedding = nn.Parameter(torch.empty(cc.n_characters - 1, cc.embedding_dim))
        self.reset_parameters()
        self.convolutions = nn.ModuleList(nn.Conv1d(cc.embedding_dim, count, width) for width, count in cc.filters)
        self.activation = cc.activation
        self.highway = Highway(cc.n_filters, cc.n_highway)
        projection_dim = options.lstm.projection_dim
        self.projection: nn.Module = (
            nn.Linear(cc.n_filters, projection_dim) if cc.n_filters != projection_dim else nn.Identity()
        )

    def reset_parameters(self) -> None:
        """Draw `char_embedding` afresh, uniform in [-1, 1] (bilm-tf's initialiser).

        Covers the char CNN's own parameter only; its convolutions, highway and
        projection are torch modules with their own initialisation.
        """
        nn.init.uniform_(self.char_embedding, -1.0, 1.0)

    def embedding_table(self) -> torch.Tensor:
        """The full [n_characters, embedding_dim] table, with the zero row for id 0."""
        zero = self.char_embedding.new_zeros(1, self.char_embedding.shape[1])
        return torch.cat([zero, self.char_embedding], dim=0)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        table = self.embedding_table()
        if torch.is_grad_enabled() and char_ids.shape[0]:
            return self._encode_for_training(table, char_ids)
        bf16 = cpu_bf16_active(table)  # bf16 products, float32 results (elmo_core.precision)
        # Every token is encoded on its own, so the tokens can go in blocks. The
        # convolutions go BLOCK_TOKENS at a time: a bank's full output is
        # [tokens, count, chars - width + 1] before the max-pool (180 kB per token for the
        # original model's width-7 bank), so a block bounds it at about 6 MB whatever the
        # batch. The highway and projection go HIGHWAY_BLOCK_TOKENS at a time: their
        # weights (32 MB per highway layer of the original model) are read once per block,
        # so small blocks cost a full read of them per 32 tokens (measured: half the char
        # CNN's time), while the highway's [tokens, 2F] output is 16 kB per token.
        features = torch.cat([self._convolve(table, block, bf16) for block in char_ids.split(BLOCK_TOKENS)])
        return torch.cat([self._project(block, bf16) for block in features.split(HIGHWAY_BLOCK_TOKENS)])

    def _encode_for_training(self, table: torch.Tensor, char_ids: torch.Tensor) -> torch.Tensor:
        """`forward` with a gradient: the same values, over fewer character slots.

        Every slot after a token's end-of-word mark holds the padding character, so every
        window that starts at or after the longest token's last real slot (`longest`)
        sees the same `width` padding characters and gives the same value. Cutting the
        slots to `longest + max width` keeps every window that overlaps a real character
        and one all-padding window per bank: the max-pool, and so the output and its
        gradient, are those of all `max_characters_per_token` slots (up to float
        rounding), for 2-3x less convolution on real text (words of 5-15 bytes). The
        blocks are larger than without a gradient: under autograd the max-pool keeps
        only its argmax per filter, so a bank's full output is transient either way, and
        fewer, larger blocks cost fewer operator launches forward and backward.
        """
        longest = int((char_ids != PADDING_ID).sum(dim=1).max())  # real slots, marks included
        widest = max(conv.kernel_size[0] for conv in self.convolutions)
        char_ids = char_ids[:, : min(char_ids.shape[1], longest + widest)]  # [tokens, kept chars]
        blocks = char_ids.split(TRAIN_BLOCK_TOKENS)
        return torch.cat([self._project(self._convolve(table, block, False), False) for block in blocks])

    def _convolve(self, table: torch.Tensor, char_ids: torch.Tensor, bf16: bool) -> torch.Tensor:
        """Char embedding, convolutions, max-pool and activation. Shape: [tokens, chars] -> [tokens, F]"""
        x = F.embedding(char_ids, table)  # [tokens, chars, E]
        x = x.transpose(1, 2)  # [tokens, E, chars]: Conv1d wants channels first
        if bf16:
            x = x.to(torch.bfloat16)
        grad = torch.is_grad_enabled()
        pooled = []
        for conv in self.convolutions:
            # Max over all `chars - width + 1` windows, padding-char slots included,
            # then the activation (TF order; both are monotone, so order is immaterial).
            if bf16:  # the bias is the same in every window: added after the max, in float32
                y = F.conv1d(x, bf16_weight(conv.weight)).amax(dim=2).float() + conv.bias
            elif grad:
                # With a gradient, `max` (which keeps the argmax for its backward) rather than
                # `amax` (whose backward compares the whole bank output with the max again).
                y = conv(x).max(dim=2).values  # [tokens, count]
            else:
                y = conv(x).amax(dim=2)  # [tokens, count]
            pooled.append(torch.relu(y) if self.activation == "relu" else torch.tanh(y))
        return torch.cat(pooled, dim=1)  # [tokens, F]

    def _project(self, features: torch.Tensor, bf16: bool) -> torch.Tensor:
        """Highway layers, then the projection. Shape: [tokens, F] -> [tokens, P]"""
        highway = self.highway(features)
        if bf16 and isinstance(self.projection, nn.Linear):
            return bf16_linear(highway, self.projection)
        return self.projection(highway)


# ---- elmo_core/lstm.py --------------------------------------------------------

LSTMState = tuple[torch.Tensor, torch.Tensor]
"""(h [batch, projection_dim], c [batch, dim]) of one layer."""

FORGET_BIAS = 1.0  # TensorFlow LSTMCell's default, added at run time

INPUT_BLOCK_ROWS = 128
"""Rows (steps x batch) per input product: large enough for an efficient matrix product,
small enough that the block's pre-activations stay small (4 MB for the original model)."""


def lstm_gates(z: torch.Tensor, c: torch.Tensor, cell_clip: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The element-wise part of one step: new cell state and the gated output.

    Args:
        z: Pre-activations with the forget bias already added, blocks i, j, f, o.
        c: Previous cell state.
        cell_clip: Clip the new cell state to [-cell_clip, cell_clip] (None/0: no clip).

    Returns:
        `(c', sigmoid(o) * tanh(c'))`, the second before the projection.

    Shape:
        z: [n, 4 * dim]; c: [n, dim] -> ([n, dim], [n, dim])
    """
    i, j, f, o = z.chunk(4, dim=1)
    c_t = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(j)
    if cell_clip:
        c_t = c_t.clamp(-cell_clip, cell_clip)
    return c_t, torch.sigmoid(o) * torch.tanh(c_t)


def _lstm_gates_in_place(
    z: torch.Tensor, c: torch.Tensor, cell_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`lstm_gates` computed inside `z`, which it overwrites (inference only: no autograd).

    The same operations in the same order, so the same values, without the eight
    [n, dim] temporaries; both results are views into `z`.
    """
    i, j, f, o = z.chunk(4, dim=1)
    c_t = f.sigmoid_().mul_(c).add_(i.sigmoid_().mul_(j.tanh_()))
    if cell_clip:
        c_t.clamp_(-cell_clip, cell_clip)
    return c_t, o.sigmoid_().mul_(torch.tanh(c_t))


_COMPILED_GATES = None


def _compiled_gates():
    """`lstm_gates` fused into one kernel by torch.compile (compiled once, on first use)."""
    global _COMPILED_GATES
    if _COMPILED_GATES is None:
        _COMPILED_GATES = torch.compile(lstm_gates, dynamic=True)
    return _COMPILED_GATES


class LSTMCellWithProjection(nn.Module):
    """One LSTM layer of one direction, run over a whole (sorted, time-major) batch.

    Parameters (bilm-tf names in brackets; torch `Linear` weights are the transposes):
        input_linear: Linear(input_size, 4 * dim) with bias (`W_0[:input_size]`, `B`).
        state_linear: Linear(projection_dim, 4 * dim), no bias (`W_0[input_size:]`).
        state_projection: Linear(dim, projection_dim), no bias (`W_P_0`).
    The 4 * dim rows keep the file's gate order i, j, f, o.
    """

    def __init__(
        self,
        input_size: int,
        dim: int,
        projection_dim: int,
        cell_clip: float | None = None,
        proj_clip: float | None = None,
    ) -> None:
        super().__init__()
        self.input_size = input_size
        self.dim = dim
        self.projection_dim = projection_dim
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip
        self.compile_recurrence = False  # see compile_recurrence()
        self.input_linear = nn.Linear(input_size, 4 * dim)
        self.state_linear = nn.Linear(projection_dim, 4 * dim, bias=False)
        self.state_projection = nn.Linear(dim, projection_dim, bias=False)

    def forward(
        self,
        inputs: torch.Tensor,
        batch_sizes: list[int],
        initial_state: LSTMState | None = None,
        fused: bool | None = None,
        final_state: bool = True,
    ) -> tuple[torch.Tensor, LSTMState | None]:
        """Run the cell over every time step.

        Args:
            inputs: Time-major inputs, rows sorted by length (longest first).
            batch_sizes: Rows still running at each step (non-increasing, as in
                `PackedSequence`); `batch_sizes[t] <= batch`.
            initial_state: `(h, c)` to start from; zeros when omitted.
            fused: Run as one `torch.lstm` call (see the module docstring). None: when
                it is exact (`can_fuse`). Rows that run no step at all always take the
                step loop.
            final_state: False when the caller does not read the final `(h, c)` (a
                stateless biLM); the fused path on the CPU then runs the padded batch,
                whose backward avoids the packed one's zero-fill of the whole input
                gradient at every step.

        Raises:
            ValueError: for `fused=True` on a cell that clips or is int8.

        Returns:
            `(outputs, (h, c))`: outputs are zero where a row has ended; `(h, c)` is each
            row's state after its own last step (None with `final_state=False`).

        Shape:
            inputs: [steps, batch, input_size]
            outputs: [steps, batch, projection_dim]
            h: [batch, projection_dim]; c: [batch, dim]
        """
        if fused and not self.can_fuse:
            raise ValueError(
                "fused=True needs a cell without cell_clip/proj_clip and with float (not int8) weights: "
                "torch's fused LSTM kernels cannot clip. Leave fused=None to choose automatically."
            )
        if (self.can_fuse if fused is None else fused) and batch_sizes and batch_sizes[0] == inputs.shape[1]:
            return self._forward_fused(inputs, batch_sizes, initial_state, final_state)
        outputs, state = self._forward_steps(inputs, batch_sizes, initial_state)
        return outputs, state if final_state else None

    def _forward_steps(
        self, inputs: torch.Tensor, batch_sizes: list[int], initial_state: LSTMState | None
    ) -> tuple[torch.Tensor, LSTMState]:
        """`forward` as a Python loop over the steps (the reference; clips applied)."""
        num_steps, batch_size, _ = inputs.shape
        D = self.dim
        if initial_state is None:
            h = inputs.new_zeros(batch_size, self.projection_dim)
            c = inputs.new_zeros(batch_size, D)
        else:
            h, c = initial_state
        outputs = []
        grad = torch.is_grad_enabled()
        if getattr(self, "compile_recurrence", False):
            gates = _compiled_gates()
        else:
            gates = lstm_gates if grad else _lstm_gates_in_place
        # bf16 products with float32 pre-activations, gates and state (elmo_core.precision).
        float_linears = self.has_float_linears
        bf16 = cpu_bf16_active(inputs) and float_linears
        recurrent = bf16_weight(self.state_linear.weight) if bf16 else None
        pre: tuple[torch.Tensor, ...] | None = None
        block = max(1, -(-INPUT_BLOCK_ROWS // max(batch_size, 1)))  # steps per input product
        for t in range(num_steps):
            if t % block == 0:
                pre = pre_t = None  # free the last block before computing the next
                pre = self._input_products(inputs[t : t + block], bf16).unbind(0)
            n = batch_sizes[t]
            pre_t = pre[t % block]
            if grad:
                z = pre_t[:n] + self.state_linear(h[:n])  # [n, 4D]
            elif bf16:  # a bf16 [n, 4D] product, added to the float32 pre-activations
                z = pre_t[:n] + F.linear(h[:n].to(torch.bfloat16), recurrent)
            elif float_linears:  # pre + h @ W_h in one product: one [n, 4D] tensor per step
                z = torch.addmm(pre_t[:n], h[:n], self.state_linear.weight.t())
            else:  # int8 layers (elmo_core.quantization): through the module
                z = self.state_linear(h[:n])
                z += pre_t[:n]  # in place: one [n, 4D] tensor per step, not two
            c_t, gated = gates(z, c[:n], self.cell_clip)  # [n, D] each
            h_t = bf16_linear(gated, self.state_projection) if bf16 else self.state_projection(gated)  # [n, P]
            if self.proj_clip:
                h_t = h_t.clamp(-self.proj_clip, self.proj_clip)
            if n == batch_size:
                h, c = h_t, c_t
            else:  # rows n.. have ended: keep their final state
                h = torch.cat([h_t, h[n:].to(h_t.dtype)])
                c = torch.cat([c_t, c[n:].to(c_t.dtype)])
            if grad:  # out of place, for autograd
                outputs.append(F.pad(h_t, (0, 0, 0, batch_size - n)))
            else:  # written in place: no per-step padded copies and no stack (half the memory)
                if t == 0:
                    output = h_t.new_zeros(num_steps, batch_size, h_t.shape[1])
                output[t, :n] = h_t
        if num_steps == 0:
            return inputs.new_zeros(0, batch_size, self.projection_dim), (h, c)
        return (torch.stack(outputs) if outputs else output), (h, c)

    def _input_products(self, inputs: torch.Tensor, bf16: bool = False) -> torch.Tensor:
        """`x @ W_x + B` plus the forget bias, for a block of steps.

        The products are computed a block of at least `INPUT_BLOCK_ROWS` rows at a time:
        large enough for an efficient matrix product, while the [steps, batch, 4D]
        pre-activations of a whole batch (130 MB for the original model at batch 32) are
        never held at once. Returned as one tensor; `forward` takes it apart with
        `unbind`, because indexing `pre[t]` would make each step's backward zero-fill a
        gradient of the whole block.

        Shape: inputs [steps, batch, input_size] -> [steps, batch, 4D]
        """
        # Through the Linear module (not its weight), so that int8 dynamic quantisation
        # (`elmo_core.quantization`) replaces it too.
        if bf16:
            pre = bf16_linear(inputs, self.input_linear)
        else:  # as one 2-D product: a strided 3-D input would take a slower batched product
            pre = self.input_linear(inputs.reshape(-1, inputs.shape[-1])).view(*inputs.shape[:-1], 4 * self.dim)
        pre[..., 2 * self.dim : 3 * self.dim] += FORGET_BIAS  # block order i, j, f, o; in place: no copy
        return pre

    @property
    def has_float_linears(self) -> bool:
        """False once int8 quantisation has replaced the Linear layers."""
        return all(type(m) is nn.Linear for m in (self.input_linear, self.state_linear, self.state_projection))

    @property
    def can_fuse(self) -> bool:
        """True when one `torch.lstm` call computes this cell exactly: no clips, float weights."""
        return not self.cell_clip and not self.proj_clip and self.has_float_linears

    def torch_lstm_weights(self) -> list[torch.Tensor]:
        """This cell's parameters in `torch.lstm`'s layout (differentiable functions of them).

        `[w_ih, w_hh, b_ih, b_hh, w_hr]`, gate blocks reordered from bilm-tf's i, j, f, o
        to torch's i, f, g, o (j is torch's g), the +1 forget bias folded into `b_ih`
        and `b_hh` zero.

        Shape: [4D, input_size], [4D, P], [4D], [4D], [P, D]
        """

        def reorder(w: torch.Tensor) -> torch.Tensor:
            i, j, f, o = w.chunk(4, dim=0)
            return torch.cat([i, f, j, o])

        i, j, f, o = self.input_linear.bias.chunk(4)
        b_ih = torch.cat([i, f + FORGET_BIAS, j, o])
        return [
            reorder(self.input_linear.weight),
            reorder(self.state_linear.weight),
            b_ih,
            torch.zeros_like(b_ih),
            self.state_projection.weight,
        ]

    def _forward_fused(
        self, inputs: torch.Tensor, batch_sizes: list[int], initial_state: LSTMState | None, final_state: bool
    ) -> tuple[torch.Tensor, LSTMState | None]:
        """`forward` as one `torch.lstm` call (see the module docstring).

        The batch goes in packed, so each row stops at its own length, or, on the CPU
        when nobody reads the final state, padded: every row then runs every step, but
        the rows are sorted and right-padded, so a row's real steps come before its
        padding and are unchanged; its outputs past its length are zeroed.
        Every row must run at least one step (`batch_sizes[0] == batch`).
        """
        num_steps, batch_size, _ = inputs.shape
        # Row b runs for as many steps as have batch_sizes[t] > b.
        sizes = torch.tensor(batch_sizes)
        lengths = (sizes[:, None] > torch.arange(batch_size)[None, :]).sum(dim=0)  # [batch]
        weights = self.torch_lstm_weights()
        dtype = weights[0].dtype  # float32 state and products, also under autocast (see below)
        h0, c0 = self._fused_initial_state(inputs, initial_state, dtype)
        # torch.lstm's flags after the weights: has_biases, num_layers, dropout, train, bidirectional.
        flags = (True, 1, 0.0, self.training, False)
        padded = not final_state and inputs.device.type == "cpu"
        # The fused kernels take one dtype for inputs, weights and state; autocast does not
        # cover them, so under autocast the recurrence runs in the weights' dtype. cuDNN
        # warns that the reordered weights are not one flat buffer (they are copied into
        # one per call, small next to the recurrence); oneDNN that it leaves projections to
        # torch's own loop, which is the loop we want.
        with torch.autocast(inputs.device.type, enabled=False), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="RNN module weights are not part of single contiguous chunk")
            warnings.filterwarnings("ignore", message="LSTM with projections is not supported with oneDNN")
            if padded:
                outputs, _, _ = torch.lstm(inputs.to(dtype), (h0, c0), weights, *flags, False)  # batch_first=False
                active = torch.arange(num_steps)[:, None] < lengths[None, :]  # [steps, batch]
                return outputs * active[..., None].to(outputs.device), None
            packed = pack_padded_sequence(inputs, lengths, enforce_sorted=True)
            data, h, c = torch.lstm(packed.data.to(dtype), packed.batch_sizes, (h0, c0), weights, *flags)
        outputs, _ = pad_packed_sequence(
            PackedSequence(data, packed.batch_sizes), total_length=num_steps
        )  # [steps, batch, P], zeros where a row has ended
        return outputs, ((h[0], c[0]) if final_state else None)

    def _fused_initial_state(
        self, inputs: torch.Tensor, initial_state: LSTMState | None, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(h0, c0) as `torch.lstm` takes them: [1, batch, projection_dim] and [1, batch, dim], in `dtype`."""
        if initial_state is None:
            batch_size = inputs.shape[1]
            h0 = inputs.new_zeros(1, batch_size, self.projection_dim, dtype=dtype)
            c0 = inputs.new_zeros(1, batch_size, self.dim, dtype=dtype)
            return h0, c0
        h0, c0 = (s.unsqueeze(0).to(dtype) for s in initial_state)
        return h0, c0


class LSTMStack(nn.Module):
    """`n_layers` cells of one direction, with bilm-tf's residual connections.

    Layer 0 reads the token vectors; layer l >= 1 reads layer l-1's output. With
    `use_skip_connections`, every layer l >= 1 reports `cell output + layer input`, and
    that sum is also the next layer's input; the recurrent h inside a layer is the cell
    output *without* the residual (TensorFlow `ResidualWrapper`; docs/bilm_tf.md §5).

    Dropout (training only) is applied to every layer's input, as bilm-tf trained it
    (0.1 for the published models; 0 at inference).
    """

    def __init__(
        self,
        input_size: int,
        dim: int,
        projection_dim: int,
        n_layers: int,
        cell_clip: float | None,
        proj_clip: float | None,
        use_skip_connections: bool,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.use_skip_connections = use_skip_connections
        self.dropout = dropout
        self.layers = nn.ModuleList(
            LSTMCellWithProjection(input_size if k == 0 else projection_dim, dim, projection_dim, cell_clip, proj_clip)
            for k in range(n_layers)
        )

    def forward(
        self,
        inputs: torch.Tensor,
        batch_sizes: list[int],
        initial_states: list[LSTMState | None] | None = None,
        fused: bool | None = None,
        final_state: bool = True,
    ) -> tuple[list[torch.Tensor], list[LSTMState | None]]:
        """Run every layer (`fused` and `final_state` as in `LSTMCellWithProjection.forward`).

        Shape:
            inputs: [steps, batch, input_size], time-major, rows sorted longest first
            returns: one [steps, batch, projection_dim] output per layer (residual
            included), and each layer's final `(h, c)`.
        """
        outputs: list[torch.Tensor] = []
        final_states: list[LSTMState] = []
        x = inputs
        for k, layer in enumerate(self.layers):
            layer_input = F.dropout(x, self.dropout, self.training) if self.dropout else x
            state = initial_states[k] if initial_states is not None else None
            y, final = layer(layer_input, batch_sizes, state, fused=fused, final_state=final_state)
            if k > 0 and self.use_skip_connections:
                # bilm-tf wraps ResidualWrapper in DropoutWrapper: the residual adds the
                # (dropped-out) input the cell saw.
                y = y + layer_input
            outputs.append(y)
            final_states.append(final)
            x = y
        return outputs, final_states


# ---- elmo_core/recurrence.py --------------------------------------------------

def resolve_recurrence(
    mode: str, stacks: tuple[LSTMStack, LSTMStack], device: torch.device, needs_grad: bool, stateful: bool
) -> str:
    """The concrete path ("step", "fused", "paired" or "captured") that `mode` means here.

    Raises:
        ValueError: when the asked path cannot compute this model exactly: "fused" with
            clips or int8 cells; "paired" int8 or stateful; "captured" off CUDA, with
            gradients, int8 or stateful.
    """
    cells = [cell for stack in stacks for cell in stack.layers]
    can_fuse = all(cell.can_fuse for cell in cells)
    can_capture = device.type == "cuda" and not needs_grad and not stateful and not _quantized(cells)
    if mode == "auto":
        if device.type != "cuda":
            # Training a clip-free biLM: both directions per step and a written-out
            # backward (`elmo_core.paired_bptt`); everything else keeps the step loop.
            return "paired" if needs_grad and can_fuse and not stateful else "step"
        if can_fuse:
            return "fused"
        return "captured" if can_capture else "step"
    if mode == "fused" and not can_fuse:
        raise ValueError(
            "recurrence='fused' needs cells without cell_clip/proj_clip and with float (not int8) "
            "weights: torch's fused LSTM kernels cannot clip. Use 'auto', which falls back to the step loop."
        )
    if mode == "captured" and not can_capture:
        raise ValueError(
            "recurrence='captured' replays CUDA graphs: it needs the model on a CUDA device, no "
            f"gradient, stateful=False and float weights; here device={device}, needs_grad={needs_grad}, "
            f"stateful={stateful}. Use 'auto' (or 'paired', the same computation without the graph)."
        )
    if mode == "paired" and (_quantized(cells) or stateful):
        raise ValueError(
            "recurrence='paired' needs float weights and starts every row from zero: an int8 or "
            "stateful biLM runs the step loop ('auto' or 'step')."
        )
    return mode


def _quantized(cells) -> bool:  # noqa: ANN001
    return not all(cell.has_float_linears for cell in cells)


def reverse_index(lengths: torch.Tensor, num_steps: int) -> torch.Tensor:
    """Index that reverses each row over its own length and leaves its padding in place.

    Used with `gather` on a time-major tensor; it is its own inverse.

    Shape: lengths [batch] int64 -> [num_steps, batch] int64
    """
    steps = torch.arange(num_steps, device=lengths.device)[:, None]  # [steps, 1]
    row_len = lengths[None, :]  # [1, batch]
    return torch.where(steps < row_len, row_len - 1 - steps, steps)


def bucket_shape(batch_size: int, num_steps: int) -> tuple[int, int]:
    """The (batch, steps) a captured graph is recorded for, >= the given shape.

    Steps round up to a multiple of 8 (16 above 64, 64 above 256) and rows to a power of
    two (a multiple of 256 above 1024), so a corpus needs a few dozen graphs at most and
    a batch computes at most about 2x its rows and 1.25x its steps (the extra rows and
    steps are masked and never read).

    Raises:
        ValueError: for sizes < 1.
    """
    if batch_size < 1 or num_steps < 1:
        raise ValueError(f"batch_size and num_steps must be >= 1; got {batch_size} and {num_steps}.")
    step_unit = 8 if num_steps <= 64 else 16 if num_steps <= 256 else 64
    steps = -(-num_steps // step_unit) * step_unit
    rows = 1 << (batch_size - 1).bit_length() if batch_size <= 1024 else -(-batch_size // 256) * 256
    return rows, steps


def _paired_weights(forward_cell, backward_cell):  # noqa: ANN001, ANN202
    """Both directions' weights stacked on a leading axis of 2, as right-hand operands.

    Shape: W_x [2, in, 4D], B [2, 1, 4D] (forget bias added), W_h [2, P, 4D], W_P [2, D, P]
    """
    cells = (forward_cell, backward_cell)
    D = forward_cell.dim
    w_x = torch.stack([c.input_linear.weight.t() for c in cells])
    bias = torch.stack([c.input_linear.bias for c in cells])[:, None, :].clone()
    bias[..., 2 * D : 3 * D] += FORGET_BIAS  # block order i, j, f, o
    w_h = torch.stack([c.state_linear.weight.t() for c in cells])
    w_p = torch.stack([c.state_projection.weight.t() for c in cells])
    return w_x, bias, w_h, w_p


def _paired_layer(forward_cell, backward_cell, x: torch.Tensor, active: torch.Tensor):  # noqa: ANN001
    """One layer of both directions over a fixed shape (see the module docstring).

    Shape: x [2, steps, batch, in]; active [steps, batch] bool -> [2, steps, batch, P]
    """
    w_x, bias, w_h, w_p = _paired_weights(forward_cell, backward_cell)
    _, num_steps, batch_size, _ = x.shape
    D, P = forward_cell.dim, forward_cell.projection_dim
    cell_clip, proj_clip = forward_cell.cell_clip, forward_cell.proj_clip
    pre = torch.baddbmm(bias, x.reshape(2, num_steps * batch_size, -1), w_x)  # [2, steps * batch, 4D]
    pre = pre.view(2, num_steps, batch_size, 4 * D)
    # The state stays float32 under autocast; only the products run in its dtype.
    h = pre.new_zeros(2, batch_size, P, dtype=torch.float32)
    c = pre.new_zeros(2, batch_size, D, dtype=torch.float32)
    outputs = []
    for t, pre_t in enumerate(pre.unbind(1)):
        z = torch.baddbmm(pre_t, h, w_h)  # [2, batch, 4D]
        c_t, gated = lstm_gates(z.view(2 * batch_size, 4 * D).float(), c.view(2 * batch_size, D), cell_clip)
        h_t = torch.bmm(gated.view(2, batch_size, D), w_p).float()  # [2, batch, P]
        if proj_clip:
            h_t = h_t.clamp(-proj_clip, proj_clip)
        keep = active[t][None, :, None]  # [1, batch, 1]
        h = torch.where(keep, h_t, h)
        c = torch.where(keep, c_t.view(2, batch_size, D), c)
        outputs.append(h_t * keep)
    return torch.stack(outputs, dim=1)  # [2, steps, batch, P]


def paired_stacks(
    stacks: tuple[LSTMStack, LSTMStack], tokens: torch.Tensor, lengths: torch.Tensor
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Both LSTM stacks over a batch, one batched product per step for both directions.

    Args:
        stacks: `(forward_layers, backward_layers)` of a `BiLM`.
        tokens: Token vectors (layer 0), batch-major, right-padded.
        lengths: Real positions per row (0 allowed: such a row stays zero).

    Returns:
        `(forward outputs, backward outputs)`, one tensor per layer, each time-major
        [steps, batch, P] in the input's row order and time direction, zero past a row's
        length; residual connections and dropout as in `LSTMStack.forward`.
    """
    forward_stack, backward_stack = stacks
    cells = [cell for stack in stacks for cell in stack.layers]
    needs_grad = torch.is_grad_enabled() and any(p.requires_grad for s in stacks for p in s.parameters())
    if needs_grad and all(cell.can_fuse for cell in cells) and bool((lengths > 0).all()):

        return paired_training_stacks(stacks, tokens, lengths)
    num_steps = tokens.shape[1]
    x = tokens.transpose(0, 1)  # [steps, batch, P]
    reverse = reverse_index(lengths, num_steps)[..., None]  # [steps, batch, 1]

    def flip(t: torch.Tensor) -> torch.Tensor:
        return t.gather(0, reverse.expand(-1, -1, t.shape[-1]))

    active = torch.arange(num_steps, device=tokens.device)[:, None] < lengths[None, :]  # [steps, batch]
    layer_input = torch.stack([x, flip(x)])  # [2, steps, batch, P]
    outputs = []
    for k, (fc, bc) in enumerate(zip(forward_stack.layers, backward_stack.layers)):
        if forward_stack.dropout:
            layer_input = F.dropout(layer_input, forward_stack.dropout, forward_stack.training)
        y = _paired_layer(fc, bc, layer_input, active)
        if k > 0 and forward_stack.use_skip_connections:
            y = y + layer_input  # the residual adds the (dropped-out) input, as LSTMStack does
        outputs.append(y)
        layer_input = y
    return [y[0] for y in outputs], [flip(y[1]) for y in outputs]  # [steps, batch, P] each


class CapturedRecurrence:
    """`paired_stacks` recorded as CUDA graphs, one per bucketed (batch, steps) shape.

    A batch is copied into the static input buffers of its bucket's graph (rows and steps
    beyond the batch get length 0 and are never read), the graph is replayed, and the
    outputs are copied out of the graph's memory before the next replay. Graphs are
    recorded on first use of a shape (one warm-up run on a side stream, then capture)
    and kept in an LRU of `max_graphs`; all graphs share one memory pool, which is safe
    because each replay recomputes everything it reads from its own static inputs and
    the weights. A change of the weights' storage (`.to()`, a new state dict assigned
    by reference) or of the autocast dtype records new graphs; in-place changes of the
    weights are read by the next replay.

    Args:
        max_graphs: Graphs kept (each holds its static inputs; the intermediates live
            in the shared pool).
    """

    def __init__(self, max_graphs: int = 32) -> None:
        self.max_graphs = max_graphs
        self._graphs: OrderedDict[tuple, tuple] = OrderedDict()
        self._pool = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # graphs are not picklable; rebuild on first use
        return {"max_graphs": self.max_graphs}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["max_graphs"])

    def __len__(self) -> int:
        return len(self._graphs)

    def __call__(
        self, stacks: tuple[LSTMStack, LSTMStack], tokens: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Same contract as `paired_stacks`; outputs are fresh tensors (not graph memory)."""
        batch_size, num_steps, width = tokens.shape
        rows, steps = bucket_shape(batch_size, num_steps)
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None
        weights = tuple(p.data_ptr() for stack in stacks for p in stack.parameters())
        key = (rows, steps, width, tokens.dtype, dtype, tokens.device, weights)
        with self._lock:
            graph, static_tokens, static_lengths, static_out = self._graph(key, stacks, tokens)
            static_tokens.zero_()
            static_tokens[:batch_size, :num_steps].copy_(tokens)
            static_lengths.zero_()
            static_lengths[:batch_size].copy_(lengths)
            graph.replay()
            forward_out, backward_out = static_out
            return (
                [y[:num_steps, :batch_size].clone() for y in forward_out],
                [y[:num_steps, :batch_size].clone() for y in backward_out],
            )

    def _graph(self, key: tuple, stacks, tokens: torch.Tensor) -> tuple:  # noqa: ANN001
        if key in self._graphs:
            self._graphs.move_to_end(key)
            return self._graphs[key]
        rows, steps, width = key[:3]
        static_tokens = tokens.new_zeros(rows, steps, width)
        static_lengths = torch.zeros(rows, dtype=torch.long, device=tokens.device)
        static_lengths[:1] = 1  # warm-up on a non-empty batch
        # Autocast's cache of cast weights must stay off: a graph that read a cached cast
        # would read freed memory once the caller's autocast region ends.
        dtype = key[4]
        no_cache = torch.autocast("cuda", dtype=dtype, cache_enabled=False) if dtype else contextlib.nullcontext()
        side = torch.cuda.Stream(device=tokens.device)
        side.wait_stream(torch.cuda.current_stream(tokens.device))
        with torch.cuda.stream(side), no_cache:  # warm-up outside the graph, as torch.cuda.graphs asks
            paired_stacks(stacks, static_tokens, static_lengths)
        torch.cuda.current_stream(tokens.device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool), no_cache:
            static_out = paired_stacks(stacks, static_tokens, static_lengths)
        entry = (graph, static_tokens, static_lengths, static_out)
        self._graphs[key] = entry
        while len(self._graphs) > self.max_graphs:
            self._graphs.popitem(last=False)
        return entry


# ---- elmo_core/threads.py -----------------------------------------------------

ThreadPolicy = str | int
"""`"auto"` (the default), `"torch"` (leave torch's count alone) or a whole number of threads."""

ENV_VAR = "ELMO_THREADS"
MIN_INTERVAL_S = 0.1
"""Shortest interval over which `/proc/stat` is read (10 clock ticks per CPU at 100 Hz)."""
STALE_AFTER_S = 2.0
"""After a pause this long the last interval says little about now: look at runnable tasks."""

_PROC = Path("/proc")
_CGROUP = Path("/sys/fs/cgroup")


def _parse_policy(value: object, source: str) -> ThreadPolicy:
    if isinstance(value, str) and value.strip().lower() in ("auto", "torch"):
        return value.strip().lower()
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(
        f"{source} must be 'auto', 'torch' or a whole number of threads >= 1; got {value!r}. "
        "Use 'auto' to follow the free CPUs, 'torch' to keep torch's own setting."
    )


_policy: ThreadPolicy | None = None  # None: not chosen yet; ELMO_THREADS is read at first use


def thread_policy() -> ThreadPolicy:
    """The policy in force (`set_thread_policy`, else `ELMO_THREADS`, else "auto").

    Raises:
        ValueError: for an `ELMO_THREADS` that is not "auto", "torch" or a whole number >= 1.
    """
    global _policy
    if _policy is None:
        _policy = _parse_policy(os.environ.get(ENV_VAR, "auto"), ENV_VAR)
    return _policy


# ---------------------------------------------------------------- usable CPUs
def _affinity() -> set[int] | None:
    try:
        return os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux
        return None


def _cgroup_quota(proc: Path | None = None, cgroup: Path | None = None) -> float | None:
    """The tightest CPU quota (in CPUs) of this process's cgroup and its parents, or None.

    cgroup v2: `cpu.max` = "QUOTA PERIOD" or "max PERIOD"; v1: `cpu.cfs_quota_us` (-1 = none)
    over `cpu.cfs_period_us`.
    """
    proc, cgroup = proc or _PROC, cgroup or _CGROUP
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: walk from the process's group up to the root
            folder = cgroup / path.lstrip("/")
            while True:
                with contextlib.suppress(OSError, ValueError):
                    quota, period = (folder / "cpu.max").read_text().split()
                    if quota != "max":
                        quotas.append(int(quota) / int(period))
                if folder == cgroup or cgroup not in folder.parents:
                    break
                folder = folder.parent
        elif "cpu" in controllers.split(","):
            for folder in (cgroup / "cpu" / path.lstrip("/"), cgroup / "cpu,cpuacct" / path.lstrip("/")):
                with contextlib.suppress(OSError, ValueError):
                    quota_us = int((folder / "cpu.cfs_quota_us").read_text())
                    period_us = int((folder / "cpu.cfs_period_us").read_text())
                    if quota_us > 0:
                        quotas.append(quota_us / period_us)
    return min(quotas) if quotas else None


@functools.cache
def _quota() -> float | None:
    return _cgroup_quota()  # read once: a process's cgroup rarely changes


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity, capped by a cgroup quota (at least 1).

    A quota of 1.5 CPUs counts as 1: a thread per whole CPU the quota pays for.
    """
    affinity = _affinity()
    count = len(affinity) if affinity else (os.cpu_count() or 1)
    quota = _quota()
    if quota is not None:
        count = min(count, math.floor(quota))
    return max(1, count)


# ---------------------------------------------------------------- other processes' load
@dataclass(frozen=True)
class _Sample:
    wall: float  # time.monotonic()
    busy_ticks: int  # summed over the usable CPUs
    total_ticks: int
    cpus: int
    own_cpu_s: float  # time.process_time(): every thread of this process


def _read_stat(cpus: set[int] | None, proc: Path | None = None) -> tuple[int, int, int] | None:
    """(busy, total, number of CPUs) clock ticks of `cpus` (all when None) from /proc/stat."""
    try:
        text = ((proc or _PROC) / "stat").read_text()
    except OSError:
        return None
    busy = total = count = 0
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *fields = line.split()
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        # user nice system idle iowait irq softirq steal [guest guest_nice: inside user]
        values = [int(v) for v in fields[:8]]
        total += sum(values)
        busy += total_busy(values)
        count += 1
    return (busy, total, count) if count else None


def total_busy(values: list[int]) -> int:
    """Busy ticks of one /proc/stat CPU line: all but idle and iowait (steal counts as taken)."""
    return sum(values) - values[3] - values[4]


def _runnable_others(cpus: int, proc: Path | None = None) -> float | None:
    """Runnable tasks now that are not this process's threads, scaled to `cpus` of the machine."""
    proc = proc or _PROC
    try:
        running = int((proc / "loadavg").read_text().split()[3].split("/")[0])
        own = 0
        for task in (proc / "self" / "task").iterdir():
            with contextlib.suppress(OSError):
                stat = (task / "stat").read_text()
                own += stat[stat.rindex(")") + 2] == "R"
    except (OSError, ValueError, IndexError):
        return None
    online = os.cpu_count() or cpus
    return max(0, running - max(own, 1)) * min(1.0, cpus / online)


_lock = threading.Lock()
_last: _Sample | None = None
_last_others: float = 0.0
_active = 0  # forwards running now in this process


def other_load(cpus: set[int] | None = None, now: float | None = None) -> float:
    """CPUs' worth of work that other processes are doing on `cpus` (default: our affinity).

    From `/proc/stat` over the time since the previous call (kept when shorter than
    `MIN_INTERVAL_S`); from the runnable tasks now on the first call or after a pause
    longer than `STALE_AFTER_S`. 0.0 where neither can be read.

    Returns:
        A non-negative float, in CPUs (1.0 = one CPU kept busy all the time).
    """
    global _last, _last_others
    cpus = _affinity() if cpus is None else cpus
    now = time.monotonic() if now is None else now
    with _lock:
        last = _last
        if last is not None and now - last.wall < MIN_INTERVAL_S:
            return _last_others
        stat = _read_stat(cpus)
        own = time.process_time()
        if stat is None:
            return 0.0
        sample = _Sample(now, stat[0], stat[1], stat[2], own)
        if last is None or now - last.wall > STALE_AFTER_S or last.cpus != sample.cpus:
            others = _runnable_others(sample.cpus)
            others = 0.0 if others is None else others
        else:
            ticks = sample.total_ticks - last.total_ticks
            busy_cpus = (sample.busy_ticks - last.busy_ticks) / ticks * sample.cpus if ticks > 0 else 0.0
            own_cpus = (sample.own_cpu_s - last.own_cpu_s) / (sample.wall - last.wall)
            others = max(0.0, busy_cpus - own_cpus)
        _last, _last_others = sample, others
        return others


def choose_threads(ceiling: int, usable: int, others: float, running: int = 1) -> int:
    """The thread count for one forward: the free CPUs, shared among running forwards.

    Args:
        ceiling: torch's own count (`torch.get_num_threads()`); never exceeded.
        usable: `usable_cpus()`.
        others: `other_load()`, in CPUs.
        running: forwards running at once in this process, this one included.

    Returns:
        `max(1, min(ceiling, usable, round(usable - others)) // running)`; a CPU counts
        as taken from half a CPU of other work on.
    """
    free = math.floor(usable - others + 0.5)
    return max(1, min(ceiling, usable, free) // max(1, running))


@contextlib.contextmanager
def forward_threads(device: torch.device) -> Iterator[int]:
    """Run the block with the thread count of the policy in force (see the module docstring).

    Does nothing for a device other than the CPU, for the policy "torch", or inside another
    `forward_threads` block of the same thread.

    Yields:
        The number of intra-op threads the block runs with.
    """
    global _active
    policy = thread_policy()
    if device.type != "cpu" or policy == "torch" or getattr(_nesting, "depth", 0):
        yield torch.get_num_threads()
        return
    before = torch.get_num_threads()
    with _lock:
        _active += 1
        running = _active
    try:
        if isinstance(policy, int):
            chosen = policy
        else:
            chosen = choose_threads(before, usable_cpus(), other_load(), running)
        if chosen != before:
            torch.set_num_threads(chosen)
        _nesting.depth = 1
        try:
            yield chosen
        finally:
            _nesting.depth = 0
            if chosen != before:
                torch.set_num_threads(before)
    finally:
        with _lock:
            _active -= 1


_nesting = threading.local()


# ---------------------------------------------------------------- the two directions at once
SIDE_BY_SIDE_MIN_WEIGHTS = 1 << 20
"""Recurrent weights (4 * dim * projection_dim) from which the two LSTM directions run side by
side. Measured on the project's 2-core CPU, batch 32, 50 steps, both stacks: 0.80x the time of
one after the other for the original shape (4096/512), 0.90x for 1024/256, and no gain (within
noise) for the shipped 512/128, whose steps are too short for two Python threads."""

T = TypeVar("T")
U = TypeVar("U")


def directions_side_by_side(device: torch.device, recurrent_weights: int) -> int:
    """Threads per direction when the two LSTM directions should run at once, else 0.

    On the CPU, without autograd, with at least two threads chosen for this forward and a
    layer large enough (`SIDE_BY_SIDE_MIN_WEIGHTS`): each direction then runs on its own
    core(s), so the per-step products (too small to share two cores well: every one ends
    at a barrier) each keep one core busy. Not under the policy "torch".
    """
    threads = torch.get_num_threads()
    if device.type != "cpu" or torch.is_grad_enabled() or thread_policy() == "torch" or threads < 2:
        return 0
    return threads // 2 if recurrent_weights >= SIDE_BY_SIDE_MIN_WEIGHTS else 0


def run_side_by_side(first: Callable[[], T], second: Callable[[], U], threads: int) -> tuple[T, U]:
    """`(first(), second())`, `second` in a new thread; each with `threads` intra-op threads.

    The worker gets the caller's inference mode and CPU autocast state (both are per
    thread in torch); torch's count in the calling thread is put back afterwards.
    """
    inference = torch.is_inference_mode_enabled()
    autocast = torch.is_autocast_enabled("cpu")
    dtype = torch.get_autocast_dtype("cpu")
    results: list = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            torch.set_num_threads(threads)
            with torch.inference_mode(inference), torch.no_grad(), torch.autocast("cpu", dtype, enabled=autocast):
                results.append(second())
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller
            errors.append(err)

    before = torch.get_num_threads()
    worker = threading.Thread(target=work, name="elmo-backward-direction")
    worker.start()
    try:
        torch.set_num_threads(threads)
        with _nested():
            first_result = first()
    finally:
        worker.join()
        torch.set_num_threads(before)  # also MKL's count, which is process-wide
    if errors:
        raise errors[0]
    return first_result, results[0]


@contextlib.contextmanager
def _nested() -> Iterator[None]:
    depth = getattr(_nesting, "depth", 0)
    _nesting.depth = depth + 1
    try:
        yield
    finally:
        _nesting.depth = depth


# ---- elmo_core/token_cache.py -------------------------------------------------

DEFAULT_TOKEN_CACHE_WORDS = 50_000
"""Default bound, in word types: ~100 MB of float32 for the original model
(`projection_dim` 512), ~25 MB for the shipped default model (128)."""

_PADDING_ID = PADDING_CHARACTER + CHAR_ID_OFFSET


class TokenCache:
    """LRU map from a word's char ids to its layer-0 vector.

    Args:
        max_words: Most word types kept (> 0). Memory is `max_words * projection_dim`
            values of the compute dtype at most, resident as the cache fills (on the CPU).

    Attributes:
        hits, misses: Word lookups answered from the cache / computed, since the last
            `clear()` or `reset_stats()` (distinct words per batch, not positions).
    """

    def __init__(self, max_words: int = DEFAULT_TOKEN_CACHE_WORDS) -> None:
        check_int(
            "max_words",
            max_words,
            meaning="word types to keep",
            hint="To switch the cache off, pass token_cache_words=0 to the model instead.",
        )
        self.max_words = max_words
        self._lock = threading.Lock()
        self.clear()

    # ------------------------------------------------------------------ bookkeeping
    def clear(self) -> None:
        """Drop every entry and the statistics."""
        self._slots: OrderedDict[bytes, int] = OrderedDict()  # key -> row of _table, LRU first
        self._table: torch.Tensor | None = None  # [rows, P]
        self._free: list[int] = []  # rows of _table not holding a word
        self._fingerprint: tuple | None = None
        self.hits = 0
        self.misses = 0

    def reset_stats(self) -> None:
        """Zero `hits` and `misses`, keeping the entries."""
        self.hits = 0
        self.misses = 0

    @property
    def hit_rate(self) -> float:
        """hits / (hits + misses); 0.0 before any lookup."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def __len__(self) -> int:
        return len(self._slots)

    def __repr__(self) -> str:
        return f"TokenCache(max_words={self.max_words}, words={len(self)}, hit_rate={self.hit_rate:.3f})"

    def __getstate__(self) -> dict:
        return {"max_words": self.max_words}  # no lock (unpicklable), no entries

    def __setstate__(self, state: dict) -> None:
        self.max_words = state["max_words"]
        self._lock = threading.Lock()
        self.clear()

    # ------------------------------------------------------------------ lookup
    def lookup(
        self,
        words: torch.Tensor,
        compute: Callable[[torch.Tensor], torch.Tensor],
        fingerprint: tuple,
    ) -> torch.Tensor:
        """Vectors for distinct words: cached rows where present, `compute` for the rest.

        Args:
            words: Distinct char-id rows (e.g. from `torch.unique(..., dim=0)`).
            compute: The char CNN: [n, chars] int64 -> [n, P].
            fingerprint: Identifies the parameters and dtype `compute` uses; a new value
                empties the cache first.

        Returns:
            [num_words, P] on the device and in the dtype that `compute` returns.

        Shape:
            words: [num_words, chars] int64 -> [num_words, P]
        """
        keys = _row_keys(words)
        with self._lock:
            if fingerprint != self._fingerprint:
                self.clear()
                self._fingerprint = fingerprint
            if not keys or len(keys) > self.max_words:  # nothing to look up, or wider than the cache
                self.misses += len(keys)
                return compute(words)
            missing = [i for i, key in enumerate(keys) if key not in self._slots]
            for key in keys:  # hits become the most recently used
                if key in self._slots:
                    self._slots.move_to_end(key)
            self.hits += len(keys) - len(missing)
            self.misses += len(missing)
            if missing:
                index = torch.tensor(missing, dtype=torch.long, device=words.device)
                self._store([keys[i] for i in missing], compute(words.index_select(0, index)))
            table = self._table
            assert table is not None  # internal invariant: filled by _store above
            slots = torch.tensor([self._slots[key] for key in keys], dtype=torch.long, device=table.device)
            return table.index_select(0, slots)

    def _store(self, keys: list[bytes], vectors: torch.Tensor) -> None:
        """Insert `len(keys) <= max_words` new rows, evicting least recently used words.

        The table is always an ordinary tensor, even when filled under
        `torch.inference_mode` (an inference tensor could not be updated in place by a
        later call outside it, e.g. a training step after `embed`).
        """
        with torch.inference_mode(False):
            self._store_rows(keys, vectors.detach())

    def _store_rows(self, keys: list[bytes], vectors: torch.Tensor) -> None:
        table = self._table
        if table is None or table.dtype != vectors.dtype or table.device != vectors.device:
            # All `max_words` rows at once, never grown: `new_empty` writes nothing, so on
            # the CPU a row's memory becomes resident only when a word is stored in it
            # (rows are used in order). Growing by doubling instead held the old and the
            # new table at once, a step in the peak memory of a long run at every growth.
            table = vectors.new_empty(self.max_words, vectors.shape[1])
            self._slots.clear()
            self._free = list(range(self.max_words - 1, -1, -1))  # pop() gives row 0 first
        while len(self._free) < len(keys):  # full: evict the least recently used
            _, slot = self._slots.popitem(last=False)
            self._free.append(slot)
        slots = [self._free.pop() for _ in keys]
        table.index_copy_(0, torch.tensor(slots, dtype=torch.long, device=table.device), vectors)
        self._slots.update(zip(keys, slots))
        self._table = table


def _row_keys(words: torch.Tensor) -> list[bytes]:
    """One hashable key per char-id row: its int16 bytes (ids are < 262) up to the last
    id that is not padding. Every row ends in padding after its end-of-word id, so this
    is still one key per row, and a typical key is 20 bytes instead of 100 (a full cache
    holds 50,000 of them)."""
    rows = np.ascontiguousarray(words.detach().to("cpu", torch.int16).numpy())
    if rows.size == 0:
        return [row.tobytes() for row in rows]
    real = rows != _PADDING_ID
    ends = rows.shape[1] - np.argmax(real[:, ::-1], axis=1)  # one past the last non-padding id
    return [row[:end].tobytes() for row, end in zip(rows, ends.tolist())]


def parameter_fingerprint(parameters: Iterable[torch.Tensor], dtype: torch.dtype | None) -> tuple:
    """What `TokenCache` compares to know that cached vectors are still valid.

    Per parameter: its identity, storage, device and in-place version counter (changed
    by optimizer steps, `load_state_dict`, `.to()`, weight import and any in-place
    operation on the parameter itself), and a float64 sum of its values plus of every
    97th value, which also notices in-place edits through `.data`, which the version
    counter does not see. The sums cost one pass over the char CNN's weights per batch
    (a few ms for the original model, whose batches take seconds).
    """
    parameters = list(parameters)
    with torch.no_grad():
        sums = tuple(
            x for p in parameters for x in (float64_sum(p), float(p.reshape(-1)[::97].sum(dtype=torch.float64)))
        )
    return (dtype, sums) + tuple((id(p), p.data_ptr(), p._version, p.device) for p in parameters)


_SUM_BLOCK = 2**20


def float64_sum(tensor: torch.Tensor) -> float:
    """The sum of a tensor's values, accumulated in float64, `_SUM_BLOCK` values at a time.

    `tensor.sum(dtype=torch.float64)` first makes a float64 copy of the whole tensor on
    the CPU (128 MB for a 64 MB weight); blocks bound that copy at 8 MB.
    """
    flat = tensor.detach().reshape(-1)
    return sum(float(block.sum(dtype=torch.float64)) for block in flat.split(_SUM_BLOCK))


# ---- elmo_core/bilm.py --------------------------------------------------------

class BiLMOutput(NamedTuple):
    """What `BiLM.forward` returns.

    Attributes:
        activations: Every biLM layer: index 0 is the char CNN's token vector repeated
            twice (so that every layer is `2 * projection_dim` wide), index l >= 1 is
            `[forward layer l ; backward layer l]`. Zero at padded positions.
            Shape [n_layers + 1, batch, tokens, 2 * projection_dim].
        mask: bool [batch, tokens], True = real position.
    """

    activations: torch.Tensor
    mask: torch.Tensor


def check_char_ids(char_ids: object, max_characters_per_token: int, n_characters: int) -> None:
    """Raise a clear error unless `char_ids` is a valid [batch, tokens, chars] id tensor."""
    if not isinstance(char_ids, torch.Tensor):
        raise TypeError(
            f"char_ids must be a torch.Tensor; got {type(char_ids).__name__}. "
            "Build it with `char_ids, mask = elmo_core.words_to_char_ids(sentences)` (a pair)."
        )
    if char_ids.dim() != 3 or char_ids.shape[-1] != max_characters_per_token:
        raise ValueError(
            f"char_ids must be 3-D [batch, tokens, {max_characters_per_token}]; got shape "
            f"{tuple(char_ids.shape)}. Did you pass word ids? Use words_to_char_ids()."
        )
    if char_ids.dtype.is_floating_point or char_ids.dtype.is_complex or char_ids.dtype == torch.bool:
        raise TypeError(f"char_ids must be an integer tensor; got dtype {char_ids.dtype}.")
    if char_ids.numel():
        low, high = int(char_ids.min()), int(char_ids.max())
        if low < 0 or high >= n_characters:
            raise ValueError(
                f"char_ids must lie in [0, {n_characters}); found values from {low} to {high}. "
                "Ids are UTF-8 bytes + 1 and markers 257..261 (see elmo_core.characters); "
                "0 marks a padded position."
            )


class BiLM(nn.Module):
    """The ELMo biLM (frozen feature extractor or trainable language model).

    Args:
        options: The model's hyperparameters.
        stateful: Carry each batch row's final LSTM states into the next batch, as the
            original implementations did. Off by default; see `reset_states()`.
        keep_sentence_boundaries: Return the `<S>`/`</S>` positions too (tokens + 2).
        dropout: Dropout on every LSTM layer's input during training (bilm-tf: 0.1).
        token_cache_words: Bound, in word types, of the LRU cache of layer 0 (see
            `elmo_core.token_cache`); 0 switches it off. The cache is skipped while the
            char CNN trains (a char CNN parameter has `requires_grad`, in grad mode or
            in training mode), and empties itself whenever the char CNN's weights
            change, so it never serves a vector of older weights. It is available as
            `self.token_cache` (None when off).

    Attributes:
        recurrence: How the LSTMs run: "auto" (default), "step", "fused", "paired" or
            "captured"; see `elmo_core.recurrence` and `set_recurrence`.
    """

    def __init__(
        self,
        options: BiLMOptions,
        *,
        stateful: bool = False,
        keep_sentence_boundaries: bool = False,
        dropout: float = 0.0,
        token_cache_words: int = DEFAULT_TOKEN_CACHE_WORDS,
    ) -> None:
        super().__init__()
        self.options = options
        self.stateful = stateful
        self.keep_sentence_boundaries = keep_sentence_boundaries
        lstm = options.lstm
        self.char_cnn = CharCNN(options)
        stack_args = (
            lstm.projection_dim,
            lstm.dim,
            lstm.projection_dim,
            lstm.n_layers,
            lstm.cell_clip,
            lstm.proj_clip,
            lstm.use_skip_connections,
            dropout,
        )
        self.forward_layers = LSTMStack(*stack_args)
        self.backward_layers = LSTMStack(*stack_args)
        C = options.char_cnn.max_characters_per_token
        self.register_buffer("bos_char_ids", torch.empty(C, dtype=torch.long), persistent=False)
        self.register_buffer("eos_char_ids", torch.empty(C, dtype=torch.long), persistent=False)
        self.reset_buffers()
        # Stateful mode: per direction, per layer (h, c) with rows in batch-row order.
        self._states: dict[str, list[LSTMState]] | None = None
        self.token_cache: TokenCache | None = None
        self.set_token_cache(token_cache_words)
        self.recurrence = "auto"
        self._captured = CapturedRecurrence()

    @property
    def output_dim(self) -> int:
        """Width of every layer: `2 * projection_dim`."""
        return self.options.output_dim

    @property
    def num_layers(self) -> int:
        """Number of output layers returned: `n_layers + 1` (layer 0 = token layer, then each LSTM layer)."""
        return self.options.num_layers

    def reset_buffers(self) -> None:
        """Fill the non-persistent buffers: the char ids of `<S>` and `</S>`.

        They are never saved, so a model materialised after construction (transformers
        builds on the meta device, then loads) gets them from here.
        """
        C = self.options.char_cnn.max_characters_per_token
        with torch.no_grad():
            self.bos_char_ids.copy_(torch.tensor(word_to_char_ids(BOS_TOKEN, C)))
            self.eos_char_ids.copy_(torch.tensor(word_to_char_ids(EOS_TOKEN, C)))

    def set_token_cache(self, max_words: int) -> None:
        """Replace the layer-0 cache by an empty one of `max_words` word types (0: none).

        Raises:
            ValueError: if `max_words` is not an integer >= 0.
        """
        check_int("token_cache_words", max_words, minimum=0, meaning="0 switches the cache off")
        self.token_cache = TokenCache(max_words) if max_words else None

    def reset_states(self) -> None:
        """Forget carried LSTM states (stateful mode); the next batch starts from zeros."""
        self._states = None

    # ------------------------------------------------------------------ forward
    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> BiLMOutput:
        """Run the char CNN and both LSTM stacks.

        Args:
            char_ids: Character ids from `words_to_char_ids`, *without* `<S>`/`</S>`
                (added here). Rows are right-padded with all-zero positions. Moved to
                the module's device if needed.
            mask: True for real tokens; derived from `char_ids` (any id non-zero) when
                omitted. Must be True on a prefix of each row.

        Returns:
            `BiLMOutput(activations, mask)`; see its docstring.

        Shape:
            char_ids: [batch, tokens, chars] int64
            mask: [batch, tokens] bool
            activations: [n_layers + 1, batch, tokens, 2 * projection_dim] float
            (tokens + 2 with `keep_sentence_boundaries`).

        Raises:
            ValueError / TypeError: for ids of the wrong shape, dtype or range, or a
                mask that is not right-padded.
        """
        C = self.options.char_cnn.max_characters_per_token
        check_char_ids(char_ids, C, self.options.char_cnn.n_characters)
        device = self.bos_char_ids.device
        # No more CPU threads than there are free CPUs (a taken core stalls every step).
        with forward_threads(device):
            return self._forward(char_ids, mask, device)

    def _forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None, device: torch.device) -> BiLMOutput:
        char_ids = char_ids.to(device)
        real = (char_ids != 0).any(dim=-1) if mask is None else _check_mask(mask, char_ids).to(device)
        ids, full_lengths, full_mask = self._add_sentence_boundaries(char_ids, real)
        token_embedding = self._token_embedding(ids, full_mask)  # [batch, tokens + 2, P]
        forward_out, backward_out, order = self._run_stacks(token_embedding, full_lengths)
        activations = self._gather_activations(token_embedding, forward_out, backward_out, order)
        if self.keep_sentence_boundaries:
            return BiLMOutput(activations, full_mask)
        activations *= real[None, :, :, None].to(activations.dtype)
        return BiLMOutput(activations, real)

    def _add_sentence_boundaries(
        self, char_ids: torch.Tensor, real: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`<S> w1 .. wn </S>` per row, at positions 0 and n + 1; padding stays all-zero.

        Returns:
            (ids [batch, tokens + 2, chars], lengths [batch] (n + 2), mask [batch, tokens + 2]).

        Raises:
            ValueError: if `real` is not True on a prefix of each row.
        """
        batch_size, num_tokens, C = char_ids.shape
        device = char_ids.device
        lengths = real.sum(dim=1)  # [batch]
        positions = torch.arange(num_tokens, device=device)
        if not torch.equal(real, positions[None, :] < lengths[:, None]):
            raise ValueError(
                "padding must be on the right: every row of the mask (or of non-zero char_ids) "
                "must be True for its first n positions and False after. Build inputs with "
                "words_to_char_ids()."
            )
        ids = char_ids.new_zeros(batch_size, num_tokens + 2, C)
        ids[:, 1 : num_tokens + 1] = char_ids * real[..., None]
        ids[:, 0] = self.bos_char_ids
        ids[torch.arange(batch_size, device=device), lengths + 1] = self.eos_char_ids
        full_lengths = lengths + 2
        full_mask = torch.arange(num_tokens + 2, device=device)[None, :] < full_lengths[:, None]
        return ids, full_lengths, full_mask

    def _gather_activations(
        self,
        token_embedding: torch.Tensor,
        forward_out: list[torch.Tensor | None],
        backward_out: list[torch.Tensor | None],
        order: torch.Tensor,
    ) -> torch.Tensor:
        """Layer 0 (the token vector twice) and each LSTM layer's two directions, in batch order.

        Every layer is written once, straight from the stacks' sorted, time-major
        outputs, into one [L+1, B, T, 2P] tensor: no per-layer unsorted copies,
        concatenations, stack or masked copy (at batch 32 each of those is another
        24 MB for the original model). Without keep_sentence_boundaries, <S> (position
        0) is left out, and </S> (position len + 1, len after the shift) is zeroed by
        the caller's mask with the padding. The stacks' outputs are freed as they are copied.

        Shape: token_embedding [batch, tokens + 2, P] -> [n_layers + 1, batch, T, 2P]
        (T = tokens, or tokens + 2 with keep_sentence_boundaries)
        """
        batch_size, num_steps, P = token_embedding.shape
        num_tokens = num_steps - 2
        keep = slice(None) if self.keep_sentence_boundaries else slice(1, num_tokens + 1)
        dtype = forward_out[-1].dtype
        activations = token_embedding.new_empty(
            len(forward_out) + 1,
            batch_size,
            num_steps if self.keep_sentence_boundaries else num_tokens,
            2 * P,
            dtype=dtype,
        )
        activations[0, ..., :P] = token_embedding[:, keep]  # layer 0: the token vector twice
        activations[0, ..., P:] = token_embedding[:, keep]
        for k in range(len(forward_out)):
            for half, outputs in ((slice(0, P), forward_out), (slice(P, 2 * P), backward_out)):
                y = outputs[k].transpose(0, 1)[:, keep].to(dtype)  # [sorted batch, T, P]
                activations[k + 1, ..., half].index_copy_(0, order, y)  # row r of y is batch row order[r]
                outputs[k] = None  # freed as soon as it is copied
        return activations

    def _token_embedding(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Char CNN once per distinct word among the real positions; zeros elsewhere.

        The char CNN has no context, so a word's vector is the same wherever it occurs;
        in a batch of real text fewer than half the positions hold distinct words, and
        across batches the token cache (when on) answers most of those.

        Shape: ids [batch, steps, chars], mask [batch, steps] -> [batch, steps, P]
        """
        words, inverse = torch.unique(ids[mask], dim=0, return_inverse=True)  # [distinct, chars]
        cache = self.token_cache
        parameters = list(self.char_cnn.parameters())
        # The char CNN is being trained: every word is recomputed. In a training step
        # (grad mode) the vectors must carry the graph; in training mode under no_grad
        # (e.g. a probe between steps) the weights change at the next step anyway, so
        # filling the cache would only cost. The fingerprint below covers every other
        # change (eval-mode calls between optimizer steps, weight loads, `.data` edits).
        char_cnn_trains = any(p.requires_grad for p in parameters) and (torch.is_grad_enabled() or self.training)
        if cache is None or char_cnn_trains:
            vectors = self.char_cnn(words)
        else:  # nothing to differentiate: reuse earlier vectors of the same words
            device_type = words.device.type
            dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
            vectors = cache.lookup(words, self.char_cnn, parameter_fingerprint(parameters, dtype))
        embedded = vectors[inverse]  # [num_real, P]
        out = embedded.new_zeros(*mask.shape, embedded.shape[-1])
        out[mask] = embedded
        return out

    def _run_stacks(
        self, tokens: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """Both LSTM stacks over [batch, steps, P] inputs, by the recurrence path in use.

        Returns:
            Each layer's output per direction, time-major ([steps, batch, P]; the
            backward outputs already in forward time order), and `order`: row r of the
            outputs is batch row `order[r]` (rows sorted longest first on the step and
            fused paths; in batch order on the paired and captured ones).
        """
        stacks = (self.forward_layers, self.backward_layers)
        # A gradient flows through the stacks when their weights train, or when only the
        # char CNN does (its vectors `tokens` then carry the graph): either way no CUDA
        # graph replay, which would cut the graph at its static input buffers.
        trainable = tokens.requires_grad or any(p.requires_grad for s in stacks for p in s.parameters())
        needs_grad = torch.is_grad_enabled() and trainable
        mode = getattr(self, "recurrence", "auto")  # biLMs pickled before the option existed
        path = resolve_recurrence(mode, stacks, tokens.device, needs_grad, self.stateful)
        if path in ("paired", "captured"):
            run = paired_stacks if path == "paired" else self._captured
            forward_out, backward_out = run(stacks, tokens, lengths)  # time-major, batch order
            return forward_out, backward_out, torch.arange(tokens.shape[0], device=tokens.device)
        fused = path == "fused"
        batch_size, num_steps, _ = tokens.shape
        sorted_lengths, order = lengths.sort(descending=True, stable=True)
        lengths_list = sorted_lengths.tolist()
        # Rows still running at step t (rows are sorted longest first).
        batch_sizes = [sum(1 for n in lengths_list if n > t) for t in range(num_steps)]
        x = tokens.index_select(0, order).transpose(0, 1)  # [steps, batch, P], sorted rows

        # Backward direction: each row reversed over its own length, so it starts at its
        # </S> and never reads padding. The same index undoes the reversal.
        reverse = reverse_index(sorted_lengths, num_steps)[..., None]  # [steps, batch, 1]

        def flip(t: torch.Tensor) -> torch.Tensor:
            return t.gather(0, reverse.expand(-1, -1, t.shape[-1]))

        forward_init, backward_init = self._initial_states(order, batch_size)
        run = {"fused": fused, "final_state": self.stateful}  # final states feed only the carry-over
        cell = self.forward_layers.layers[0]
        split = directions_side_by_side(tokens.device, 4 * cell.dim * cell.projection_dim)
        if split:  # each direction on its own core(s): see elmo_core.threads
            backward_x = flip(x)
            (forward_out, forward_final), (backward_out, backward_final) = run_side_by_side(
                lambda: self.forward_layers(x, batch_sizes, forward_init, **run),
                lambda: self.backward_layers(backward_x, batch_sizes, backward_init, **run),
                split,
            )
        else:
            forward_out, forward_final = self.forward_layers(x, batch_sizes, forward_init, **run)
            x = flip(x)  # the sorted input is not needed any more: one copy alive, not two
            backward_out, backward_final = self.backward_layers(x, batch_sizes, backward_init, **run)
        backward_out = [flip(y) for y in backward_out]
        if self.stateful:
            self._store_states(order, forward_final, backward_final)
        return forward_out, backward_out, order

    # ------------------------------------------------------------------ stateful mode
    def _initial_states(
        self, order: torch.Tensor, batch_size: int
    ) -> tuple[list[LSTMState] | None, list[LSTMState] | None]:
        if not self.stateful or self._states is None:
            return None, None

        def take(h: torch.Tensor) -> torch.Tensor:
            # Rows beyond the stored ones start from zero (the batch grew).
            if h.shape[0] < batch_size:
                h = torch.cat([h, h.new_zeros(batch_size - h.shape[0], *h.shape[1:])])
            return h[:batch_size].index_select(0, order)

        return tuple(  # type: ignore[return-value]
            [(take(h), take(c)) for h, c in self._states[direction]] for direction in ("forward", "backward")
        )

    def _store_states(
        self, order: torch.Tensor, forward_final: list[LSTMState], backward_final: list[LSTMState]
    ) -> None:
        """Keep each row's final states; rows beyond this batch keep their old states."""
        batch_size = order.shape[0]
        new: dict[str, list[LSTMState]] = {}
        for direction, finals in (("forward", forward_final), ("backward", backward_final)):
            layers = []
            for k, (h, c) in enumerate(finals):
                h = h.detach().float()
                c = c.detach().float()
                h_rows = torch.empty_like(h)
                c_rows = torch.empty_like(c)
                h_rows[order] = h  # back to batch-row order
                c_rows[order] = c
                if self._states is not None:
                    old_h, old_c = self._states[direction][k]
                    if old_h.shape[0] > batch_size:
                        h_rows = torch.cat([h_rows, old_h[batch_size:]])
                        c_rows = torch.cat([c_rows, old_c[batch_size:]])
                layers.append((h_rows, c_rows))
            new[direction] = layers
        self._states = new


def _check_mask(mask: object, char_ids: torch.Tensor) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(char_ids.shape[:2]):
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a [batch, tokens] = {tuple(char_ids.shape[:2])} tensor; got {shape}.")
    return mask.bool()


# ---- elmo_core/quantization.py ------------------------------------------------

def is_quantized(module: nn.Module) -> bool:
    """True if any submodule is a dynamically quantised (int8) layer."""
    return any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in module.modules())


# ---- elmo_core/memory.py ------------------------------------------------------

def _load_glibc(name: str, argtypes: list):  # noqa: ANN202
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        function = getattr(libc, name)
    except (OSError, AttributeError, TypeError):  # not glibc
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


_MALLOC_TRIM = _load_glibc("malloc_trim", [ctypes.c_size_t])


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS (glibc `malloc_trim(0)`; no-op elsewhere).

    Safe to call from any thread at any time; live objects are never affected.

    Returns:
        True if memory was handed back, False if nothing was (or no glibc).
    """
    if _MALLOC_TRIM is None:
        return False
    return bool(_MALLOC_TRIM(0))


# ---- elmo_core/windows.py -----------------------------------------------------

class Window(NamedTuple):
    """One biLM pass over `tokens[start:end]`, keeping the vectors of `tokens[keep_start:keep_end]`."""

    start: int
    end: int
    keep_start: int
    keep_end: int


def plan_windows(
    num_tokens: int, window_tokens: int = DEFAULT_WINDOW_TOKENS, context: int | None = None
) -> list[Window]:
    """The windows that cover a sequence of `num_tokens` tokens (see the module docstring).

    Args:
        num_tokens: Length of the sequence (>= 0).
        window_tokens: Most tokens one pass reads. A sequence of at most this many
            tokens is one window, read whole.
        context: Tokens of context on each side of a window's kept stretch
            (default `window_tokens // 8`). 0 cuts the sequence into disjoint pieces.

    Returns:
        Windows in order; their kept stretches tile `[0, num_tokens)` exactly, and
        every window reads at most `window_tokens` tokens.

    Raises:
        ValueError: if `window_tokens` is not positive, or `2 * context >= window_tokens`.
    """
    context = _check_window(window_tokens, context)
    if num_tokens <= window_tokens:
        return [Window(0, num_tokens, 0, num_tokens)]
    windows = []
    keep_start = 0
    while True:
        start = max(0, keep_start - context)
        end = start + window_tokens
        if end >= num_tokens:  # the last window: read the final window_tokens tokens
            windows.append(Window(max(0, num_tokens - window_tokens), num_tokens, keep_start, num_tokens))
            return windows
        windows.append(Window(start, end, keep_start, end - context))
        keep_start = end - context


RunBatch = Callable[[list[Sequence[str]]], Sequence[np.ndarray]]
"""Reads one batch of token lists; returns one array `[..., tokens, dim]` per row (token
axis -2), holding at least that row's tokens (positions after them are ignored)."""


def run_in_windows(
    sequences: Sequence[Sequence[str]],
    run_batch: RunBatch,
    *,
    batch_tokens: int,
    batch_size: int | None = None,
    window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
    window_context: int | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Plan windows, run them in batches, assemble: yield `(index, array)` as each sequence completes.

    A sequence of at most `window_tokens` tokens is one piece, read whole; a longer one is
    cut by `plan_windows`. Pieces are batched by `batches_by_token_budget`, longest first,
    and a sequence is yielded when its last piece has been read (not in input order).

    Memory is bounded by one batch (and one window, plus a long sequence being assembled).
    Every yielded array is a fresh copy, never a view, which would keep the whole batch's
    array alive for as long as the caller keeps one sequence. After each batch its arrays
    are dropped and the freed heap goes back to the OS (`elmo_core.memory`): every batch
    has new shapes, and without the trim the resident size creeps up over a long run.

    Args:
        sequences: Token lists (empty ones give arrays with 0 tokens).
        run_batch: See `RunBatch`; it gets `sequences[i][start:end]` for each piece.
        batch_tokens: Budget of padded positions per batch.
        batch_size: Optional cap on pieces per batch.
        window_tokens: Longest piece; None or 0 reads every sequence whole.
        window_context: Context tokens on each side of a kept stretch (default `window_tokens // 8`).

    Yields:
        `(index into sequences, array)`, the array float32, C-ordered, shaped as
        `run_batch`'s rows with the token axis cut to the sequence's own tokens.

    Raises:
        ValueError: for a bad budget, batch size or window setting.
    """
    window_tokens = check_window_settings(window_tokens, window_context)
    pieces = [(i, w) for i, tokens in enumerate(sequences) for w in _pieces(len(tokens), window_tokens, window_context)]
    batches = batches_by_token_budget([w.end - w.start for _, w in pieces], batch_tokens, max_batch_size=batch_size)
    windows_left = Counter(i for i, _ in pieces)
    assembling: dict[int, np.ndarray] = {}  # long sequences being assembled: index -> arrays so far
    for batch in batches:
        texts = [sequences[i][w.start : w.end] for i, w in (pieces[k] for k in batch)]
        arrays = run_batch(texts)
        for row, k in enumerate(batch):
            i, w = pieces[k]
            kept = arrays[row][..., w.keep_start - w.start : w.keep_end - w.start, :]
            if (w.start, w.end) == (0, len(sequences[i])):  # read whole
                yield i, np.array(kept, dtype=np.float32, order="C", copy=True)
                continue
            if i not in assembling:
                shape = (*kept.shape[:-2], len(sequences[i]), kept.shape[-1])
                assembling[i] = np.empty(shape, dtype=np.float32)
            assembling[i][..., w.keep_start : w.keep_end, :] = kept
            windows_left[i] -= 1
            if windows_left[i] == 0:
                yield i, assembling.pop(i)
        del arrays, texts  # before the next batch, not when it replaces them
        kept = None
        release_free_memory()


def _pieces(num_tokens: int, window_tokens: int | None, window_context: int | None) -> list[Window]:
    """The biLM passes over one sequence: the whole of it, or its windows."""
    if window_tokens is None:
        return [Window(0, num_tokens, 0, num_tokens)]
    return plan_windows(num_tokens, window_tokens, window_context)


ReadPieces = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""Reads a batch of pieces: `(char_ids [pieces, tokens, chars], mask [pieces, tokens])` ->
a tensor `[..., pieces, tokens (+ 2 with boundaries), dim]` (batch axis -3, token axis -2),
e.g. a `BiLM`'s activations."""


def read_in_windows(
    read: ReadPieces,
    char_ids: torch.Tensor,
    mask: torch.Tensor | None,
    *,
    batch_tokens: int,
    window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
    window_context: int | None = None,
    boundaries: bool = False,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`run_in_windows` for a padded batch of tensors that may need gradients (hf_elmo's `ElmoModel`).

    Each row longer than `window_tokens` is cut by `plan_windows`, exactly as
    `run_in_windows` cuts a sequence, and each of its tokens keeps the vectors of the one
    window that keeps it; shorter rows are read whole. The pieces of all rows are read in
    batches of at most `batch_tokens` padded positions (`batches_by_token_budget`) and
    assembled with torch operations (slices and concatenation), so autograd flows through
    them: what `read` builds a graph for (a trainable biLM, or the layers a trainable
    scalar mix reads afterwards) gets its gradients, window by window. While training,
    though, every window's graph is kept until the backward pass, so the memory bound of
    inference does not hold then.

    Args:
        read: See `ReadPieces`.
        char_ids: [batch, tokens, chars], right-padded (checked by `read`, piece by piece).
        mask: [batch, tokens] bool, True = real token; derived from `char_ids` (any id
            non-zero) when None, as `BiLM.forward` does.
        batch_tokens: Budget of padded positions per batch of pieces.
        window_tokens, window_context: As `run_in_windows`; None or 0 reads every row whole.
        boundaries: `read` returns the `<S>`/`</S>` positions too (`keep_sentence_boundaries`):
            a long row keeps the `<S>` of its first window and the `</S>` of its last.

    Returns:
        None when no row is longer than `window_tokens` (read the batch as it is: its
        vectors are exactly those of a run without windows); else the assembled output
        `[..., batch, tokens (+ 2), dim]`, zero at padded positions, and its mask
        `[batch, tokens (+ 2)]` (on the output's device, as `BiLM.forward` returns it).

    Raises:
        ValueError: for a bad budget or window setting, or a mask that is not right-padded.
    """
    window_tokens = check_window_settings(window_tokens, window_context)
    if not isinstance(char_ids, torch.Tensor) or char_ids.dim() != 3 or window_tokens is None:
        return None  # read whole (ids of the wrong kind get `read`'s error)
    if char_ids.shape[1] <= window_tokens:
        return None
    if mask is not None and (not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(char_ids.shape[:2])):
        return None  # `read` names the mask's problem
    mask = (char_ids != 0).any(dim=-1) if mask is None else mask.bool()
    lengths_tensor = mask.sum(dim=1)  # [batch]
    if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths_tensor[:, None]):
        raise ValueError(
            "padding must be on the right: every row of the mask (or of non-zero char_ids) must be True "
            "for its first n positions and False after. Build inputs with words_to_char_ids()."
        )
    lengths = [int(n) for n in lengths_tensor.tolist()]
    if max(lengths, default=0) <= window_tokens:
        return None
    pieces = [(i, w) for i, n in enumerate(lengths) for w in plan_windows(n, window_tokens, window_context)]
    kept: list[torch.Tensor | None] = [None] * len(pieces)
    edge = int(boundaries)  # read output rows before a piece's first token
    for batch in batches_by_token_budget([w.end - w.start for _, w in pieces], batch_tokens):
        longest = max(pieces[k][1].end - pieces[k][1].start for k in batch)
        piece_ids = char_ids.new_zeros((len(batch), longest, char_ids.shape[-1]))  # [pieces, longest, chars]
        piece_mask = mask.new_zeros((len(batch), longest))
        for row, k in enumerate(batch):
            i, w = pieces[k]
            piece_ids[row, : w.end - w.start] = char_ids[i, w.start : w.end]
            piece_mask[row, : w.end - w.start] = True
        out = read(piece_ids, piece_mask)  # [..., pieces, longest (+ 2), dim]
        for row, k in enumerate(batch):
            i, w = pieces[k]
            first = w.keep_start - w.start + edge
            last = w.keep_end - w.start + edge
            if boundaries and w.keep_start == 0:
                first = 0  # the row's <S>
            if boundaries and w.keep_end == lengths[i]:
                last += 1  # the row's </S>
            kept[k] = out[..., row, first:last, :]  # [..., kept tokens, dim]
    num_steps = char_ids.shape[1] + 2 * edge
    rows = []
    for i in range(len(lengths)):
        row = torch.cat([kept[k] for k, (j, _) in enumerate(pieces) if j == i], dim=-2)  # [..., length, dim]
        pad = row.new_zeros((*row.shape[:-2], num_steps - row.shape[-2], row.shape[-1]))
        rows.append(torch.cat([row, pad], dim=-2))
    output = torch.stack(rows, dim=-3)  # [..., batch, tokens (+ 2), dim]
    positions = torch.arange(num_steps, device=output.device)  # the mask goes where `read` put the output
    out_mask = positions[None, :] < (torch.tensor(lengths, device=output.device) + 2 * edge)[:, None]
    return output, out_mask


# ---- elmo_core/embedding.py ---------------------------------------------------

DEFAULT_BATCH_TOKENS = 4096
"""Default budget of padded positions per batch (about 0.3 GB of LSTM pre-activations
for the original model's shape; lower it on small machines, raise it on a GPU)."""

LAYER_CHOICES = ("all", "top", "average", "mix")


def check_layers(layers: object, num_layers: int, num_mixes: int) -> None:
    """Raise `ValueError` unless `layers` is one of LAYER_CHOICES or a layer index 0..L.

    Negative indices are refused rather than read Python's way, so that no sentinel
    can silently select a different layer (a user passing -1 for "the top layer" of a
    model whose last index means something else would get the wrong one without notice).
    """
    valid = f"'all', 'top', 'average', 'mix' or a layer index 0..{num_layers - 1}"
    if isinstance(layers, str):
        if layers not in LAYER_CHOICES:
            raise ValueError(f"layers must be {valid}; got {layers!r}.")
        if layers == "mix" and num_mixes == 0:
            raise ValueError(
                "layers='mix' needs a model with at least one scalar mix "
                "(num_output_representations >= 1); use 'all', 'top' or 'average'."
            )
        return
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)):
        raise ValueError(f"layers must be {valid}; got {layers!r} ({type(layers).__name__}).")
    if not 0 <= int(layers) < num_layers:
        why = " Negative indices are not accepted." if int(layers) < 0 else f" This model has {num_layers} layers."
        raise ValueError(f"layers must be {valid}; got {layers!r}.{why}")


def iter_embeddings(
    model: Elmo,
    sentences: Sequence[Sequence[str]],
    *,
    layers: str | int = "all",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    batch_size: int | None = None,
    device: str | torch.device | None = None,
    autocast_dtype: torch.dtype | None = None,
    window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
    window_context: int | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield `(index, vectors)` for every sentence, batch by batch (not in input order).

    Memory is bounded by one batch, whatever the number of sentences, and by one
    window, whatever their length (plus the vectors of a long sentence being
    assembled); freed memory is handed back to the OS after every batch
    (`elmo_core.windows.run_in_windows`), so it stays flat over a long run. See
    `embed_sentences` for the arguments and shapes.
    """
    _check_arguments(model, sentences, layers, batch_tokens, batch_size)
    if is_quantized(model):
        _check_int8_use(model, device, autocast_dtype)
    if device is not None:
        model.to(device)
    precision = _autocast(next(model.parameters()).device, autocast_dtype)
    window_tokens = check_window_settings(window_tokens, window_context)
    run_batch = _batch_runner(model, layers, precision)
    _enter_eval(model)
    try:
        with torch.inference_mode():
            yield from run_in_windows(
                sentences,
                run_batch,
                batch_tokens=batch_tokens,
                batch_size=batch_size,
                window_tokens=window_tokens,
                window_context=window_context,
            )
    finally:
        _leave_eval(model)


def _check_arguments(model: Elmo, sentences: object, layers: object, batch_tokens: object, batch_size: object) -> None:
    check_sentences(sentences)
    check_layers(layers, model.num_layers, len(model.scalar_mixes))
    if model.bilm.stateful:
        raise ValueError(
            "embed() sorts sentences by length, which would scramble the LSTM states a "
            "stateful model carries between batch rows. Call the model on your own batches "
            "in stateful mode, or build it with stateful=False (the default)."
        )
    check_int("batch_tokens", batch_tokens)
    if batch_size is not None:
        check_int("batch_size", batch_size)


def _batch_runner(model: Elmo, layers: str | int, precision: contextlib.AbstractContextManager) -> RunBatch:
    """The `run_batch` of `run_in_windows` for `model`: token lists -> the chosen layers.

    Shape:
        returns float32 numpy [batch, n_layers + 1, tokens, dim] for "all", else
        [batch, tokens, dim] (tokens = the batch's longest row)
    """
    C = model.options.char_cnn.max_characters_per_token

    def run_batch(texts: list[Sequence[str]]) -> np.ndarray:
        char_ids, mask = words_to_char_ids(texts, C)
        with precision:
            # The scalar mixes only when asked for: for the other choices they would be
            # computed and thrown away.
            out = model(char_ids, mask) if layers == "mix" else model.bilm(char_ids, mask)
        if layers == "all":
            result = out.activations.transpose(0, 1)  # [batch, layers, tokens, dim]
        elif layers == "top":
            result = out.activations[-1]
        elif layers == "average":
            result = out.activations.mean(dim=0)
        elif layers == "mix":
            result = out.representations[0]
        else:
            result = out.activations[int(layers)]
        return result.float().cpu().numpy()  # `out` and the inputs are freed on return

    return run_batch


# Calls to iter_embeddings running on each model (from any thread), and the mode to put
# back when the last one ends. Switching a shared model to eval() and back per call
# raced: a second thread could read the first one's eval() as the caller's mode, or
# run in training mode (dropout on) after the first one restored it.
_MODE_LOCK = threading.Lock()
_RUNNING: weakref.WeakKeyDictionary[torch.nn.Module, list] = weakref.WeakKeyDictionary()


def _enter_eval(model: torch.nn.Module) -> None:
    with _MODE_LOCK:
        entry = _RUNNING.setdefault(model, [0, model.training])
        entry[0] += 1
        model.eval()


def _leave_eval(model: torch.nn.Module) -> None:
    with _MODE_LOCK:
        entry = _RUNNING[model]
        entry[0] -= 1
        if entry[0] == 0:
            del _RUNNING[model]
            model.train(entry[1])


def _check_int8_use(model: torch.nn.Module, device: object, autocast_dtype: object) -> None:
    """int8 layers run on the CPU in float32 only: say so before torch fails deep inside."""
    parameter = next(model.parameters())
    target = torch.device(device) if device is not None else parameter.device
    if target.type != "cpu" or parameter.dtype != torch.float32 or autocast_dtype is not None:
        raise ValueError(
            f"this model is int8-quantised (quantize_int8), which runs on the CPU in float32 only; "
            f"asked for device {target}, dtype {parameter.dtype}, autocast {autocast_dtype}. On a GPU "
            "use the float32 model with autocast_dtype=torch.bfloat16 instead."
        )


def _autocast(device: torch.device, dtype: torch.dtype | None):
    """A `torch.autocast` context for `dtype`, or a no-op one for None."""
    if dtype is None:
        return contextlib.nullcontext()
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"autocast_dtype must be torch.bfloat16, torch.float16 or None; got {dtype!r}.")
    if device.type == "cpu" and dtype == torch.bfloat16:
        check_cpu_bf16()  # bf16 products with float32 state where the CPU has them (elmo_core.precision)
    return torch.autocast(device.type, dtype=dtype)


def embed_sentences(
    model: Elmo,
    sentences: Sequence[Sequence[str]],
    *,
    layers: str | int = "all",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    batch_size: int | None = None,
    device: str | torch.device | None = None,
    autocast_dtype: torch.dtype | None = None,
    window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
    window_context: int | None = None,
) -> list[np.ndarray]:
    """ELMo vectors for tokenised sentences, one float32 CPU array per sentence, in order.

    Runs in eval mode under `torch.inference_mode`, batching by a token budget after sorting by
    length. A sentence's vectors do not depend on the batching (the default model is stateless).

    Args:
        model: An `Elmo` (stateless).
        sentences: Lists of token strings; empty lists give empty arrays.
        layers: `"all"` -> [n_layers + 1, tokens, dim]; `"top"` (last LSTM layer),
            `"average"` (mean of all layers), `"mix"` (the first scalar mix) or a layer
            index `k` in 0..n_layers -> [tokens, dim]. Layer 0 is the char CNN layer.
        batch_tokens: Budget of padded positions per batch (see `batches_by_token_budget`).
        batch_size: Optional cap on sentences per batch.
        device: Move the model here first (inputs follow the model).
        autocast_dtype: Run under `torch.autocast` in this dtype (`torch.bfloat16` or
            `torch.float16`), e.g. on a GPU: matrix products in half precision, about
            3 significant digits; outputs are still float32 arrays. None (default):
            the model's own dtype. On the CPU, `torch.bfloat16` runs the char CNN,
            highway and LSTM products in bf16 with float32 accumulation, gates and
            state, on CPUs with AVX512-BF16 or AMX (`elmo_core.precision`), and is
            refused on others, where it would be slower than float32.
        window_tokens: A sentence longer than this is read in overlapping windows of this many
            tokens (see `elmo_core.windows`), so memory does not grow with its length; shorter
            ones are read whole and are not affected. None (or 0) reads every sentence whole.
        window_context: Tokens of context on each side of a window's kept tokens
            (default `window_tokens // 8`).

    Returns:
        One array per input sentence, float32, dim = 2 * projection_dim.

    Raises:
        TypeError: if `sentences` is not a list of lists of str.
        ValueError: for an unknown `layers` value, a bad budget or window, a stateful
            model, an `autocast_dtype` other than bfloat16/float16, or bfloat16 on a CPU
            without native bf16.
    """
    check_sentences(sentences)
    out: list[np.ndarray | None] = [None] * len(sentences)
    for i, vectors in iter_embeddings(
        model,
        sentences,
        layers=layers,
        batch_tokens=batch_tokens,
        batch_size=batch_size,
        device=device,
        autocast_dtype=autocast_dtype,
        window_tokens=window_tokens,
        window_context=window_context,
    ):
        out[i] = vectors
    return out  # type: ignore[return-value]


# ---- elmo_core/scalar_mix.py --------------------------------------------------

LAYER_NORM_SCOPES = ("sentence", "batch")
"""Values of `ScalarMix(layer_norm_scope=...)`: whose tokens share the layer-norm statistics."""

ArrayT = TypeVar("ArrayT")


def softmax_weights(scalar_weights: torch.Tensor) -> torch.Tensor:
    """s = softmax(w): the weight each layer gets; sums to 1.

    Shape:
        scalar_weights: [num_layers] float -> [num_layers], same dtype and device
    """
    return torch.softmax(scalar_weights, dim=0)


def weighted_layer_sum(layers: Sequence[ArrayT], weights: Sequence[object], gamma: object) -> ArrayT:
    """gamma * (s_0 * h_0 + s_1 * h_1 + ...), accumulated in this fixed order.

    Only `*` and `+` are used, so the layers may be torch tensors or numpy/cupy arrays;
    the fixed order makes the same inputs give the same bits on every run.

    Args:
        layers: The `num_layers` layers h_k, each [..., dim].
        weights: s, one number (0-d tensor or numpy scalar) per layer, already
            normalised and of the layers' dtype.
        gamma: The scale, a number or a tensor/array broadcastable to a layer ([1]).

    Returns:
        The mix, of the shape and dtype of one layer.
    """
    mixed = weights[0] * layers[0]
    for weight, layer in zip(weights[1:], layers[1:]):
        mixed = mixed + weight * layer  # [..., dim]
    return gamma * mixed


def scalar_mix(layers: Sequence[torch.Tensor], scalar_weights: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """gamma * sum_k softmax(w)_k * h_k (paper equation 1), differentiable in all three inputs.

    Args:
        layers: The `num_layers` layers h_k.
        scalar_weights: w, before the softmax.
        gamma: The scale.

    Shape:
        layers: num_layers x [..., dim] float; scalar_weights: [num_layers]; gamma: [1]
        output: [..., dim], the layers' dtype
    """
    dtype = layers[0].dtype
    return weighted_layer_sum(layers, softmax_weights(scalar_weights).to(dtype), gamma.to(dtype))


class ScalarMix(nn.Module):
    """ELMo_task = gamma * sum_k softmax(w)_k * h_k  (paper equation 1).

    Args:
        num_layers: Number of output layers mixed: `n_layers + 1` (layer 0 = the token
            layer, then every LSTM layer). Everywhere in elmo-bilm `num_layers` means
            this count; the number of LSTM layers is the option `n_layers`.
        do_layer_norm: Normalise each layer before mixing (bilm-tf's `use_layer_norm`:
            one mean and variance over real positions and features, eps 1e-12, computed
            after the sentence boundaries are removed). Off by default, as the authors
            recommend.
        layer_norm_scope: Which positions share those statistics. "sentence" (the
            default): each sentence's own tokens, so a sentence's vectors do not depend
            on what it is batched with. "batch": every real token of the batch, as
            bilm-tf did; a sentence's vectors then change with its batch mates (use it
            only to reproduce the original's numbers on the original's batches).
        initial_scalar_parameters: Starting values of w (default zeros: equal weights).
        trainable: Whether w and gamma are learned. With `False` the mix is fixed at
            its initial values (for instance `[0, 0, 1]` with a large scale to take the
            top layer only, or the weights learned by an earlier run).
        gamma: Starting value of the scale gamma (default 1).

    Attributes:
        scalar_weights: w, shape [num_layers].
        gamma: shape [1].

    Shape:
        activations: [num_layers, batch, tokens, dim], or a sequence of num_layers
            tensors [batch, tokens, dim]; mask: [batch, tokens] bool
        output: [batch, tokens, dim]

    Raises:
        ValueError: if the number of layers given to `forward` differs from `num_layers`,
            or `layer_norm_scope` is not "sentence" or "batch".
    """

    def __init__(
        self,
        num_layers: int,
        do_layer_norm: bool = False,
        initial_scalar_parameters: Sequence[float] | None = None,
        trainable: bool = True,
        gamma: float = 1.0,
        layer_norm_scope: Literal["sentence", "batch"] = "sentence",
    ) -> None:
        super().__init__()
        if layer_norm_scope not in LAYER_NORM_SCOPES:
            raise ValueError(
                f"layer_norm_scope must be one of {LAYER_NORM_SCOPES}; got {layer_norm_scope!r}. "
                "'sentence' (the default) keeps each sentence independent of its batch mates."
            )
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * num_layers
        if len(initial_scalar_parameters) != num_layers:
            raise ValueError(
                f"initial_scalar_parameters must have one value per layer ({num_layers}); got "
                f"{len(initial_scalar_parameters)}: {list(initial_scalar_parameters)}."
            )
        self.num_layers = num_layers
        self.do_layer_norm = do_layer_norm
        self.layer_norm_scope = layer_norm_scope
        self.initial_scalar_parameters = tuple(float(v) for v in initial_scalar_parameters)
        self.initial_gamma = float(gamma)
        self.scalar_weights = nn.Parameter(torch.empty(num_layers), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.empty(1), requires_grad=trainable)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set w and gamma to their starting values (`initial_scalar_parameters`, `gamma`).

        The constructor calls it; so does hf_elmo for a mix that a checkpoint lacks.
        """
        with torch.no_grad():
            self.scalar_weights.copy_(torch.tensor(self.initial_scalar_parameters))
            self.gamma.fill_(self.initial_gamma)

    @property
    def normalized_weights(self) -> torch.Tensor:
        """softmax(w): the weight given to each layer, [num_layers], detached."""
        return softmax_weights(self.scalar_weights.detach())

    def forward(
        self, activations: torch.Tensor | Sequence[torch.Tensor], mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The mix of the layers; see the class docstring.

        Given a sequence of layer tensors, the mix reads those very tensors, so gradients
        reach each of them (what `ElmoModel` returns as `hidden_states`).
        """
        layers = activations.unbind(0) if isinstance(activations, torch.Tensor) else tuple(activations)
        if len(layers) != self.num_layers:
            raise ValueError(
                f"ScalarMix was built for {self.num_layers} layers but got {len(layers)} "
                f"(activations of shape {_shape(activations)}); build it with num_layers = n_layers + 1."
            )
        if self.do_layer_norm:
            if mask is None:
                raise ValueError("ScalarMix with do_layer_norm=True needs the mask of real positions.")
            per_sentence = self.layer_norm_scope == "sentence"
            layers = tuple(_masked_layer_norm(layer, mask, per_sentence) for layer in layers)
        return scalar_mix(layers, self.scalar_weights, self.gamma)  # [batch, tokens, dim]


def _shape(activations: torch.Tensor | Sequence[torch.Tensor]) -> object:
    if isinstance(activations, torch.Tensor):
        return tuple(activations.shape)
    return [tuple(layer.shape) for layer in activations]


def _masked_layer_norm(layer: torch.Tensor, mask: torch.Tensor, per_sentence: bool, eps: float = 1e-12) -> torch.Tensor:
    """One layer normalised by the mean/variance over real positions and features.

    per_sentence: statistics over each sentence's own tokens (one mean per batch row);
    otherwise one mean/variance over every real token of the batch (bilm-tf).
    """
    m = mask[:, :, None].to(layer.dtype)  # [batch, tokens, 1]
    dims = (1, 2) if per_sentence else (0, 1, 2)
    count = m.sum(dim=dims, keepdim=True) * layer.shape[-1]  # [batch or 1, 1, 1]
    safe = count.clamp(min=1)  # an empty sentence: nothing to normalise, no division by 0
    mean = (layer * m).sum(dim=dims, keepdim=True) / safe
    var = (((layer - mean) * m) ** 2).sum(dim=dims, keepdim=True) / safe
    return (layer - mean) / torch.sqrt(var + eps)


# ---- elmo_core/elmo.py --------------------------------------------------------

class ElmoOutput(NamedTuple):
    """What `Elmo.forward` returns.

    Attributes:
        representations: One scalar-mixed tensor per output representation,
            each [batch, tokens, 2 * projection_dim], zero at padded positions.
        activations: Every biLM layer, [n_layers + 1, batch, tokens, 2 * projection_dim].
        mask: bool [batch, tokens], True = real token.
    """

    representations: list[torch.Tensor]
    activations: torch.Tensor
    mask: torch.Tensor


class Elmo(nn.Module):
    """Contextual word vectors: a biLM whose layers are mixed per task (paper section 3.2).

    Args:
        options: biLM hyperparameters. The weights are loaded separately, e.g.
            `elmo_core.load_bilm_tf(elmo, "weights.hdf5")` or `load_model_folder(dir)`.
        num_output_representations: How many independent scalar mixes to compute over
            one biLM run (1 for most tasks; the paper uses 2 for SQuAD/SNLI-style models
            that add ELMo at both the input and the output of their encoder).
        dropout: Dropout on each representation during training (AllenNLP's default
            0.5; 0 disables it). Never applied in `eval()` mode.
        do_layer_norm: See `ScalarMix`; off by default, as the authors recommend.
        layer_norm_scope: See `ScalarMix`: "sentence" (default, batch-invariant) or
            "batch" (bilm-tf's whole-batch statistics).
        keep_sentence_boundaries: Also return the `<S>`/`</S>` positions.
        requires_grad: The biLM parameters' initial `requires_grad`. Off by default: the
            biLM is frozen, runs without building an autograd graph, and only the scalar
            mixes (w and gamma per representation) are trainable. Whether the biLM is
            frozen is read from its parameters at every call, so unfreezing it later
            (`elmo.bilm.requires_grad_(True)`, or any subset, such as
            `elmo.bilm.char_cnn` or one LSTM layer) fine-tunes exactly those parameters.
        stateful: Carry LSTM states across batches as the original did (see `BiLM`).
        scalar_mix_parameters: Fixed mix weights w (one per layer). When given, the
            mixes are not trainable.
        token_cache_words: Bound of the biLM's layer-0 cache in word types (see
            `elmo_core.token_cache`); 0 switches it off. On by default: it changes no
            value (atol 1e-6), is skipped whenever the char CNN needs gradients (a
            char CNN parameter with `requires_grad` under grad mode or in training
            mode), and empties itself when the char CNN's weights change.

    Shape:
        char_ids: [batch, tokens, chars] int64 (no <S>/</S>); mask: [batch, tokens] bool
    """

    def __init__(
        self,
        options: BiLMOptions,
        num_output_representations: int = 1,
        dropout: float = 0.5,
        do_layer_norm: bool = False,
        keep_sentence_boundaries: bool = False,
        requires_grad: bool = False,
        stateful: bool = False,
        scalar_mix_parameters: Sequence[float] | None = None,
        token_cache_words: int = DEFAULT_TOKEN_CACHE_WORDS,
        layer_norm_scope: str = "sentence",
    ) -> None:
        super().__init__()
        if num_output_representations < 0:
            raise ValueError(f"num_output_representations must be >= 0; got {num_output_representations}.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {dropout}.")
        self.options = options
        self.dropout = dropout
        self.bilm = BiLM(
            options,
            stateful=stateful,
            keep_sentence_boundaries=keep_sentence_boundaries,
            token_cache_words=token_cache_words,
        )
        self.bilm.requires_grad_(requires_grad)
        self.scalar_mixes = nn.ModuleList(
            ScalarMix(
                options.num_layers,
                do_layer_norm=do_layer_norm,
                layer_norm_scope=layer_norm_scope,
                initial_scalar_parameters=scalar_mix_parameters,
                trainable=scalar_mix_parameters is None,
            )
            for _ in range(num_output_representations)
        )

    @property
    def requires_grad(self) -> bool:
        """Whether any biLM parameter has `requires_grad` now (then `forward` builds a graph).

        Setting it sets every biLM parameter's `requires_grad` (`bilm.requires_grad_`).
        """
        return bilm_is_trainable(self.bilm)

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.bilm.requires_grad_(bool(value))

    @property
    def output_dim(self) -> int:
        """Width of the vectors: `2 * projection_dim`."""
        return self.options.output_dim

    @property
    def num_layers(self) -> int:
        """Number of output layers: `n_layers + 1` (layer 0 = token layer, then each LSTM layer)."""
        return self.options.num_layers

    def forward(self, char_ids: torch.Tensor, mask: torch.Tensor | None = None) -> ElmoOutput:
        """Run the biLM once and every scalar mix over it.

        The biLM builds an autograd graph when any of its parameters has
        `requires_grad` at this call (see `run_bilm`), so gradients reach exactly the
        parameters the user unfroze, whenever they unfroze them.

        Raises:
            ValueError / TypeError: as `BiLM.forward`.
        """
        out = run_bilm(self.bilm, char_ids, mask)
        layers = out.activations.unbind(0)
        representations = mix_representations(self.scalar_mixes, layers, out.mask, self.dropout, self.training)
        return ElmoOutput(representations, out.activations, out.mask)

    def embed(
        self,
        sentences: Sequence[Sequence[str]],
        layers: str | int = "all",
        *,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        batch_size: int | None = None,
        device: str | torch.device | None = None,
        autocast_dtype: torch.dtype | None = None,
        window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
        window_context: int | None = None,
    ) -> list[np.ndarray]:
        """Vectors for tokenised sentences as float32 numpy arrays; see `embed_sentences`."""
        return embed_sentences(
            self,
            sentences,
            layers=layers,
            batch_tokens=batch_tokens,
            batch_size=batch_size,
            device=device,
            autocast_dtype=autocast_dtype,
            window_tokens=window_tokens,
            window_context=window_context,
        )


def bilm_is_trainable(bilm: BiLM) -> bool:
    """Whether any parameter of `bilm` has `requires_grad` now: the one rule for "frozen"."""
    return any(p.requires_grad for p in bilm.parameters())


def run_bilm(bilm: BiLM, char_ids: torch.Tensor, mask: torch.Tensor | None, frozen: bool | None = None) -> BiLMOutput:
    """`bilm(char_ids, mask)`, without an autograd graph when the biLM is frozen.

    Shared by `Elmo.forward` and hf_elmo's `ElmoModel.forward`.

    Args:
        bilm: The biLM.
        char_ids, mask: As `BiLM.forward`.
        frozen: None (the default) reads it from the parameters at this call: frozen
            when no biLM parameter has `requires_grad` (`bilm_is_trainable`). With some
            unfrozen (all, the char CNN, one LSTM layer), the graph is built and only
            those parameters get gradients; the others are constants in it, as in any
            PyTorch module. True/False force it (True: no graph whatever the parameters).

    Raises:
        ValueError / TypeError: as `BiLM.forward`.
    """
    if frozen is None:
        frozen = not bilm_is_trainable(bilm)
    with torch.no_grad() if frozen else nullcontext():  # frozen: no graph through the biLM
        return bilm(char_ids, mask)


def mix_representations(
    scalar_mixes: Iterable[ScalarMix],
    layers: Sequence[torch.Tensor],
    mask: torch.Tensor,
    dropout: float,
    training: bool,
) -> list[torch.Tensor]:
    """Every scalar mix of the biLM layers, zero at padded positions, with dropout while training.

    The mixes read the very tensors in `layers`, so that gradients reach each of them
    (hf_elmo returns them as `hidden_states`).

    Args:
        scalar_mixes: One `ScalarMix` per output representation.
        layers: The `num_layers` (= n_layers + 1) biLM layers.
        mask: True for real tokens.
        dropout: Dropout probability on each representation, applied only if `training`.
        training: Whether the calling module is in training mode.

    Shape:
        layers: num_layers x [batch, tokens, dim]; mask: [batch, tokens] bool
        output: one [batch, tokens, dim] per mix
    """
    representations = []
    for mix in scalar_mixes:
        mixed = mix(layers, mask) * mask[..., None].to(layers[0].dtype)  # [batch, tokens, dim]
        representations.append(F.dropout(mixed, dropout, training))
    return representations


# ---- elmo_core/weights.py -----------------------------------------------------

def count_non_finite(values: torch.Tensor | np.ndarray, rows_per_block: int | None = None) -> int:
    """How many values are NaN or infinite (0 for integer values).

    Args:
        values: A tensor (a weight), or a numpy block of a file being read. A numpy
            block is counted with numpy: counting the blocks through torch raised the
            peak memory of reading an hdf5 file by about the size of its weights
            (tests/core/test_memory.py).
        rows_per_block: Count a tensor this many rows (axis 0) at a time, so that the
            temporaries stay small for a large tensor; None counts it at once.
    """
    if isinstance(values, np.ndarray):
        return int(values.size - np.count_nonzero(np.isfinite(values))) if values.dtype.kind == "f" else 0
    if not values.is_floating_point():
        return 0
    if values.dim() == 0:
        return int(not bool(torch.isfinite(values)))
    step = rows_per_block or max(values.shape[0], 1)
    return sum(
        int(torch.isfinite(values[start : start + step]).logical_not_().sum())
        for start in range(0, values.shape[0], step)
    )


def non_finite_error(source: object, what: str, count: int, fix: str) -> WeightFileError:
    """The error for weights holding NaN or infinite values: where, how many, and what to do.

    Args:
        source: The file (or folder) the weights came from.
        what: The tensor or dataset, e.g. "tensor 'bilm.char_cnn.projection.bias'".
        count: How many values are not finite (from `count_non_finite`).
        fix: The advice that ends the message.
    """
    return WeightFileError(
        f"{source}: {what} holds {count} NaN or infinite values, so every vector would be NaN. {fix}"
    )


# ---- elmo_core/model_folder.py ------------------------------------------------

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
MODEL_TYPE = "elmo"


def read_model_config(path: str | Path) -> tuple[BiLMOptions, dict[str, Any]]:
    """The options and the `Elmo` settings stored in a model folder's config.json.

    Raises:
        WeightFileError: if the folder or its config.json is missing, not JSON, or has
            a `model_type` other than "elmo".
        OptionsError: if the options in it are invalid (names the file).
    """
    folder = Path(path)
    config_path = folder / CONFIG_NAME
    if not folder.is_dir():
        raise WeightFileError(f"model folder {folder} does not exist or is not a folder.")
    if not config_path.is_file():
        raise WeightFileError(
            f"{folder} is not an ELMo model folder: it has no {CONFIG_NAME}. A model folder holds "
            f"{CONFIG_NAME}, {WEIGHTS_NAME} and {TOKENIZER_CONFIG_NAME}; for original bilm-tf files "
            "pass options.json and the hdf5 weights instead."
        )
    config = read_json(config_path, "model config", error=WeightFileError)
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise WeightFileError(f"{config_path} has model_type {found!r}; an ELMo model folder has model_type 'elmo'.")
    try:
        # Only the two bilm-tf sections: config.json's other keys are the Elmo settings
        # and the Hugging Face bookkeeping, not options (bilm-tf's training `dropout`
        # would otherwise collide with the Elmo `dropout`).
        options = BiLMOptions.from_dict({k: v for k, v in config.items() if k in ("lstm", "char_cnn")})
    except OptionsError as err:
        raise OptionsError(f"{config_path}: {err}") from None
    settings = {key: config.get(key, default) for key, default in ELMO_SETTINGS.items()}
    return options, settings


NON_FINITE_FIX = "The file is damaged or came from a diverged training run; save or download the model again."
"""How a saved model with NaN or infinite weights is put right (the end of `non_finite_error`'s message)."""


class WeightFiles(NamedTuple):
    """Where a model folder's tensors are: one safetensors file, or the shards of an index.

    Attributes:
        source: The file that describes the weights: the one weights file, or the index
            (named in errors about the set as a whole).
        files: Each tensor's name in the files -> the safetensors file that holds it.
        shapes: Each tensor's name -> its shape, read from the file headers.
    """

    source: Path
    files: dict[str, Path]
    shapes: dict[str, tuple[int, ...]]


_VARIANT_FILE = re.compile(r"model\.(?P<variant>[^.]+)\.safetensors")
_VARIANT_INDEX = re.compile(r"model\.safetensors\.index\.(?P<variant>[^.]+)\.json")
_SHARD = re.compile(r".*-\d{5}-of-\d{5}")


def weight_files(path: str | Path, variant: str | None = None) -> WeightFiles:
    """Find a model folder's weights and read every file's header (no weights are loaded).

    The layouts are transformers' (`save_pretrained`), read in its order:
    `model.safetensors`, else `model.safetensors.index.json` (whose `weight_map` names
    the shard of each tensor, `model-00001-of-00003.safetensors`, ...). With `variant`
    (`save_pretrained(..., variant="fp16")`) the names are `model.fp16.safetensors` and
    `model.safetensors.index.fp16.json`. Without `variant`, a folder that holds no plain
    weights but exactly one variant is read as that variant, so that every face (the
    command line, spaCy) reads it without a way to name it.

    Args:
        path: The model folder.
        variant: The variant to read, or None (see above).

    Returns:
        `WeightFiles`: every tensor's file and shape, over all shards.

    Raises:
        WeightFileError: if the folder holds no weights (or several variants and no
            `variant` was given); if the index is not JSON or has no `weight_map`, names
            files the folder does not hold (all of them are listed), or a tensor its
            shard does not hold; or if a file is not readable safetensors.
    """
    folder = Path(path)
    present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if variant is None:
        variant = folder_variant(folder)
    single, index = _variant_name(WEIGHTS_NAME, variant), _variant_name(WEIGHTS_INDEX_NAME, variant)
    if single in present:
        shapes = _header(folder / single)
        return WeightFiles(folder / single, dict.fromkeys(shapes, folder / single), shapes)
    if index in present:
        return _sharded(folder / index, present)
    raise WeightFileError(
        f"model folder {path} has no {single} (the weights), only {present}. Copy the whole folder again, "
        f"or re-create it with save_model_folder / save_pretrained / elmo convert (sharded weights are "
        f"read through {index}, which it lacks too)."
    )


def folder_variant(path: str | Path) -> str | None:
    """The `variant=` a model folder's weights must be read with when none is named.

    None when the folder holds plain weights (`model.safetensors` or its index), or no
    weights at all; else its one variant (`"fp16"` for `model.fp16.safetensors` or
    `model.safetensors.index.fp16.json`). hf_elmo's `from_pretrained` passes it on, so
    that a variant-only folder loads there as in the core.

    Raises:
        WeightFileError: if the folder holds no plain weights but several variants.
    """
    folder = Path(path)
    present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if WEIGHTS_NAME in present or WEIGHTS_INDEX_NAME in present:
        return None
    variants = sorted(
        {
            match["variant"]
            for name in present
            for match in (_VARIANT_FILE.fullmatch(name), _VARIANT_INDEX.fullmatch(name))
            if match and not _SHARD.fullmatch(match["variant"])
        }
    )
    if len(variants) > 1:
        raise WeightFileError(
            f"model folder {folder} holds no {WEIGHTS_NAME} but weights of {len(variants)} variants "
            f"({', '.join(variants)}); say which to read: load_model_folder(path, variant={variants[0]!r}) "
            f"or from_pretrained(path, variant={variants[0]!r}), or keep one variant in the folder."
        )
    return variants[0] if variants else None


def _variant_name(name: str, variant: str | None) -> str:
    """transformers' `_add_variant`: the variant goes before the last suffix (`model.fp16.safetensors`)."""
    if variant is None:
        return name
    stem, suffix = name.rsplit(".", 1)
    return f"{stem}.{variant}.{suffix}"


def _sharded(index_path: Path, present: list[str]) -> WeightFiles:
    """The tensors of an index's shards, checked against the index."""
    index = read_json(index_path, "safetensors index", error=WeightFileError)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
        raise WeightFileError(
            f"{index_path} has no weight_map (tensor name -> shard file); it is damaged. Save the folder again."
        )
    missing = sorted(set(weight_map.values()) - set(present))
    if missing:
        raise WeightFileError(
            f"{index_path} names {len(missing)} shard file(s) the folder does not hold: {missing}. The copy "
            "is incomplete (an interrupted download or copy): copy the whole folder again."
        )
    folder = index_path.parent
    files = {name: folder / shard for name, shard in weight_map.items()}
    shapes: dict[str, tuple[int, ...]] = {}
    for shard in sorted(set(weight_map.values())):
        held = _header(folder / shard)
        for name in (n for n, f in weight_map.items() if f == shard):
            if name not in held:
                raise WeightFileError(
                    f"{index_path} puts tensor '{name}' in {shard}, which does not hold it. The shards do not "
                    "belong to this index: copy the whole folder again."
                )
            shapes[name] = held[name]
    return WeightFiles(index_path, files, shapes)


def _header(weights_path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape, from a safetensors file's header."""
    from safetensors import safe_open

    try:
        with safe_open(str(weights_path), framework="pt", device="cpu") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as err:  # SafetensorError, OSError, ValueError, ...: all mean "unreadable"
        raise _unreadable(weights_path, err) from err


def check_model_folder(path: str | Path, variant: str | None = None) -> None:
    """Raise the error `load_model_folder` would raise for this folder's files, cheaply.

    Reads config.json and the safetensors headers only, of every shard (no weights are
    loaded; the model is built on the meta device), so it costs nothing for a large
    model. Used by hf_elmo to explain a failed `from_pretrained`.

    Args:
        path: The model folder.
        variant: As `load_model_folder`.

    Raises:
        WeightFileError: for a missing or unreadable config.json or weights file (any
            shard, or the index), a `model_type` other than "elmo", or a missing or
            mis-shaped tensor.
        OptionsError: for invalid options or Elmo settings in config.json.
    """
    options, settings = read_model_config(path)
    with torch.device("meta"):
        model = _build_elmo(options, settings, Path(path) / CONFIG_NAME)
    weights = weight_files(path, variant)
    _check_state({k: weights.shapes[f] for k, f in _base_model_keys(weights.shapes).items()}, model, weights.source)


def _build_elmo(options: BiLMOptions, settings: dict[str, Any], config_path: Path) -> Elmo:
    try:
        return Elmo(options, **settings)
    except (TypeError, ValueError) as err:
        raise OptionsError(
            f"{config_path}: its Elmo settings cannot be used ({err}). Valid settings and defaults: "
            f"{ELMO_SETTINGS}; fix the value in {CONFIG_NAME} or pass it to load_model_folder as an override."
        ) from err


def _unreadable(weights_path: Path, err: Exception) -> WeightFileError:
    return WeightFileError(
        f"{weights_path} is not a readable safetensors file ({type(err).__name__}: {err}). It is "
        "probably truncated or corrupted (an interrupted copy or download); copy or save it again."
    )


def _base_model_keys(keys: Iterable[str]) -> dict[str, str]:
    """Map the `Elmo`'s own tensor names to the file's.

    A task model that holds an `Elmo` as a submodule saves its tensors under that
    submodule's name (`<prefix>.bilm.*`, `<prefix>.scalar_mixes.*`), beside its own (a
    task head). The prefix is read off the `bilm` keys, so the core needs no framework's
    naming; the task model's other tensors are left out.
    """
    keys = list(keys)
    prefixes = {
        "".join(f"{part}." for part in parts[: parts.index("bilm")])
        for parts in (key.split(".") for key in keys)
        if "bilm" in parts
    }
    if len(prefixes) != 1 or prefixes == {""}:
        return {key: key for key in keys}  # an Elmo's own tensors (or not: _check_state names what is missing)
    (prefix,) = prefixes
    return {key[len(prefix) :]: key for key in keys if key.startswith(prefix)}


def _check_state(shapes: dict[str, tuple[int, ...]], model: Elmo, weights_path: Path) -> None:
    """Every tensor of `model` is in `shapes` with its shape (`weights_path` names the weights in errors)."""
    for name, tensor in model.state_dict().items():
        if name not in shapes:
            if name.startswith("scalar_mixes."):
                continue
            raise WeightFileError(
                f"{weights_path} has no tensor '{name}' (expected shape {tuple(tensor.shape)}). The file "
                f"does not belong to this {CONFIG_NAME}, or is not an ELMo model; save the folder again."
            )
        if shapes[name] != tuple(tensor.shape):
            raise WeightFileError(
                f"{weights_path}: tensor '{name}' has shape {shapes[name]}, but {CONFIG_NAME} implies "
                f"{tuple(tensor.shape)}. The options in {CONFIG_NAME} do not match these weights: use the "
                f"{CONFIG_NAME} saved with them."
            )


# ---- elmo_core/paired_bptt.py -------------------------------------------------

def _gate_order(w: torch.Tensor) -> torch.Tensor:
    """Rows (or entries) in blocks i, j, f, o (bilm-tf) -> i, f, o, j: the three sigmoid
    blocks side by side, so that one `sigmoid` and one `tanh` cover a step's gates."""
    i, j, f, o = w.chunk(4, dim=0)
    return torch.cat([i, f, o, j])


def _layer_weights(forward_cell, backward_cell, dtype: torch.dtype):  # noqa: ANN001, ANN202
    """Both directions' weights stacked on a leading axis of 2, right-hand operands, in
    gate order i, f, o, j, the forget bias added; differentiable functions of the cells'
    parameters (autograd carries their gradients back through the stack and the cast).

    Shape: W_x [2, in, 4D], B [2, 1, 4D], W_h [2, P, 4D], W_P [2, D, P], all in `dtype`
    """
    cells = (forward_cell, backward_cell)
    D = forward_cell.dim
    forget = torch.zeros(4 * D, device=forward_cell.input_linear.bias.device)
    forget[D : 2 * D] = FORGET_BIAS  # block f in the order i, f, o, j
    w_x = torch.stack([_gate_order(c.input_linear.weight).t() for c in cells])
    bias = torch.stack([_gate_order(c.input_linear.bias) + forget for c in cells])[:, None, :]
    w_h = torch.stack([_gate_order(c.state_linear.weight).t() for c in cells])
    w_p = torch.stack([c.state_projection.weight.t() for c in cells])
    return tuple(w.to(dtype) for w in (w_x, bias, w_h, w_p))


class _PairedRecurrence(torch.autograd.Function):
    """The recurrent part of one layer, both directions (see the module docstring).

    Shape: pre [2, steps, batch, 4D], W_h [2, P, 4D], W_P [2, D, P] (one dtype, the
    products' one) -> out [2, steps, batch, P] in that dtype, zero where a row has ended.
    `batch_sizes[t]` rows run at step t (rows sorted longest first).
    """

    @staticmethod
    def forward(ctx, pre, w_h, w_p, batch_sizes):  # noqa: ANN001, ANN205
        with torch.autocast(pre.device.type, enabled=False):
            _, num_steps, batch_size, _ = pre.shape
            D, P = w_p.shape[1], w_p.shape[2]
            # Rows past their end are written as zeros step by step (not zero-filled first).
            out = pre.new_empty(2, num_steps, batch_size, P)
            gated = pre.new_empty(2, num_steps, batch_size, D)  # g_t, for dW_P
            h = pre.new_zeros(2, batch_size, P)
            c = pre.new_zeros(2, batch_size, D, dtype=torch.float32)
            saved = []  # per step: (sigmoid(i, f, o), tanh(j), c_prev, tanh(c)), float32
            for t in range(num_steps):
                n = batch_sizes[t]
                z = torch.baddbmm(pre[:, t, :n], h[:, :n], w_h).float()  # [2, n, 4D]
                s = torch.sigmoid(z[..., : 3 * D])  # [2, n, 3D]: i, f, o
                j = torch.tanh(z[..., 3 * D :])  # [2, n, D]
                i, f, o = s.chunk(3, dim=-1)
                c_prev = c[:, :n]
                c = torch.addcmul(f * c_prev, i, j)  # [2, n, D]
                tanh_c = torch.tanh(c)
                g = gated[:, t, :n]
                g.copy_(o * tanh_c)  # in the products' dtype
                h = out[:, t, :n]
                torch.bmm(g, w_p, out=h)  # [2, n, P]
                if n < batch_size:
                    out[:, t, n:] = 0
                    gated[:, t, n:] = 0
                saved.append((s, j, c_prev, tanh_c))
        ctx.saved = saved
        ctx.batch_sizes = batch_sizes
        ctx.save_for_backward(w_h, w_p, out, gated)
        return out

    @staticmethod
    def backward(ctx, d_out):  # noqa: ANN001, ANN205
        w_h, w_p, out, gated = ctx.saved_tensors
        saved, batch_sizes = ctx.saved, ctx.batch_sizes
        with torch.autocast(out.device.type, enabled=False):
            _, num_steps, batch_size, P = out.shape
            D = w_p.shape[1]
            d_pre = out.new_empty(2, num_steps, batch_size, 4 * D)  # dz_t; zero where a row has ended
            d_h_all = out.new_empty(2, num_steps, batch_size, P)  # dh_t, for dW_P
            d_h = out.new_zeros(2, batch_size, P, dtype=torch.float32)  # from step t + 1
            d_c = out.new_zeros(2, batch_size, D, dtype=torch.float32)
            ds_buffer = out.new_empty(2, batch_size, 3 * D, dtype=torch.float32)
            w_h_t, w_p_t = w_h.transpose(1, 2), w_p.transpose(1, 2)
            for t in range(num_steps - 1, -1, -1):
                n = batch_sizes[t]
                s, j, c_prev, tanh_c = saved[t]
                saved[t] = None  # freed as soon as it is used
                i, f, o = s.chunk(3, dim=-1)
                dh = d_h_all[:, t, :n]
                dh.copy_(d_out[:, t, :n] + d_h[:, :n])  # in the products' dtype
                dg = torch.bmm(dh, w_p_t).float()  # [2, n, D]
                dc = torch.addcmul(d_c[:, :n], dg * o, 1 - tanh_c * tanh_c)
                ds = ds_buffer[:, :n]  # [2, n, 3D]: d i, d f, d o
                torch.mul(dc, j, out=ds[..., :D])
                torch.mul(dc, c_prev, out=ds[..., D : 2 * D])
                torch.mul(dg, tanh_c, out=ds[..., 2 * D :])
                dz = d_pre[:, t, :n]
                dz[..., : 3 * D] = ds.mul_(s).mul_(1 - s)
                dz[..., 3 * D :] = (dc * i).mul_(1 - j * j)
                d_h[:, :n] = torch.bmm(dz, w_h_t)
                torch.mul(dc, f, out=d_c[:, :n])
                if n < batch_size:
                    d_pre[:, t, n:] = 0
                    d_h_all[:, t, n:] = 0
            ctx.saved = None
            h_prev = torch.cat([out.new_zeros(2, 1, batch_size, P), out[:, :-1]], dim=1)  # h_{t-1}
            d_w_h = torch.bmm(h_prev.view(2, -1, P).transpose(1, 2), d_pre.view(2, -1, 4 * D))  # [2, P, 4D]
            d_w_p = torch.bmm(gated.view(2, -1, D).transpose(1, 2), d_h_all.view(2, -1, P))  # [2, D, P]
        return d_pre, d_w_h, d_w_p, None


def paired_training_stacks(
    stacks: tuple[LSTMStack, LSTMStack], tokens: torch.Tensor, lengths: torch.Tensor
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Both clip-free LSTM stacks over a batch, for training (same contract as `paired_stacks`).

    Args:
        stacks: `(forward_layers, backward_layers)` of a `BiLM`; cells without clips.
        tokens: Token vectors (layer 0), batch-major, right-padded.
        lengths: Real positions per row, each >= 1.

    Returns:
        `(forward outputs, backward outputs)`, one tensor per layer, each time-major
        [steps, batch, P] in the input's row order and time direction, zero past a row's
        length, in the autocast dtype under autocast (float32 otherwise); residual
        connections and dropout as in `LSTMStack.forward`.
    """
    forward_stack, backward_stack = stacks
    batch_size, num_steps, _ = tokens.shape
    device_type = tokens.device.type
    dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else tokens.dtype
    sorted_lengths, order = lengths.sort(descending=True, stable=True)
    steps = torch.arange(num_steps, device=lengths.device)
    batch_sizes = (sorted_lengths[None, :] > steps[:, None]).sum(dim=1).tolist()  # rows running at step t
    in_order = torch.equal(order, torch.arange(batch_size, device=order.device))  # batches come sorted
    x = (tokens if in_order else tokens.index_select(0, order)).transpose(0, 1)  # [steps, batch, P], sorted
    reverse = reverse_index(sorted_lengths, num_steps)[..., None]  # [steps, batch, 1]

    def flip(t: torch.Tensor) -> torch.Tensor:  # each row reversed over its own length
        return t.gather(0, reverse.expand(-1, -1, t.shape[-1]))

    layer_input = torch.stack([x, flip(x)]).to(dtype)  # [2, steps, batch, P]
    outputs = []
    for k, (fc, bc) in enumerate(zip(forward_stack.layers, backward_stack.layers)):
        if forward_stack.dropout:
            layer_input = F.dropout(layer_input, forward_stack.dropout, forward_stack.training)
        w_x, bias, w_h, w_p = _layer_weights(fc, bc, dtype)
        with torch.autocast(device_type, enabled=False):
            pre = torch.baddbmm(bias, layer_input.reshape(2, num_steps * batch_size, -1), w_x)  # [2, steps*batch, 4D]
        y = _PairedRecurrence.apply(pre.view(2, num_steps, batch_size, -1), w_h, w_p, batch_sizes)
        if k > 0 and forward_stack.use_skip_connections:
            y = y + layer_input  # the residual adds the (dropped-out) input, as LSTMStack does
        outputs.append(y)
        layer_input = y
    if in_order:
        return [y[0] for y in outputs], [flip(y[1]) for y in outputs]
    restore = torch.empty_like(order)
    restore[order] = torch.arange(batch_size, device=order.device)  # sorted row of each batch row
    return (
        [y[0].index_select(1, restore) for y in outputs],
        [flip(y[1]).index_select(1, restore) for y in outputs],
    )


# ---- hf_elmo/modeling_elmo.py -------------------------------------------------

__all__ = ["ElmoModelOutput", "ElmoPreTrainedModel", "ElmoModel", "ElmoForTokenClassification"]


@dataclass
class ElmoModelOutput(ModelOutput):
    """What `ElmoModel` returns.

    Attributes:
        last_hidden_state: The ELMo vectors: the first scalar mix of the biLM layers
            (`gamma * sum_k softmax(w)_k * h_k`), zero at padded positions.
            [batch, tokens, 2 * projection_dim].
        hidden_states: With `output_hidden_states`: every biLM layer, `n_layers + 1`
            tensors [batch, tokens, 2 * projection_dim]; index 0 is the char CNN's token
            vector (repeated twice to the full width), index l the l-th LSTM layer
            `[forward ; backward]`.
        representations: With `num_output_representations > 1`: every scalar mix,
            `last_hidden_state` first.
    """

    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    representations: tuple[torch.Tensor, ...] | None = None


def _loaded(tensor: torch.Tensor) -> bool:
    """True for a tensor that `from_pretrained` filled from the checkpoint."""
    return getattr(tensor, "_is_hf_initialized", False)


class ElmoPreTrainedModel(PreTrainedModel):
    """Weight initialisation, saving and loading shared by the ELMo models.

    transformers 5 builds a model on the meta device, loads the checkpoint, then calls
    `_init_weights` on every module: a tensor it loaded carries `_is_hf_initialized`,
    and `_init_weights` never touches those, so imported weights stay exactly as saved.
    What it does initialise (a missing tensor, or every tensor of a model built from a
    config) gets the value elmo_core's constructors give it, from the core's own methods:
    `reset_parameters` (ScalarMix, CharCNN, and torch's Linear/Conv1d),
    `Highway.init_carry_bias` and `BiLM.reset_buffers`.
    """

    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    _no_split_modules = ["BiLM"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        # elmo_core's own initialisation (the constructors' values), for what was not loaded.
        if isinstance(module, BiLM):
            module.reset_buffers()  # the <S>/</S> char ids: non-persistent, never in a checkpoint
        own = list(module.parameters(recurse=False))
        if not hasattr(module, "reset_parameters") or not own or all(_loaded(p) for p in own):
            return
        kept = [(p, p.detach().clone()) for p in own if _loaded(p)]  # a partly loaded module
        module.reset_parameters()  # ScalarMix, CharCNN (char_embedding), torch's Linear/Conv1d
        for p, value in kept:
            p.copy_(value)
        highway = self._highway_holding(module)
        if highway is not None and not _loaded(module.bias):
            highway.init_carry_bias(module)

    def _highway_holding(self, layer: nn.Module) -> Highway | None:
        # transformers skips modules without parameters of their own (Highway), so its
        # layers are recognised here.
        for module in self.modules():
            if isinstance(module, Highway) and any(candidate is layer for candidate in module.layers):
                return module
        return None

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        """As transformers', and the biLM (and a fixed scalar mix) stay frozen.

        A local folder that holds one `variant=` of the weights and no plain ones is read
        as that variant without naming it (`elmo_core.model_folder.folder_variant`), as
        the core, the command line and spaCy read it.

        transformers 5 wraps every loaded tensor in a new `nn.Parameter` with
        `requires_grad=True`, which would silently make the frozen biLM trainable
        (only the scalar mix is meant to train); this puts the constructor's choice back.
        """
        source = args[0] if args else kwargs.get("pretrained_model_name_or_path")
        if kwargs.get("variant") is None and isinstance(source, (str, os.PathLike)) and os.path.isdir(source):
            # A folder of one variant's weights only (save_pretrained(d, variant="fp16")) loads as in the core.
            kwargs["variant"] = folder_variant(source)
        try:
            loaded = super().from_pretrained(*args, **kwargs)
        except Exception as err:
            # transformers' own errors for a broken folder come from deep inside it
            # ("look at the above report", a raw SafetensorError); a local folder gets
            # elmo_core's diagnosis instead, which names the file and the fix.
            _explain_bad_folder(source, err, kwargs.get("variant"))
            raise
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # output_loading_info=True
        for name, tensor in model.state_dict().items():
            bad = count_non_finite(tensor)
            if bad:
                raise non_finite_error(source, f"tensor '{name}'", bad, NON_FINITE_FIX)
        model.freeze_bilm()
        return loaded

    def freeze_bilm(self) -> None:
        """Make the biLM (and scalar mixes fixed by the config) untrainable, as built."""
        for module in self.modules():
            if isinstance(module, BiLM):
                module.requires_grad_(False)
            elif isinstance(module, ScalarMix) and self.config.scalar_mix_parameters is not None:
                module.requires_grad_(False)

    # ------------------------------------------------------------------ input embeddings
    def get_input_embeddings(self) -> nn.Module:
        """The char CNN: ELMo's input layer, from characters to token vectors (layer 0).

        There is no word-embedding matrix: every token, whatever its string, is embedded
        from its characters (`char_cnn.char_embedding` holds the character vectors).
        """
        return self.base_model.bilm.char_cnn

    def set_input_embeddings(self, value: nn.Module) -> None:
        """Refused: the char CNN is part of the biLM's pretrained weights.

        Raises:
            ValueError: always; explains why and what to do instead.
        """
        raise ValueError(
            "ElmoModel's input layer is the pretrained char CNN (characters -> token vectors), not a word "
            f"embedding, so it cannot be replaced by a {type(value).__name__}. Load other ELMo weights instead "
            "(from_pretrained, or elmo convert for bilm-tf files)."
        )

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, *args: Any, **kwargs: Any
    ) -> nn.Module:
        """Nothing to resize: returns `get_input_embeddings()` (the char CNN), unchanged.

        ELMo reads characters, so a token added to the tokenizer (`tokenizer.add_tokens`)
        already has an input representation; recipes that call
        `model.resize_token_embeddings(len(tokenizer))` after adding tokens work as they
        are. (The config has no `vocab_size`: ELMo has no word vocabulary.)
        """
        return self.get_input_embeddings()

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """As transformers', with the generated, self-contained code files.

        `auto_map` names both models of `modeling_elmo.py`, so that a tagger's folder
        also loads as a base `AutoModel`, and a base model's folder as the start of an
        `AutoModelForTokenClassification`, wherever the folder's code runs. transformers
        copies this module's file (and `configuration_elmo.py`) into the folder; they are
        replaced by their generated copies, which need no elmo-bilm (see
        `hf_elmo.remote_code`).
        """
        if self._auto_class is not None:
            module = type(self).__module__.rsplit(".", 1)[-1]
            self.config.auto_map = {
                **(getattr(self.config, "auto_map", None) or {}),
                "AutoModel": f"{module}.ElmoModel",
                "AutoModelForTokenClassification": f"{module}.ElmoForTokenClassification",
            }
        super().save_pretrained(save_directory, *args, **kwargs)


def _explain_bad_folder(path: Any, err: Exception, variant: str | None = None) -> None:
    """Raise elmo_core's clear error for a local model folder that failed to load, if it finds one."""
    if path is None or not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
        return
    try:
        check_model_folder(path, variant)
    except ValueError as problem:  # WeightFileError / OptionsError
        raise problem from err


def _char_ids(input_ids: torch.Tensor | None, char_ids: torch.Tensor | None) -> torch.Tensor:
    """The char ids to read: `char_ids`, or `input_ids` when they are char ids (3-D)."""
    if char_ids is not None:
        if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and isinstance(char_ids, torch.Tensor):
            if tuple(input_ids.shape) != tuple(char_ids.shape[:2]):
                raise ValueError(
                    f"input_ids {tuple(input_ids.shape)} and char_ids {tuple(char_ids.shape)} disagree on "
                    "[batch, tokens]; pass both from the same ElmoTokenizer call (or char_ids alone)."
                )
        return char_ids
    if input_ids is None:
        raise ValueError(
            "ElmoModel needs input_ids or char_ids: the character ids [batch, tokens, 50] that ElmoTokenizer "
            "returns as char_ids."
        )
    if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2:
        raise ValueError(
            f"input_ids of shape {tuple(input_ids.shape)} are one id per token, but ELMo reads characters: "
            "pass the char_ids [batch, tokens, 50] that ElmoTokenizer returns with them "
            "(model(**tokenizer(texts, return_tensors='pt')) does)."
        )
    return input_ids


def _refuse_attentions(output_attentions: bool | None, config: ElmoConfig) -> None:
    if output_attentions or (output_attentions is None and getattr(config, "output_attentions", False)):
        raise ValueError(
            "output_attentions=True cannot be honoured: ELMo is a biLSTM and has no attention weights. "
            "Leave it unset; output_hidden_states=True gives every biLM layer."
        )


class ElmoModel(ElmoPreTrainedModel):
    """The biLM and its scalar mix(es): contextual word vectors (Peters et al. 2018).

    Stateless by default: a sentence's vectors depend only on its own tokens, not on
    batch mates, padding or earlier calls. The biLM is frozen (no gradient, no autograd
    graph); the scalar mixes are trainable unless the config fixes them. To fine-tune
    the biLM too, call `model.bilm.requires_grad_(True)`.

    Raises:
        ValueError: if `config.num_output_representations` < 1 (there would be no
            `last_hidden_state`).
    """

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        if config.num_output_representations < 1:
            raise ValueError(
                "ElmoModel needs num_output_representations >= 1 (last_hidden_state is the first "
                f"scalar mix); got {config.num_output_representations}. Use "
                "output_hidden_states=True for the raw biLM layers."
            )
        core = Elmo(config.to_options(), **config.elmo_settings())  # the core's construction rules
        self.bilm: BiLM = core.bilm
        self.scalar_mixes: nn.ModuleList = core.scalar_mixes
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        char_ids: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> ElmoModelOutput | tuple[torch.Tensor, ...]:
        """Run the biLM once and every scalar mix over it.

        A row longer than `config.window_tokens` (1024) is read in the core's overlapping
        windows (`elmo_core.windows`), so its vectors are those of `Elmo.embed`,
        `elmo embed` and the spaCy component, and the biLM's working memory is bounded by a
        batch of windows (`DEFAULT_BATCH_TOKENS` positions), not by the row; shorter
        rows are read whole, exactly as without windows. The assembled layers are what the
        scalar mixes read and what `hidden_states` returns, so gradients reach the mixes
        (and a trainable biLM, through every window) as usual; while training, the graphs
        of all windows are kept until the backward pass.

        Args:
            input_ids: `ElmoTokenizer`'s one id per token [batch, tokens] (read only
                for its shape: the biLM reads `char_ids`), or the character ids
                themselves [batch, tokens, 50] when `char_ids` is not given.
            attention_mask: 1 for real tokens, 0 for padding (on the right). Derived
                from the char ids when omitted.
            char_ids: Character ids from `ElmoTokenizer` (or
                `elmo_core.words_to_char_ids`), without `<S>`/`</S>` (the biLM adds
                them). Padded positions are all zeros. Moved to the model's device.
            output_hidden_states: Also return every biLM layer (default:
                `config.output_hidden_states`). They are the tensors the scalar mix
                reads, so with a trainable biLM their gradients exist.
            output_attentions: Must be False or None: ELMo has no attention.
            return_dict: Return an `ElmoModelOutput` rather than a tuple (default:
                `config.return_dict`).

        Returns:
            `ElmoModelOutput`, or the tuple of its non-None fields.

        Shape:
            char_ids: [batch, tokens, 50] int64; input_ids, attention_mask: [batch, tokens]
            last_hidden_state: [batch, tokens, 2 * projection_dim] float
            (tokens + 2 with `keep_sentence_boundaries`)

        Raises:
            ValueError: for missing char ids, ids of the wrong shape or outside
                [0, n_characters), a mask that is not right-padded, or
                `output_attentions=True`.
            TypeError: for char ids that are not an integer tensor.
        """
        input_ids = _char_ids(input_ids, char_ids)
        _refuse_attentions(output_attentions, self.config)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        mask = attention_mask.bool() if isinstance(attention_mask, torch.Tensor) else attention_mask
        frozen = not bilm_is_trainable(self.bilm)  # the core's one rule for "frozen"
        activations, out_mask = self._read(input_ids, mask, frozen)
        # The mixes read these very tensors: with a trainable biLM, their .grad exists (as for BERT).
        hidden_states = activations.unbind(0)  # n_layers + 1 x [batch, tokens, 2P]
        mixes, dropout = self.scalar_mixes, self.config.dropout
        representations = mix_representations(mixes, hidden_states, out_mask, dropout, self.training)
        output = ElmoModelOutput(
            last_hidden_state=representations[0],
            hidden_states=hidden_states if output_hidden_states else None,
            representations=tuple(representations) if len(representations) > 1 else None,
        )
        return output if return_dict else output.to_tuple()

    def _read(
        self, char_ids: torch.Tensor, mask: torch.Tensor | None, frozen: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The biLM's activations and mask, a row longer than `config.window_tokens` read in windows.

        The windows are the core's (`elmo_core.windows.read_in_windows`, the plan of
        `Elmo.embed` and the spaCy component); the scalar mixes then read the assembled
        layers, so a trainable mix (and a trainable biLM, window by window) gets its
        gradients as without windows.
        """
        window_tokens = None if self.config.stateful else self.config.window_tokens
        windowed = read_in_windows(
            lambda ids, piece_mask: run_bilm(self.bilm, ids, piece_mask, frozen).activations,
            char_ids,
            mask,
            batch_tokens=DEFAULT_BATCH_TOKENS,
            window_tokens=window_tokens,
            window_context=self.config.window_context,
            boundaries=self.bilm.keep_sentence_boundaries,
        )
        if windowed is not None:
            return windowed
        out = run_bilm(self.bilm, char_ids, mask, frozen)  # checks ids: shape, dtype, range
        return out.activations, out.mask


class ElmoForTokenClassification(ElmoPreTrainedModel):
    """ELMo vectors and a linear layer per token (e.g. NER), as in `BertForTokenClassification`.

    The biLM is frozen; what trains is the scalar mix (w, gamma), whose output gets
    `config.dropout` while training, and the linear head. `labels` of -100 are ignored
    by the loss (cross-entropy over the real positions), so label only the positions
    you score.
    """

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.elmo = ElmoModel(config)
        self.classifier = nn.Linear(config.output_dim, config.num_labels)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        char_ids: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> TokenClassifierOutput | tuple[torch.Tensor, ...]:
        """Scores per token, and the loss when `labels` are given.

        Args: as `ElmoModel.forward`, plus `labels` (-100 = not scored).

        Shape:
            char_ids: [batch, tokens, 50]; input_ids, attention_mask, labels: [batch, tokens]
            logits: [batch, tokens, num_labels]

        Raises:
            ValueError: as `ElmoModel.forward`, or if `labels` do not have the shape of
                the scored positions.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.elmo(
            input_ids,
            attention_mask=attention_mask,
            char_ids=char_ids,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
        )
        logits = self.classifier(outputs.last_hidden_state)  # [batch, tokens, num_labels]
        loss = None
        if labels is not None:
            if tuple(labels.shape) != tuple(logits.shape[:2]):
                raise ValueError(
                    f"labels must be [batch, tokens] = {tuple(logits.shape[:2])}; got {tuple(labels.shape)}. "
                    "Pad labels with -100 (DataCollatorForTokenClassification does)."
                )
            loss = self.loss_function(logits, labels, self.config, **kwargs)
        output = TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)
        return output if return_dict else output.to_tuple()
