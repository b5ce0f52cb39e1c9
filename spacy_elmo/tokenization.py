"""Raw text to tokens with spaCy's English rules, keeping nothing per word seen (flat memory)."""

from __future__ import annotations

from collections.abc import Callable

from elmo_core.face_api import spacy_sentence_splitter, spacy_word_splitter

__all__ = ["english_sentences", "english_tokenizer"]


def english_tokenizer() -> Callable[[str], list[str]]:
    """A function `text -> token strings`: `spacy.blank("en")`'s tokenizer, whitespace tokens dropped."""
    import spacy

    return spacy_word_splitter(spacy.blank("en"))


def english_sentences() -> Callable[[str], list[list[str]]]:
    """A function `paragraph -> sentences of token strings`, for biLM pretraining data.

    `english_tokenizer`'s tokens, so that training text is tokenised as users' text is, and
    the `sentencizer`'s sentences.
    """
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return spacy_sentence_splitter(nlp)
