"""Raw-text tokenizers, found through the `elmo_core.tokenizers` entry points.

The core depends on no tokenizer library. `spacy_elmo` registers `spacy-en` (spaCy's
English tokenizer rules: `text -> list of tokens`), the rules the pretraining data was
tokenised with, so that users' text is split the same way. The rule for turning spaCy's
tokens into ELMo's (`spacy_token_texts`) lives here, so that every face that calls spaCy
(spacy_elmo, and a saved Hugging Face folder where elmo-bilm is not installed) applies
the same one; the spaCy object is passed in, never imported. So does the rule that a
splitter keeps nothing per word it sees (`spacy_word_splitter`, `spacy_sentence_splitter`).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from .plugins import load_plugin, plugin_names

TOKENIZER_ENTRY_POINTS = "elmo_core.tokenizers"
DEFAULT_TOKENIZER = "spacy-en"


def available_tokenizers() -> list[str]:
    """Names of the installed tokenizers."""
    return plugin_names(TOKENIZER_ENTRY_POINTS)


def get_tokenizer(name: str = DEFAULT_TOKENIZER) -> Callable[[str], list]:
    """Build the tokenizer registered under `name`.

    Each entry point is a zero-argument factory returning the tokenizer function.

    Raises:
        ElmoError: if no tokenizer of that name is installed (says what is and how to
            install spaCy).
    """
    factory = load_plugin(
        TOKENIZER_ENTRY_POINTS, name, "Raw-text tokenisation needs spaCy: pip install 'elmo-bilm[spacy]'."
    )
    return factory()


SURROGATES = re.compile("[\ud800-\udfff]")
"""Lone surrogates: UTF-8 cannot encode them, and spaCy's strings are UTF-8."""

SURROGATE_STAND_IN = "\u0436"
"""What spaCy's tokenizer sees in place of a lone surrogate: one lowercase letter ("ж") of a
script without English exceptions, so the surrogate splits like a letter of its word. One
code point for one, so every token's offsets hold in the original text."""


def spacy_token_texts(tokens: Iterable[Any], text: str) -> list[str]:
    """ELMo's tokens from spaCy tokens: their texts, whitespace tokens dropped.

    spaCy keeps runs of extra spaces (and newlines) as tokens; the biLM has no use for
    them. `tokens` is a spaCy `Doc` or any iterable of objects with `.text`, `.idx` and
    `.is_space` (duck-typed: the core never imports spaCy), made from `text` with
    `SURROGATE_STAND_IN` in place of its surrogates. Each token's text is read from
    `text` by offsets, surrogates included.
    """
    return [text[token.idx : token.idx + len(token.text)] for token in tokens if not token.is_space]


def spacy_word_splitter(nlp: Any) -> Callable[[str], list[str]]:
    """A function `text -> ELMo's tokens` with the tokenizer of the spaCy pipeline `nlp`.

    A lone surrogate splits like a letter and stays in its token's text (the character ids
    drop it, as for pre-split words), so raw text gives the tokens its pre-split words give.

    It keeps nothing per word. spaCy keeps every string its tokenizer meets in the
    pipeline's vocabulary for good, so a long-running service that keeps seeing new words
    (ids, URLs, typos) would grow without bound. Each call runs in a spaCy memory zone
    (`_memory_zone`), which frees what the call added once the token texts are copied out.

    Args:
        nlp: A spaCy `Language` of the splitter's own (`spacy.blank("en")`), used by
            nothing else: its vocabulary is emptied of each call's strings.
    """
    lock = threading.Lock()

    def split(text: str) -> list[str]:
        with _memory_zone(nlp, lock):  # spaCy sees a letter for each lone surrogate (it cannot hold one)
            return spacy_token_texts(nlp.tokenizer(SURROGATES.sub(SURROGATE_STAND_IN, text)), text)

    return split


def spacy_sentence_splitter(nlp: Any) -> Callable[[str], list[list[str]]]:
    """A function `paragraph -> sentences of ELMo's tokens` with the spaCy pipeline `nlp`.

    `nlp` must set sentence boundaries (e.g. a `sentencizer`). Whitespace tokens are
    dropped and empty sentences skipped. Like `spacy_word_splitter`, it keeps nothing per
    word, and `nlp` must be its own.
    """
    lock = threading.Lock()

    def split(text: str) -> list[list[str]]:
        with _memory_zone(nlp, lock):
            doc = nlp(SURROGATES.sub(SURROGATE_STAND_IN, text))  # as in spacy_word_splitter
            sentences = (spacy_token_texts(sentence, text) for sentence in doc.sents)
            return [tokens for tokens in sentences if tokens]

    return split


@contextmanager
def _memory_zone(nlp: Any, lock: threading.Lock) -> Iterator[None]:
    """One call's spaCy memory zone (spaCy 3.8+: `Language.memory_zone`), one call at a time.

    Strings and lexemes added inside the zone are freed when it ends, so nothing made
    inside may be used after it. Zones must not overlap, hence the lock (the tokenizer
    holds the GIL anyway). Before spaCy 3.8 there are no zones, and the strings stay.
    """
    zone = getattr(nlp, "memory_zone", None)
    with lock, zone() if zone is not None else nullcontext():
        yield


def token_offsets(text: str, tokens: Sequence[str]) -> list[tuple[int, int]]:
    """Character span `(start, end)` of each token in `text`, so `text[start:end] == token`.

    Tokens are looked up left to right, each after the end of the previous one (spaCy's
    tokens are exact substrings of the text, in order).

    Raises:
        ValueError: if a token is not found in order in `text` (a tokenizer that
            changes the text, e.g. one that normalises characters, has no offsets).
    """
    offsets, position = [], 0
    for token in tokens:
        start = text.find(token, position)
        if start < 0:
            raise ValueError(
                f"token {token!r} is not in the text after position {position}, so it has no character "
                "offsets; the raw-text tokenizer changed the text. Use a tokenizer whose tokens are "
                "substrings of the text (spaCy's are), or pass is_split_into_words=True."
            )
        offsets.append((start, start + len(token)))
        position = start + len(token)
    return offsets
