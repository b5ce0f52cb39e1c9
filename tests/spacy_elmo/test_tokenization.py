"""The raw-text splitters (`spacy-en`, `spacy-en-sentences`) keep nothing per word they see."""

from __future__ import annotations

import numpy as np
import spacy

from elmo_core.files.tokenizers import get_tokenizer


def new_words_text(seed: int) -> str:
    """Two sentences of 20 random lowercase words each, nearly all new to any vocabulary."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, 9)) for _ in range(40)]
    return " ".join(words[:20]) + ". " + " ".join(words[20:]) + "."


def test_splitting_raw_text_keeps_no_string_per_new_word(monkeypatch):
    built = []
    blank = spacy.blank
    monkeypatch.setattr(spacy, "blank", lambda *args, **kwargs: built.append(blank(*args, **kwargs)) or built[-1])
    words, sentences = get_tokenizer("spacy-en"), get_tokenizer("spacy-en-sentences")  # `elmo embed`, `elmo train`
    words(new_words_text(0)), sentences(new_words_text(1))  # warm-up
    held = [len(nlp.vocab.strings) for nlp in built]
    for seed in range(2, 52):  # 2,000 new words for each splitter
        text = new_words_text(seed)
        tokens, split = words(text), sentences(text)
        assert tokens == text.replace(".", " .").split() and split == [tokens[:21], tokens[21:]]
    assert len(built) == 2 and [len(nlp.vocab.strings) for nlp in built] == held
