"""ElmoTokenizer: text or token lists to ELMo's character ids. No vocabulary file.

ELMo reads characters, not a word vocabulary: each token becomes 50 ids (the UTF-8
bytes + 1 between begin/end-of-word markers; see `elmo_core.model.characters`), so there is
nothing to save but the character settings, which go into `tokenizer_config.json`.

    "The river bank."  --spaCy English rules-->  ["The", "river", "bank", "."]
                       --characters-->           char_ids  [1, 4, 50]   (what the biLM reads)
                       --one id per token-->     input_ids [1, 4]       (pad 0, added 2.., words: word_id)
                                                 attention_mask [1, 4], offset_mapping [1, 4, 2]

`input_ids` hold one id per token, as transformers' generic code (pipelines, collators,
Trainer) expects: the pad token (0) for padding, their own ids (2, 3, ...) for tokens
added with `add_tokens`, which are never split, and for every other word `word_id(word)`,
a fixed id computed from its string (the same in every process). ELMo has no word
vocabulary: the model reads `char_ids`, and `ElmoModel` also accepts the char ids
themselves as `input_ids`. `decode` gives the words back from `input_ids` for the last
`RECENT_TOKENS` distinct words the tokenizer encoded, and from `char_ids` always.

Raw text is split with the rules the pretraining data was tokenised with
(`elmo_core.files.tokenizers.get_tokenizer("spacy-en")`: spaCy's English tokenizer, loaded
on first use; a saved folder uses spaCy directly where elmo-bilm is not installed);
pass `is_split_into_words=True` to give token lists yourself. The biLM adds
`<S>`/`</S>` itself, so no special tokens are added. Padding is always on the right,
with all-zero rows.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from transformers import BatchEncoding, PreTrainedTokenizer
from transformers.tokenization_utils_base import PaddingStrategy, TruncationStrategy
from transformers.utils import to_py_obj

from elmo_core import BiLMOptions, ElmoError
from elmo_core.face_api import (
    BEGINNING_OF_SENTENCE_CHARACTER,
    BEGINNING_OF_WORD_CHARACTER,
    CHAR_ID_OFFSET,
    DEFAULT_TOKENIZER,
    END_OF_SENTENCE_CHARACTER,
    END_OF_WORD_CHARACTER,
    MAX_CHARACTERS_PER_TOKEN,
    PADDING_CHARACTER,
    check_sentences,
    first_use_lock,
    get_tokenizer,
    spacy_word_splitter,
    token_offsets,
    tokenizer_settings,
    word_to_char_ids,
)
from hf_elmo.remote_code import (  # absolute: a saved folder reads these from its elmo_reference.py
    note_which_code_runs,
    save_atomically,
)

__all__ = ["ElmoBatchEncoding", "ElmoTokenizer"]

# The character-id constants the core's `word_to_char_ids` uses; a saved tokenizer must agree.
_CORE_CHARACTERS = {
    "char_id_offset": CHAR_ID_OFFSET,
    "beginning_of_sentence_character": BEGINNING_OF_SENTENCE_CHARACTER,
    "end_of_sentence_character": END_OF_SENTENCE_CHARACTER,
    "beginning_of_word_character": BEGINNING_OF_WORD_CHARACTER,
    "end_of_word_character": END_OF_WORD_CHARACTER,
    "padding_character": PADDING_CHARACTER,
}


class ElmoBatchEncoding(BatchEncoding):
    """A `BatchEncoding` that knows which word each position holds.

    transformers' own `word_ids()` needs the Rust encodings of a fast tokenizer. Here
    every position is one word, so the alignment is kept as plain lists: `word_ids(i)`
    gives `[0, 1, ..., n - 1, None, ...]` (None for padding) and `tokens(i)` the token
    strings (the pad token for padding), as for a fast tokenizer. The other alignment
    helpers (`token_to_chars`, ...) are not available.
    """

    def __init__(
        self,
        data: dict[str, Any] | None = None,
        tensor_type: str | None = None,
        prepend_batch_axis: bool = False,
        *,
        word_ids: list[list[int | None]] | None = None,
        tokens: list[list[str]] | None = None,
    ) -> None:
        super().__init__(data, tensor_type=tensor_type, prepend_batch_axis=prepend_batch_axis)
        self._word_ids = word_ids
        self._tokens = tokens

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """The word index of every position of sequence `batch_index`, None for padding."""
        if self._word_ids is None:
            return super().word_ids(batch_index)
        return list(self._word_ids[batch_index])

    def tokens(self, batch_index: int = 0) -> list[str]:
        """The token string at every position of sequence `batch_index`."""
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
WORD_ID_BASE = 2**32
"""Word ids lie in [2**32, 2**53): above every added token's id, and exact in float64 and JSON."""
RECENT_TOKENS = 65_536
"""How many distinct words a tokenizer remembers by id, for `decode` (about 10 MB at most)."""
_BEGINNING_OF_WORD_ID = BEGINNING_OF_WORD_CHARACTER + CHAR_ID_OFFSET  # a char-id row's first id


def word_id(token: str) -> int:
    """The `input_ids` id of a word: a hash of its UTF-8 bytes, in [2**32, 2**53).

    Fixed by the string alone, so every process and every saved tokenizer gives a word
    the same id. Among a million distinct words, two share an id with odds of about
    1 in 18,000; a shared id changes only what `decode` shows, never the vectors.
    """
    digest = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return WORD_ID_BASE + int.from_bytes(digest, "little") % (2**53 - WORD_ID_BASE)


class _RecentTokens:
    """The last `size` distinct words encoded, by id: what `decode` reads for `input_ids`.

    Bounded, so that a long-running service keeps no string per new word beyond these.
    Not pickled: a copy starts empty.
    """

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


class _WholeWords:
    """Stands where a fast tokenizer keeps its Rust backend (`tokenizer._tokenizer`), for
    the one thing transformers' token-classification pipeline reads there: whether the
    tokenizer knows word boundaries (`model.continuing_subword_prefix`). Without it the
    pipeline guesses subwords from spaces and warns that it does; ELMo's tokens are whole
    words, so there is nothing to guess (the pipeline then finds no subwords)."""

    class model:  # noqa: N801  (the attribute name the pipeline reads)
        continuing_subword_prefix = "##"


def _load_text_tokenizer(name: str) -> Callable[[str], list[str]]:
    """The raw-text tokenizer `name` (an `elmo_core.tokenizers` plug-in).

    In a saved folder loaded where elmo-bilm is not installed, no plug-in exists; the
    default rules ("spacy-en": spaCy's English tokenizer, with the core's
    `spacy_word_splitter`) are then built from spaCy directly, when spaCy is
    importable, so raw text gives the same tokens as in a full install.
    """
    try:
        return get_tokenizer(name)
    except ElmoError:
        if name != DEFAULT_TOKENIZER:
            raise
    if name != DEFAULT_TOKENIZER:
        raise ElmoError(
            f"text_tokenizer {name!r} is an elmo-bilm plug-in, which is not installed here: pip install "
            f"elmo-bilm, or use the default {DEFAULT_TOKENIZER!r}."
        )
    try:
        import spacy
    except ImportError:
        raise ElmoError(
            "raw-text tokenisation needs spaCy (the pretraining data's English rules): pip install spacy, "
            "or pass token lists with is_split_into_words=True."
        ) from None
    return spacy_word_splitter(spacy.blank("en"))  # the core's rules: keeps nothing per word


class ElmoTokenizer(PreTrainedTokenizer):
    """Character ids for ELMo, from raw text or from token lists.

    Outputs (see the module docstring): `input_ids` (one id per token), `char_ids`
    (what the biLM reads), `attention_mask`, and on request `offset_mapping` (each
    token's `(start, end)` in the text; for `is_split_into_words`, within its word, as
    transformers' fast tokenizers give), `special_tokens_mask` and `length`. The
    encoding's `word_ids()` and `tokens()` work as a fast tokenizer's: every token is a
    word. `is_fast` is True for that reason: transformers' token-classification pipeline
    asks a "fast" tokenizer for offsets and word alignment, which this one gives exactly.

    Added tokens (`add_tokens`, `add_special_tokens`) are kept whole in raw text and get
    their own ids (`len(tokenizer)`, `get_added_vocab()` and `convert_ids_to_tokens`
    agree); the model reads them by their characters like any word, so nothing in the
    model needs resizing. Every other word's id is a hash of its UTF-8 bytes, the same in
    every process.

    `decode`, `batch_decode` and `convert_ids_to_tokens` give the tokens back from
    `input_ids` (for the last 65,536 distinct words encoded; an older id is refused with
    a pointer to `char_ids`) or from `char_ids` (always).

    Args:
        max_characters_per_token: Id slots per token (the model's
            `char_cnn.max_characters_per_token`; 50 for every published model).
        char_id_offset, beginning_of_sentence_character, end_of_sentence_character,
        beginning_of_word_character, end_of_word_character, padding_character: The
            character-id scheme, saved so that a folder documents itself. They must
            equal elmo_core's (the only scheme the models were trained with).
        text_tokenizer: Name of the raw-text tokenizer (an `elmo_core.tokenizers`
            entry point); "spacy-en" = the pretraining data's rules.
        pad_token: Name of the padding token; its id is 0 (an all-zero row).
        unk_token: Name of id 1, which no word gets (each word has its own hashed id).
        **kwargs: transformers' tokenizer arguments (`model_max_length`, ...).

    Raises:
        ValueError: for a character scheme other than elmo_core's, or left padding.
    """

    vocab_files_names: dict[str, str] = {}
    model_input_names = ["input_ids", "char_ids", "attention_mask"]
    padding_side = "right"
    _tokenizer = _WholeWords()

    def __init__(
        self,
        max_characters_per_token: int = 50,
        char_id_offset: int = CHAR_ID_OFFSET,
        beginning_of_sentence_character: int = BEGINNING_OF_SENTENCE_CHARACTER,
        end_of_sentence_character: int = END_OF_SENTENCE_CHARACTER,
        beginning_of_word_character: int = BEGINNING_OF_WORD_CHARACTER,
        end_of_word_character: int = END_OF_WORD_CHARACTER,
        padding_character: int = PADDING_CHARACTER,
        text_tokenizer: str = DEFAULT_TOKENIZER,
        pad_token: str = "<pad>",
        unk_token: str = "<unk>",
        **kwargs: Any,
    ) -> None:
        given = {
            "char_id_offset": char_id_offset,
            "beginning_of_sentence_character": beginning_of_sentence_character,
            "end_of_sentence_character": end_of_sentence_character,
            "beginning_of_word_character": beginning_of_word_character,
            "end_of_word_character": end_of_word_character,
            "padding_character": padding_character,
        }
        if given != _CORE_CHARACTERS:
            differ = {k: v for k, v in given.items() if v != _CORE_CHARACTERS[k]}
            raise ValueError(
                f"ElmoTokenizer uses bilm-tf's character ids {_CORE_CHARACTERS}; got {differ}. "
                "A tokenizer_config.json with other values was not written for an ELMo model."
            )
        limit = MAX_CHARACTERS_PER_TOKEN  # the model's own limit: a larger value would allocate it per token
        if not isinstance(max_characters_per_token, int) or not 3 <= max_characters_per_token <= limit:
            raise ValueError(
                f"max_characters_per_token must be an integer from 3 to {limit}; got {max_characters_per_token!r}."
            )
        if kwargs.get("padding_side", "right") != "right":
            raise ValueError("ElmoTokenizer pads on the right only: the biLM reads each row from position 0.")
        self.max_characters_per_token = max_characters_per_token
        for key, value in given.items():
            setattr(self, key, value)
        self.text_tokenizer = text_tokenizer
        self._base_vocab = {str(pad_token): PAD_ID, str(unk_token): UNK_ID}
        self._split_text: Callable[[str], list[str]] | None = None  # loaded on first raw-text call
        self._recent = _RecentTokens()
        super().__init__(
            pad_token=pad_token,
            unk_token=unk_token,
            max_characters_per_token=max_characters_per_token,
            text_tokenizer=text_tokenizer,
            **given,
            **kwargs,
        )

    @classmethod
    def from_options(cls, options: BiLMOptions, **kwargs: Any) -> ElmoTokenizer:
        """The tokenizer for a model with these biLM options."""
        return cls(**tokenizer_settings(options), **kwargs)

    @property
    def is_fast(self) -> bool:
        """True: offsets and word ids are available, as from transformers' fast tokenizers."""
        return True

    # ------------------------------------------------------------------ vocabulary
    @property
    def vocab_size(self) -> int:
        """2: there is no word vocabulary, only the pad (0) and unknown (1) tokens."""
        return len(self._base_vocab)

    def get_vocab(self) -> dict[str, int]:
        """The pad and unknown tokens, and the added tokens."""
        return {**self._base_vocab, **self._added_tokens_encoder}

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        return ()  # nothing to save: the settings are in tokenizer_config.json

    # ------------------------------------------------------------------ text -> tokens -> ids
    def tokenize(self, text: str, **kwargs: Any) -> list[str]:  # type: ignore[override]  # as transformers' PythonBackend
        """Split raw text into tokens with the pretraining data's rules (spaCy English).

        Added tokens are never split.

        Raises:
            ElmoError: if the tokenizer (spaCy) is not installed; says how to install it.
        """
        return self._split_with_offsets(text)[0]

    def _split_with_offsets(self, text: str) -> tuple[list[str], list[tuple[int, int]]]:
        """Tokens of raw text and their `(start, end)` character spans in it."""
        if self._split_text is None:
            with first_use_lock(self):  # concurrent first calls load it once
                if self._split_text is None:
                    self._split_text = _load_text_tokenizer(self.text_tokenizer)
        tokens: list[str] = []
        offsets: list[tuple[int, int]] = []
        position = 0
        pieces = self.tokens_trie.split(text) if self._added_tokens_encoder else [text]
        for piece in pieces:  # the pieces are the text, cut around added tokens
            if piece in self._added_tokens_encoder:
                tokens.append(piece)
                offsets.append((position, position + len(piece)))
            else:
                words = list(self._split_text(piece))
                tokens.extend(words)
                offsets.extend((position + a, position + b) for a, b in token_offsets(piece, words))
            position += len(piece)
        return tokens, offsets

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return self.tokenize(text)

    def _convert_token_to_id(self, token: str) -> int:
        # Added tokens are looked up before this is called.
        if token in self._base_vocab:
            return self._base_vocab[token]
        token_id = word_id(token)
        self._recent.add(token_id, token)
        return token_id

    def _convert_id_to_token(self, index: int) -> str:
        for token, token_id in self._base_vocab.items():
            if token_id == index:
                return token
        word = self._recent.get(index)
        if word is None:
            raise ValueError(
                f"input_ids id {index} is not among the last {self._recent.size} distinct words this tokenizer "
                "encoded (ELMo's ids hold no characters); decode the char_ids of the same encoding instead: "
                "tokenizer.decode(batch['char_ids'][0])."
            )
        return word

    def _encode_plus(  # type: ignore[override]  # one more keyword, return_offsets_mapping, amid the base's
        self,
        text: str | Sequence[str] | Sequence[Sequence[str]],
        text_pair: Any = None,
        add_special_tokens: bool = True,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        **kwargs: Any,
    ) -> ElmoBatchEncoding:
        """Encode one text/token list or a batch of them (called by `__call__`).

        `add_special_tokens` has no effect: the biLM adds `<S>`/`</S>` itself.

        Returns:
            `ElmoBatchEncoding` with `input_ids` ([batch, tokens]), `char_ids`
            ([batch, tokens, chars]) and `attention_mask` ([batch, tokens]), plus
            `offset_mapping` ([batch, tokens, 2]), `special_tokens_mask` and `length`
            when asked; nested lists, or tensors with `return_tensors`; without a batch
            axis for a single unbatched input and no `return_tensors`.

        Raises:
            ValueError: for sentence pairs, overflowing tokens, left padding, or
                sentences of different lengths with `return_tensors` and no padding.
            TypeError: for input that is neither text nor token lists.
        """
        self._check_encode_arguments(text_pair, return_overflowing_tokens, padding_side)
        batched, sentences, spans = self._sentences(text, is_split_into_words)
        if truncation_strategy != TruncationStrategy.DO_NOT_TRUNCATE and max_length is not None:
            sentences, spans = self._truncate(sentences, spans, max_length)
        lengths = [len(s) for s in sentences]
        target = _padded_length(lengths, padding_strategy, max_length, pad_to_multiple_of)
        columns, word_ids, tokens = self._padded_columns(sentences, spans, target)
        asked = {
            "attention_mask": return_attention_mask is not False,
            "special_tokens_mask": return_special_tokens_mask,
            "offset_mapping": return_offsets_mapping,
        }
        data: dict[str, Any] = {"input_ids": columns["input_ids"], "char_ids": columns["char_ids"]}
        data.update((key, columns[key]) for key, wanted in asked.items() if wanted)
        if return_length:
            data["length"] = lengths
        if return_tensors is not None:
            data = self._as_tensors(data, return_tensors, self.max_characters_per_token)
        elif not batched:
            data = {key: value[0] for key, value in data.items()}
        return ElmoBatchEncoding(data, word_ids=word_ids, tokens=tokens)

    def _check_encode_arguments(
        self, text_pair: Any, return_overflowing_tokens: bool, padding_side: str | None
    ) -> None:
        """Raise ValueError for what ElmoTokenizer does not do: pairs, overflowing tokens, left padding."""
        if text_pair is not None:
            raise ValueError("ElmoTokenizer encodes single sentences; sentence pairs are not supported.")
        if return_overflowing_tokens:
            raise ValueError(
                "ElmoTokenizer cannot return overflowing tokens: the biLM reads a sentence of any length "
                "whole, so there is no need to cut it into windows."
            )
        if (padding_side or self.padding_side) != "right":
            raise ValueError("ElmoTokenizer pads on the right only: the biLM reads each row from position 0.")

    def _truncate(
        self, sentences: list[list[str]], spans: list[list[tuple[int, int]]], max_length: int
    ) -> tuple[list[list[str]], list[list[tuple[int, int]]]]:
        """Each sentence (and its spans) cut to `max_length` tokens, from `truncation_side`."""
        keep = [
            slice(max(0, len(s) - max_length), None) if self.truncation_side == "left" else slice(0, max_length)
            for s in sentences
        ]
        return [s[k] for s, k in zip(sentences, keep)], [o[k] for o, k in zip(spans, keep)]

    def _padded_columns(
        self, sentences: list[list[str]], spans: list[list[tuple[int, int]]], target: int | None
    ) -> tuple[dict[str, list[Any]], list[list[int | None]], list[list[str]]]:
        """Every column `_encode_plus` may return, each row right-padded to `target` tokens (None:
        not padded), and each row's word ids and tokens (for `ElmoBatchEncoding`)."""
        C = self.max_characters_per_token
        special_ids = set(self.all_special_ids) - {UNK_ID}  # every word is "unknown", none is special
        columns: dict[str, list[Any]] = {
            "input_ids": [],
            "char_ids": [],
            "attention_mask": [],
            "special_tokens_mask": [],
            "offset_mapping": [],
        }
        word_ids, tokens = [], []
        for sentence, offsets in zip(sentences, spans):
            n = len(sentence)
            missing = max(0, (target or n) - n)
            ids = cast(list[int], self.convert_tokens_to_ids(sentence)) if sentence else []  # a list for a list
            columns["input_ids"].append(ids + [PAD_ID] * missing)
            columns["char_ids"].append([list(word_to_char_ids(t, C)) for t in sentence] + [[0] * C] * missing)
            columns["attention_mask"].append([1] * n + [0] * missing)
            columns["special_tokens_mask"].append([int(i in special_ids) for i in ids] + [1] * missing)
            columns["offset_mapping"].append([tuple(o) for o in offsets] + [(0, 0)] * missing)
            word_ids.append(list(range(n)) + [None] * missing)
            tokens.append(list(sentence) + [str(self.pad_token)] * missing)
        return columns, word_ids, tokens

    def _sentences(
        self, text: Any, is_split_into_words: bool
    ) -> tuple[bool, list[list[str]], list[list[tuple[int, int]]]]:
        """(batched?, token lists, their character spans) for any input `__call__` accepts."""
        if isinstance(text, str):
            if is_split_into_words:
                raise TypeError("is_split_into_words=True needs a list of token strings, not one string.")
            tokens, offsets = self._split_with_offsets(text)
            return False, [tokens], [offsets]
        if isinstance(text, (list, tuple)) and all(isinstance(t, str) for t in text) and text:
            if is_split_into_words:
                return False, [list(text)], [_word_spans(text)]
            split = [self._split_with_offsets(t) for t in text]
            return True, [tokens for tokens, _ in split], [offsets for _, offsets in split]
        if isinstance(text, (list, tuple)):
            if not text:
                return True, [], []
            if not is_split_into_words:
                raise TypeError(
                    "got a list of token lists; pass is_split_into_words=True to encode pre-split tokens, "
                    "or give raw strings."
                )
            check_sentences(text)
            return True, [list(s) for s in text], [_word_spans(s) for s in text]
        raise TypeError(
            f"ElmoTokenizer takes a string, a list of strings, or token lists with is_split_into_words=True; "
            f"got {type(text).__name__}."
        )

    @staticmethod
    def _as_tensors(data: dict[str, Any], return_tensors: str, num_chars: int) -> dict[str, Any]:
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

    # ------------------------------------------------------------------ padding (collators)
    def _pad(  # type: ignore[override]  # returns what it is given, as the base's does (its stub says a dict)
        self,
        encoded_inputs: dict[str, Any] | BatchEncoding,
        max_length: int | None = None,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
    ) -> dict[str, Any] | BatchEncoding:
        """Pad one encoded sentence on the right (used by `pad` and the collators).

        Char ids get all-zero rows, `input_ids` the pad id (0), offsets `(0, 0)`. An
        `input_ids` that holds char ids (rows of ids) is padded with all-zero rows.
        """
        if (padding_side or self.padding_side) != "right":
            raise ValueError("ElmoTokenizer pads on the right only: the biLM reads each row from position 0.")
        n = len(encoded_inputs["input_ids"])
        if padding_strategy == PaddingStrategy.LONGEST or max_length is None:
            max_length = n
        if pad_to_multiple_of and max_length % pad_to_multiple_of:
            max_length += pad_to_multiple_of - max_length % pad_to_multiple_of
        if return_attention_mask is not False and "attention_mask" not in encoded_inputs:
            encoded_inputs["attention_mask"] = [1] * n
        missing = max_length - n if padding_strategy != PaddingStrategy.DO_NOT_PAD else 0
        if missing <= 0:
            return encoded_inputs
        pad_row = [0] * self.max_characters_per_token
        rows = encoded_inputs["input_ids"]
        char_rows = len(rows) > 0 and isinstance(to_py_obj(rows[0]), list)
        fills = {
            "input_ids": pad_row if char_rows else PAD_ID,
            "char_ids": pad_row,
            "attention_mask": 0,
            "special_tokens_mask": 1,
            "offset_mapping": (0, 0),
        }
        for key, fill in fills.items():
            if key in encoded_inputs:
                encoded_inputs[key] = list(encoded_inputs[key]) + [fill] * missing
        return encoded_inputs

    # ------------------------------------------------------------------ ids -> text
    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str | list[str]:
        """Text back from `input_ids` or from `char_ids`, as transformers' `decode`.

        `input_ids`: one row -> its tokens joined by spaces, a batch -> one string per row
        (`skip_special_tokens` drops the padding). `char_ids` (recognised by their rows of
        `max_characters_per_token` ids that begin with the begin-of-word id): one word's
        row -> the word, [tokens, chars] -> the words joined by spaces (padding rows
        skipped), [batch, tokens, chars] -> one string per row. Bytes are decoded as
        UTF-8 with replacement characters, so a word cut at 48 bytes decodes.

        Raises:
            ValueError: for an `input_ids` id the tokenizer no longer remembers (it keeps
                the last 65,536 words it encoded); the message points to `char_ids`.
        """
        ids = to_py_obj(token_ids)
        depth = self._char_id_depth(ids)
        if depth == 1:
            return self._decode_word(ids)
        if depth == 2:
            return self._decode_sentence(ids)
        if depth == 3:
            return [self._decode_sentence(sentence) for sentence in ids]
        return super().decode(ids, skip_special_tokens=skip_special_tokens, **kwargs)

    def _char_id_depth(self, ids: Any) -> int:
        """1, 2 or 3 for a word's, a sentence's or a batch's char ids; 0 for anything else."""
        width = self.max_characters_per_token

        def is_row(row: Any, padding: bool) -> bool:
            if not isinstance(row, list) or len(row) != width or not all(isinstance(i, int) for i in row):
                return False
            return row[0] == _BEGINNING_OF_WORD_ID or (padding and not any(row))

        def word_rows(rows: Any) -> bool:  # char-id rows, padding allowed, one word at least
            rows = list(rows)
            return all(is_row(r, padding=True) for r in rows) and any(is_row(r, padding=False) for r in rows)

        if not isinstance(ids, list) or not ids:
            return 0
        if all(isinstance(i, int) for i in ids):
            return int(is_row(ids, padding=False))
        if all(isinstance(row, list) and all(isinstance(i, int) for i in row) for row in ids):
            return 2 if word_rows(ids) else 0
        if all(isinstance(s, list) and all(isinstance(row, list) for row in s) for s in ids):
            return 3 if word_rows(row for s in ids for row in s) else 0
        return 0

    def _decode_sentence(self, rows: Sequence[Sequence[int]]) -> str:
        return " ".join(self._decode_word(row) for row in rows if any(row))  # padding rows skipped

    def _decode_word(self, row: Sequence[int]) -> str:
        raw = [i - CHAR_ID_OFFSET for i in row if i]
        if raw[:1] == [BEGINNING_OF_WORD_CHARACTER] and raw[1:2] == [BEGINNING_OF_SENTENCE_CHARACTER]:
            return "<S>"
        if raw[:1] == [BEGINNING_OF_WORD_CHARACTER] and raw[1:2] == [END_OF_SENTENCE_CHARACTER]:
            return "</S>"
        data = bytes(i for i in raw if 0 <= i < 256)
        return data.decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ saving, pickling
    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> tuple[str, ...]:
        """As transformers', with the generated, self-contained `tokenization_elmo.py`.

        transformers copies this module's file into the folder; it is replaced by its
        generated copy, which needs no elmo-bilm (see `hf_elmo.remote_code`).
        Each file is written whole under a temporary name and renamed into place: a link
        there is replaced, never written through (`save_atomically`).
        """
        code = ("tokenization_elmo.py", "elmo_reference.py") if self._auto_class is not None else ()
        return cast(
            tuple[str, ...],
            save_atomically(super().save_pretrained, save_directory, *code)(save_directory, *args, **kwargs),
        )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        """As transformers'; a folder saved by other code is named once (`note_which_code_runs`)."""
        tokenizer = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        note_which_code_runs(pretrained_model_name_or_path)
        return tokenizer

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_split_text"] = None  # a spaCy closure; rebuilt on first use
        return state


def _padded_length(
    lengths: Sequence[int], padding_strategy: PaddingStrategy, max_length: int | None, pad_to_multiple_of: int | None
) -> int | None:
    """The row length padding aims at (None: no padding), rounded up to `pad_to_multiple_of`.

    LONGEST pads to the longest sentence; MAX_LENGTH to `max_length` (the longest without one).
    """
    if padding_strategy == PaddingStrategy.LONGEST:
        target = max(lengths, default=0)
    elif padding_strategy == PaddingStrategy.MAX_LENGTH:
        target = max_length if max_length is not None else max(lengths, default=0)
    else:
        return None
    if pad_to_multiple_of and target % pad_to_multiple_of:
        target += pad_to_multiple_of - target % pad_to_multiple_of
    return target


def _word_spans(words: Sequence[str]) -> list[tuple[int, int]]:
    """Offsets of pre-split words: each within itself, as transformers' fast tokenizers give."""
    return [(0, len(word)) for word in words]
