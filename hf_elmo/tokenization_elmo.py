"""ElmoTokenizer: text or token lists to ELMo's character ids. No vocabulary file.

    "The river bank."  --spaCy English rules-->  ["The", "river", "bank", "."]
                       --characters-->           char_ids  [1, 4, 50]   (what the biLM reads)
                       --one id per token-->     input_ids [1, 4]       (for transformers' generic code)

Raw text is split with the pretraining data's rules. The biLM adds `<S>`/`</S>` itself, so no
special tokens are added. Padding is on the right, with all-zero rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, cast

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
from hf_elmo.remote_code import (  # absolute: a saved folder reads these from its reference files
    note_which_code_runs,
    save_atomically,
)

from .encoding_elmo import (
    PAD_ID,
    UNK_ID,
    ElmoBatchEncoding,
    RecentTokens,
    as_tensors,
    decode_char_ids,
    padded_length,
    truncated,
    word_id,
    word_spans,
)

__all__ = ["ElmoTokenizer"]

# The character-id constants the core's `word_to_char_ids` uses; a saved tokenizer must agree.
_CORE_CHARACTERS = {
    "char_id_offset": CHAR_ID_OFFSET,
    "beginning_of_sentence_character": BEGINNING_OF_SENTENCE_CHARACTER,
    "end_of_sentence_character": END_OF_SENTENCE_CHARACTER,
    "beginning_of_word_character": BEGINNING_OF_WORD_CHARACTER,
    "end_of_word_character": END_OF_WORD_CHARACTER,
    "padding_character": PADDING_CHARACTER,
}


class _WholeWords:
    """Stands where a fast tokenizer keeps its Rust backend, for transformers' token-classification
    pipeline: the tokens are whole words, so it need not guess subwords from spaces."""

    class model:  # noqa: N801  (the attribute name the pipeline reads)
        continuing_subword_prefix = "##"


def _load_text_tokenizer(name: str) -> Callable[[str], list[str]]:
    """The raw-text tokenizer `name`. Without elmo-bilm, the default one is built from spaCy."""
    try:
        return get_tokenizer(name)
    except ElmoError:
        if name != DEFAULT_TOKENIZER:
            raise
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

    Returns `input_ids` (one id per token: a stable hash of the word, or an added token's own id),
    `char_ids` (what the biLM reads) and `attention_mask`. On request: `offset_mapping`,
    `special_tokens_mask` and `length`. `is_fast` is True because it gives offsets and word
    ids exactly, which transformers' token-classification pipeline asks a fast tokenizer for.
    Added tokens are never split. `decode` reads `char_ids` always, and `input_ids` of the
    last 65,536 distinct words encoded.

    Args:
        max_characters_per_token: Id slots per token (50 for every published model).
        char_id_offset, beginning_of_sentence_character, end_of_sentence_character,
        beginning_of_word_character, end_of_word_character, padding_character: The
            character-id scheme, saved so a folder documents itself. Must be elmo_core's.
        text_tokenizer: The raw-text tokenizer. "spacy-en" is the pretraining data's rules.
        pad_token: Name of the padding token, id 0 (an all-zero row).
        unk_token: Name of id 1, which no word gets.
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
        scheme: tuple[int, ...] = (char_id_offset, beginning_of_sentence_character, end_of_sentence_character)
        scheme += (beginning_of_word_character, end_of_word_character, padding_character)
        given = dict(zip(_CORE_CHARACTERS, scheme))  # in the order of the arguments
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
        settings = {"max_characters_per_token": max_characters_per_token, "text_tokenizer": text_tokenizer, **given}
        for key, value in settings.items():  # saved in tokenizer_config.json
            setattr(self, key, value)
        self._base_vocab = {str(pad_token): PAD_ID, str(unk_token): UNK_ID}
        self._split_text: Callable[[str], list[str]] | None = None  # loaded on first raw-text call
        self._recent = RecentTokens()
        super().__init__(pad_token=pad_token, unk_token=unk_token, **settings, **kwargs)

    @classmethod
    def from_options(cls, options: BiLMOptions, **kwargs: Any) -> ElmoTokenizer:
        """The tokenizer for a model with these biLM options."""
        return cls(**tokenizer_settings(options), **kwargs)

    @property
    def is_fast(self) -> bool:
        """True: offsets and word ids are available, as from a fast tokenizer."""
        return True

    @property
    def vocab_size(self) -> int:
        """2: no word vocabulary, only the pad (0) and unknown (1) tokens."""
        return len(self._base_vocab)

    def get_vocab(self) -> dict[str, int]:
        """The pad and unknown tokens, and the added tokens."""
        return {**self._base_vocab, **self._added_tokens_encoder}

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        return ()  # nothing to save: the settings are in tokenizer_config.json

    def tokenize(self, text: str, **kwargs: Any) -> list[str]:  # type: ignore[override]  # as transformers' PythonBackend
        """Split raw text into tokens with the pretraining data's rules (spaCy English).

        Raises:
            ElmoError: if spaCy is not installed.
        """
        return self._split_with_offsets(text)[0]

    def _split_with_offsets(self, text: str) -> tuple[list[str], list[tuple[int, int]]]:
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
        word = {i: token for token, i in self._base_vocab.items()}.get(index) or self._recent.get(index)
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
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        **kwargs: Any,  # add_special_tokens, stride, ...: nothing to do
    ) -> ElmoBatchEncoding:
        """Encode one text or token list, or a batch of them (called by `__call__`).

        Returns:
            `ElmoBatchEncoding`: nested lists, or tensors with `return_tensors`. A single input
            without `return_tensors` has no batch axis.

        Shape:
            input_ids, attention_mask: [batch, tokens]
            char_ids: [batch, tokens, chars]

        Raises:
            ValueError: for sentence pairs, overflowing tokens, left padding, or tensors of
                sentences of different lengths without padding.
            TypeError: for input that is neither text nor token lists.
        """
        if text_pair is not None:
            raise ValueError("ElmoTokenizer encodes single sentences; sentence pairs are not supported.")
        if return_overflowing_tokens:
            raise ValueError(
                "ElmoTokenizer cannot return overflowing tokens: the biLM reads a sentence of any length "
                "whole, so there is no need to cut it into windows."
            )
        if (padding_side or self.padding_side) != "right":
            raise ValueError("ElmoTokenizer pads on the right only: the biLM reads each row from position 0.")
        batched, sentences, spans = self._sentences(text, is_split_into_words)
        if truncation_strategy != TruncationStrategy.DO_NOT_TRUNCATE and max_length is not None:
            sentences, spans = truncated(sentences, spans, max_length, self.truncation_side)
        lengths = [len(s) for s in sentences]
        target = padded_length(lengths, padding_strategy, max_length, pad_to_multiple_of)
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
            data = as_tensors(data, return_tensors, self.max_characters_per_token)
        elif not batched:
            data = {key: value[0] for key, value in data.items()}
        return ElmoBatchEncoding(data, word_ids=word_ids, tokens=tokens)

    def _padded_columns(
        self, sentences: list[list[str]], spans: list[list[tuple[int, int]]], target: int | None
    ) -> tuple[dict[str, list[Any]], list[list[int | None]], list[list[str]]]:
        # Each column `_encode_plus` may return, right-padded to `target` (None: not padded).
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
        # (batched?, token lists, their character spans)
        if isinstance(text, str):
            if is_split_into_words:
                raise TypeError("is_split_into_words=True needs a list of token strings, not one string.")
            tokens, offsets = self._split_with_offsets(text)
            return False, [tokens], [offsets]
        if isinstance(text, (list, tuple)) and all(isinstance(t, str) for t in text) and text:
            if is_split_into_words:
                return False, [list(text)], [word_spans(text)]
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
            return True, [list(s) for s in text], [word_spans(s) for s in text]
        raise TypeError(
            f"ElmoTokenizer takes a string, a list of strings, or token lists with is_split_into_words=True; "
            f"got {type(text).__name__}."
        )

    def _pad(  # type: ignore[override]  # returns what it is given, as the base's does (its stub says a dict)
        self,
        encoded_inputs: dict[str, Any] | BatchEncoding,
        max_length: int | None = None,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
    ) -> dict[str, Any] | BatchEncoding:
        """Pad one encoded sentence on the right (for `pad` and the collators): char ids with zero rows."""
        if (padding_side or self.padding_side) != "right":
            raise ValueError("ElmoTokenizer pads on the right only: the biLM reads each row from position 0.")
        n = len(encoded_inputs["input_ids"])
        if return_attention_mask is not False and "attention_mask" not in encoded_inputs:
            encoded_inputs["attention_mask"] = [1] * n
        missing = (padded_length([n], padding_strategy, max_length, pad_to_multiple_of) or n) - n
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

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str | list[str]:
        """Text back from `input_ids` or from `char_ids`, as transformers' `decode`.

        A word's char-id row gives the word, a sentence's the words joined by spaces, a batch's
        one string per row. Bytes decode as UTF-8 with replacement characters.

        Raises:
            ValueError: for an `input_ids` id of a word not among the last 65,536 encoded.
        """
        ids = to_py_obj(token_ids)
        words = decode_char_ids(ids, self.max_characters_per_token)
        return words if words is not None else super().decode(ids, skip_special_tokens=skip_special_tokens, **kwargs)

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> tuple[str, ...]:
        """As transformers', with the code files a folder needs without elmo-bilm (`hf_elmo.remote_code`)."""
        code = ("tokenization_elmo.py", "encoding_elmo.py") if self._auto_class is not None else ()
        return cast(
            tuple[str, ...],
            save_atomically(super().save_pretrained, save_directory, *code)(save_directory, *args, **kwargs),
        )

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        """As transformers', and a folder saved by other code is named once (`note_which_code_runs`)."""
        tokenizer = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        note_which_code_runs(pretrained_model_name_or_path)
        return tokenizer

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_split_text"] = None  # a spaCy closure; rebuilt on first use
        return state
