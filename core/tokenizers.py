"""Raw-text tokenizers, found through the `elmo_core.tokenizers` entry points.

The core depends on no tokenizer library. `spacy_elmo` registers `spacy-en` (spaCy's
English tokenizer rules: `text -> list of tokens`), the rules the pretraining data was
tokenised with, so that users' text is split the same way.
"""

from __future__ import annotations

from typing import Callable

from .plugins import load_plugin, plugin_names

__all__ = ["TOKENIZER_ENTRY_POINTS", "DEFAULT_TOKENIZER", "get_tokenizer", "available_tokenizers"]

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
    factory = load_plugin(TOKENIZER_ENTRY_POINTS, name, "Raw-text tokenisation needs spaCy: pip install 'elmo-bilm[spacy]'.")
    return factory()
