"""Raw text to tokens with spaCy's English tokenizer rules.

Both splitters keep nothing per word they see (`elmo_core.files.spacy_word_splitter`), so a
long-running process that tokenises an open vocabulary stays at a flat size.
"""

from __future__ import annotations

from collections.abc import Callable

from elmo_core.face_api import spacy_sentence_splitter, spacy_word_splitter

__all__ = ["english_sentences", "english_tokenizer"]


def english_tokenizer() -> Callable[[str], list[str]]:
    """A function `text -> list of token strings` using `spacy.blank("en")`'s tokenizer.

    Whitespace tokens (spaCy keeps runs of extra spaces as tokens) are dropped, since
    the biLM has no use for them.
    """
    import spacy

    return spacy_word_splitter(spacy.blank("en"))


def english_sentences() -> Callable[[str], list[list[str]]]:
    """A function `paragraph -> sentences of token strings` for biLM pretraining data.

    Tokens come from `spacy.blank("en")`'s tokenizer (the same rules as
    `english_tokenizer`, so training text is tokenised the way users' text is), and
    sentences from spaCy's rule-based `sentencizer` (splits after `.`, `!`, `?` and
    similar punctuation). Whitespace tokens are dropped and empty sentences skipped.
    Registered as the `spacy-en-sentences` entry point in `elmo_core.tokenizers`.
    """
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return spacy_sentence_splitter(nlp)
