"""Words to character ids, exactly as bilm-tf and AllenNLP compute them (docs/bilm_tf.md §1).

Each token becomes `max_characters_per_token` (50) ids:

    [begin-of-word, byte_1, ..., byte_n, end-of-word, padding-char, ...]

where the bytes are the token's UTF-8 encoding cut to the first 48 bytes (a multi-byte
character can be cut in the middle; both originals do this). Every id is then shifted by
+1 so that id 0 can mean "no token here": a padded position in a batch is 50 zeros.

After the +1 shift: bytes are 1..256, begin-of-sentence char 257, end-of-sentence char 258,
begin-of-word 259, end-of-word 260, padding char 261.

An empty string is a real token with no characters, `[259, 260, 261, ...]` after the shift:
it takes one position and gets one output row like any other token, and is never confused
with a padded position (all zeros), so outputs stay aligned with inputs.

The sentence-boundary tokens are not built from their text: `<S>` is
`[259, 257, 260, 261, ...]` and `</S>` is `[259, 258, 260, 261, ...]`. As in both
originals, a user token spelled exactly `<S>` or `</S>` gets those ids too.
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
    # Built in numpy, then handed to torch: no torch operation runs here, so no OpenMP
    # team either (a process forked after parallel work can call this; see
    # elmo_core.runtime.threads).
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
