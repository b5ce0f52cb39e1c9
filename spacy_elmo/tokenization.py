"""Raw text to tokens with spaCy's English tokenizer rules."""

from __future__ import annotations

from typing import Callable

__all__ = ["english_tokenizer"]


def english_tokenizer() -> Callable[[str], list[str]]:
    """A function `text -> list of token strings` using `spacy.blank("en")`'s tokenizer.

    Whitespace tokens (spaCy keeps runs of extra spaces as tokens) are dropped, since
    the biLM has no use for them.
    """
    import spacy

    tokenizer = spacy.blank("en").tokenizer

    def tokenize(text: str) -> list[str]:
        return [t.text for t in tokenizer(text) if not t.is_space]

    return tokenize
