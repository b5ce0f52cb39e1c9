"""Raw-text tokenizers, found through the `elmo_core.tokenizers` entry points.

The core depends on no tokenizer library. `spacy_elmo` registers `spacy-en` (spaCy's
English tokenizer rules: `text -> list of tokens`), the rules the pretraining data was
tokenised with, so that users' text is split the same way. The rule for turning spaCy's
tokens into ELMo's (`spacy_token_texts`) lives here, so that every face that calls spaCy
(spacy_elmo, and a saved Hugging Face folder where elmo-bilm is not installed) applies
the same one; the spaCy object is passed in, never imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .plugins import load_plugin, plugin_names

__all__ = [
    "TOKENIZER_ENTRY_POINTS",
    "DEFAULT_TOKENIZER",
    "get_tokenizer",
    "available_tokenizers",
    "spacy_token_texts",
    "token_offsets",
]

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


def spacy_token_texts(tokens: Iterable[Any]) -> list[str]:
    """ELMo's tokens from spaCy tokens: their texts, whitespace tokens dropped.

    spaCy keeps runs of extra spaces (and newlines) as tokens; the biLM has no use for
    them. `tokens` is a spaCy `Doc` or any iterable of objects with `.text` and
    `.is_space` (duck-typed: the core never imports spaCy).
    """
    return [token.text for token in tokens if not token.is_space]


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
