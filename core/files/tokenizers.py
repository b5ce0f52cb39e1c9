"""Raw-text tokenizers, found through the `elmo_core.tokenizers` entry points.

`spacy_elmo` registers `spacy-en`. Turning spaCy's tokens into ELMo's happens here, the
same for every face, with the spaCy object passed in.
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
    """Build the tokenizer registered under `name` (an entry point's zero-argument factory).

    Raises:
        ElmoError: if no tokenizer of that name is installed.
    """
    factory = load_plugin(
        TOKENIZER_ENTRY_POINTS, name, "Raw-text tokenisation needs spaCy: pip install 'elmo-bilm[spacy]'."
    )
    return factory()


SURROGATES = re.compile("[\ud800-\udfff]")
"""Lone surrogates: UTF-8 cannot encode them, and spaCy's strings are UTF-8."""

SURROGATE_STAND_IN = "\u0436"
"""What spaCy sees in place of a lone surrogate: a letter ("ж") with no English exceptions.
One code point for one, so offsets hold in the original text."""


def spacy_token_texts(tokens: Iterable[Any], text: str) -> list[str]:
    """ELMo's tokens from spaCy tokens (`.text`, `.idx`, `.is_space`): whitespace tokens dropped.

    Each text is read from the original `text` by offsets, surrogates included.
    """
    return [text[token.idx : token.idx + len(token.text)] for token in tokens if not token.is_space]


def spacy_word_splitter(nlp: Any) -> Callable[[str], list[str]]:
    """A function `text -> ELMo's tokens` with the tokenizer of the spaCy pipeline `nlp`.

    Each call runs in a spaCy memory zone: spaCy would keep every new string for good.

    Args:
        nlp: A spaCy `Language` of the splitter's own (`spacy.blank("en")`).
    """
    lock = threading.Lock()

    def split(text: str) -> list[str]:
        with _memory_zone(nlp, lock):  # spaCy sees a letter for each lone surrogate (it cannot hold one)
            return spacy_token_texts(nlp.tokenizer(SURROGATES.sub(SURROGATE_STAND_IN, text)), text)

    return split


def spacy_sentence_splitter(nlp: Any) -> Callable[[str], list[list[str]]]:
    """A function `paragraph -> sentences of ELMo's tokens`, as `spacy_word_splitter`.

    `nlp` must set sentence boundaries (e.g. a `sentencizer`). Empty sentences are skipped.
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
    """One call's spaCy memory zone (spaCy 3.8+), one at a time: zones must not overlap."""
    zone = getattr(nlp, "memory_zone", None)
    with lock, zone() if zone is not None else nullcontext():
        yield


def token_offsets(text: str, tokens: Sequence[str]) -> list[tuple[int, int]]:
    """Character span `(start, end)` of each token in `text`, found left to right.

    Raises:
        ValueError: if a token is not found in order in `text`.
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
