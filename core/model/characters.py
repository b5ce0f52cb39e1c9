"""Words to character ids, exactly as bilm-tf and AllenNLP compute them (docs/bilm_tf.md §1).

A token becomes 50 ids, shifted by +1 so that 0 marks a padded position:

    [begin-of-word, byte_1, ..., byte_n, end-of-word, padding-char, ...]

After the shift: UTF-8 bytes 1..256 (the first 48), <S> 257, </S> 258, begin-of-word
259, end-of-word 260, padding char 261.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch

__all__ = ["words_to_char_ids"]

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
    """Character ids of one token, offset included: `max_characters_per_token` ints in [1, 261].

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
    """`word_to_char_ids` as int16 bytes, not a tuple of Python ints: cached if it fits."""
    if len(word) <= max_characters_per_token:
        return _cached_word_id_bytes(word, max_characters_per_token)
    return np.asarray(word_to_char_ids(word, max_characters_per_token), dtype=np.int16).tobytes()


@lru_cache(maxsize=2**14)  # the most frequent words
def _cached_word_id_bytes(word: str, max_characters_per_token: int) -> bytes:
    return np.asarray(word_to_char_ids(word, max_characters_per_token), dtype=np.int16).tobytes()


def words_to_char_ids(
    sentences: Sequence[Sequence[str]], max_characters_per_token: int = 50
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch of sentences to right-padded character ids and a mask, without `<S>`/`</S>`.

    Args:
        sentences: One list of token strings per sentence, possibly empty.

    Returns:
        `(char_ids, mask)`: char_ids int64 `[batch, tokens, chars]` on the CPU, zeros at
        padding, and mask bool `[batch, tokens]`, True = real token. `tokens` is the
        longest sentence's length.

    Raises:
        TypeError: if `sentences` is not a list of lists of str.
    """
    check_sentences(sentences)
    C = max_characters_per_token
    # Built in numpy: no torch operation, so no OpenMP team (a process forked after
    # parallel work may call this, see elmo_core.runtime.threads).
    lengths = np.array([len(s) for s in sentences], dtype=np.int64)
    num_tokens = int(lengths.max()) if len(sentences) else 0
    mask = np.arange(num_tokens)[None, :] < lengths[:, None]  # [batch, tokens]
    char_ids = np.zeros((len(sentences), num_tokens, C), dtype=np.int64)
    if num_tokens:
        # One bytes object per word (cached), joined and viewed as a [real tokens, C]
        # array: the Python work per token is a dict lookup, not 50 int conversions.
        flat = b"".join(_word_id_bytes(word, C) for sentence in sentences for word in sentence)
        char_ids[mask] = np.frombuffer(flat, dtype=np.int16).reshape(-1, C)  # row-major: sentence by sentence
    return torch.from_numpy(char_ids), torch.from_numpy(mask)
