# Generated from hf_elmo/encoding_elmo.py by `python -m hf_elmo.remote_code.generate`. Do not edit: edit that file.
"""What ElmoTokenizer's ids mean, both ways, and how rows of tokens become a batch."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from transformers import BatchEncoding
from transformers.tokenization_utils_base import PaddingStrategy

from .elmo_reference import (
    BEGINNING_OF_SENTENCE_CHARACTER, BEGINNING_OF_WORD_CHARACTER, CHAR_ID_OFFSET, END_OF_SENTENCE_CHARACTER,
)

__all__ = ["RECENT_TOKENS", "WORD_ID_BASE", "ElmoBatchEncoding", "word_id"]


class ElmoBatchEncoding(BatchEncoding):
    def __init__(self, *args: Any, word_ids: list[Any] | None = None, tokens: list[Any] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._word_ids = word_ids
        self._tokens = tokens

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        if self._word_ids is None:
            return super().word_ids(batch_index)
        return list(self._word_ids[batch_index])

    def tokens(self, batch_index: int = 0) -> list[str]:
        if self._tokens is None:
            return super().tokens(batch_index)
        return list(self._tokens[batch_index])

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "word_ids": self._word_ids, "tokens": self._tokens}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._word_ids = state.get("word_ids")
        self._tokens = state.get("tokens")


PAD_ID = 0
UNK_ID = 1
WORD_ID_BASE = 2**32  # word ids lie in [2**32, 2**53): above added tokens' ids, exact in float64 and JSON
RECENT_TOKENS = 65_536  # distinct words remembered by id for `decode` (about 10 MB at most)
BEGINNING_OF_WORD_ID = BEGINNING_OF_WORD_CHARACTER + CHAR_ID_OFFSET  # a char-id row's first id


def word_id(token: str) -> int:
    digest = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return WORD_ID_BASE + int.from_bytes(digest, "little") % (2**53 - WORD_ID_BASE)


class RecentTokens:
    def __init__(self, size: int = RECENT_TOKENS) -> None:
        self.size = size
        self._tokens: OrderedDict[int, str] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, token_id: int, token: str) -> None:
        with self._lock:
            self._tokens[token_id] = token
            self._tokens.move_to_end(token_id)
            if len(self._tokens) > self.size:
                self._tokens.popitem(last=False)

    def get(self, token_id: int) -> str | None:
        with self._lock:
            return self._tokens.get(token_id)

    def __getstate__(self) -> dict[str, Any]:
        return {"size": self.size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["size"])  # type: ignore[misc]


def padded_length(
    lengths: Sequence[int], padding_strategy: PaddingStrategy, max_length: int | None, pad_to_multiple_of: int | None
) -> int | None:
    # The row length padding aims at (None: no padding). MAX_LENGTH without max_length is LONGEST.
    if padding_strategy == PaddingStrategy.LONGEST:
        target = max(lengths, default=0)
    elif padding_strategy == PaddingStrategy.MAX_LENGTH:
        target = max_length if max_length is not None else max(lengths, default=0)
    else:
        return None
    if pad_to_multiple_of and target % pad_to_multiple_of:
        target += pad_to_multiple_of - target % pad_to_multiple_of
    return target


def word_spans(words: Sequence[str]) -> list[tuple[int, int]]:
    # Offsets of pre-split words: each within itself, as transformers' fast tokenizers give.
    return [(0, len(word)) for word in words]


def truncated(
    sentences: list[list[str]], spans: list[list[tuple[int, int]]], max_length: int, side: str
) -> tuple[list[list[str]], list[list[tuple[int, int]]]]:
    keep = [slice(max(0, len(s) - max_length), None) if side == "left" else slice(0, max_length) for s in sentences]
    return [s[k] for s, k in zip(sentences, keep)], [o[k] for o, k in zip(spans, keep)]


def as_tensors(data: dict[str, Any], return_tensors: str, num_chars: int) -> dict[str, Any]:
    if return_tensors not in ("pt", "np"):
        raise ValueError(f"return_tensors must be 'pt' or 'np'; got {return_tensors!r}.")
    widths = {len(row) for row in data["input_ids"]}
    if len(widths) > 1:
        raise ValueError(
            f"the sentences have different lengths ({sorted(widths)} tokens), so they do not fit one "
            "tensor; pass padding=True (pads to the longest) or padding='max_length'."
        )
    batch_size, num_tokens = len(data["input_ids"]), widths.pop() if widths else 0
    trailing = {"char_ids": (num_chars,), "offset_mapping": (2,), "length": None}
    out: dict[str, Any] = {}
    for key, value in data.items():
        tensor = torch.tensor(value, dtype=torch.long)
        if (shape := trailing.get(key, ())) is not None:  # also right for 0 tokens
            tensor = tensor.reshape(batch_size, num_tokens, *shape)
        out[key] = tensor.numpy() if return_tensors == "np" else tensor
    return out


def decode_char_ids(ids: Any, width: int) -> str | list[str] | None:
    # A word's row gives the word, a sentence's rows its words, a batch one string per row. None: not char ids.
    def is_row(row: Any, padding: bool) -> bool:
        if not isinstance(row, list) or len(row) != width or not all(isinstance(i, int) for i in row):
            return False
        return row[0] == BEGINNING_OF_WORD_ID or (padding and not any(row))

    def words(rows: list[Any]) -> str | None:  # char-id rows, padding allowed, one word at least
        if all(is_row(r, padding=True) for r in rows) and any(is_row(r, padding=False) for r in rows):
            return " ".join(decode_word(r) for r in rows if any(r))  # padding rows skipped
        return None

    if not isinstance(ids, list) or not ids:
        return None
    if is_row(ids, padding=False):
        return decode_word(ids)
    if all(isinstance(s, list) and all(isinstance(r, list) for r in s) for s in ids):  # a batch
        return [words(s) or "" for s in ids] if words([r for s in ids for r in s]) is not None else None
    return words(ids)


def decode_word(row: Sequence[int]) -> str:
    raw = [i - CHAR_ID_OFFSET for i in row if i]
    if raw[:1] == [BEGINNING_OF_WORD_CHARACTER] and raw[1:2] == [BEGINNING_OF_SENTENCE_CHARACTER]:
        return "<S>"
    if raw[:1] == [BEGINNING_OF_WORD_CHARACTER] and raw[1:2] == [END_OF_SENTENCE_CHARACTER]:
        return "</S>"
    data = bytes(i for i in raw if 0 <= i < 256)
    return data.decode("utf-8", errors="replace")
