"""Long Docs through `nlp`: windows of `window_tokens` (spacy-elmo.ElmoLayers.v2), bounded passes."""

from __future__ import annotations

import numpy as np
import pytest
import spacy
from thinc.api import Config

from elmo_core import embed_sentences
from elmo_core.runtime.windows import DEFAULT_WINDOW_TOKENS

from .conftest import DIM, make_nlp


def text_of(n: int) -> tuple[str, list[str]]:
    rng = np.random.default_rng(0)
    words = [f"w{int(k)}" for k in rng.integers(0, 500, size=n)]
    return " ".join(words), words


def longest_sequences(nlp, text: str):
    """Run `nlp(text)`; (doc, the longest sequence the biLM read)."""
    seen = []
    handle = nlp.get_pipe("elmo").elmo.bilm.register_forward_hook(
        lambda module, args, out: seen.append(out.activations.shape[2])
    )
    try:
        doc = nlp(text)
    finally:
        handle.remove()
    return doc, max(seen)


def test_long_doc_is_read_in_windows_equal_to_the_core(tiny_model_dir):
    nlp = make_nlp(tiny_model_dir, window_tokens=128, window_context=16)
    text, words = text_of(3_000)
    doc, longest = longest_sequences(nlp, text)
    assert longest <= 128 and doc.tensor.shape == (3_000, DIM) and np.isfinite(doc.tensor).all()
    elmo = nlp.get_pipe("elmo").elmo
    expected = embed_sentences(elmo, [words], layers="all", window_tokens=128, window_context=16)[0]
    np.testing.assert_allclose(doc._.elmo_layers, expected, atol=1e-5, rtol=1e-4)


def test_window_tokens_zero_reads_the_doc_whole(tiny_model_dir):
    nlp = make_nlp(tiny_model_dir, window_tokens=0)
    text, words = text_of(1_500)
    doc, longest = longest_sequences(nlp, text)
    assert longest == 1_500
    expected = embed_sentences(nlp.get_pipe("elmo").elmo, [words], layers="all", window_tokens=None)[0]
    np.testing.assert_allclose(doc._.elmo_layers, expected, atol=1e-5, rtol=1e-4)


def test_default_window_reads_a_600_token_doc_whole(nlp):
    # The windowed values equal a run with a window longer than the doc.
    text, words = text_of(600)
    doc, longest = longest_sequences(nlp, text)
    assert longest == 600
    expected = embed_sentences(nlp.get_pipe("elmo").elmo, [words], layers="mix", window_tokens=None)[0]
    np.testing.assert_allclose(doc.tensor, expected, atol=1e-5, rtol=1e-4)


def test_sentences_stay_the_unit_and_only_long_ones_are_cut(tiny_model_dir):
    nlp = make_nlp(tiny_model_dir, window_tokens=64, window_context=8)
    nlp.add_pipe("sentencizer", first=True)
    _, long_words = text_of(200)
    text = "a short one . " + " ".join(long_words) + " ."
    doc = nlp(text)
    elmo = nlp.get_pipe("elmo").elmo
    first, second = [[t.text for t in s] for s in doc.sents]
    np.testing.assert_allclose(
        doc.tensor[: len(first)], embed_sentences(elmo, [first], layers="mix")[0], atol=1e-5, rtol=1e-4
    )
    expected = embed_sentences(elmo, [second], layers="mix", window_tokens=64, window_context=8)[0]
    np.testing.assert_allclose(doc.tensor[len(first) :], expected, atol=1e-5, rtol=1e-4)


def test_default_config_windows_at_the_default_window_tokens(tiny_model_dir):
    nlp = make_nlp(tiny_model_dir)
    assert nlp.config["components"]["elmo"]["model"]["@architectures"] == "spacy-elmo.ElmoLayers.v2"
    assert nlp.get_pipe("elmo").model.attrs["window_tokens"] == DEFAULT_WINDOW_TOKENS
    config = nlp.config.copy()
    model_cfg = config["components"]["elmo"]["model"]
    for key in ("window_tokens", "window_context", "cache_bytes"):
        del model_cfg[key]
    filled = spacy.util.load_model_from_config(Config(config), auto_fill=True)
    assert filled.get_pipe("elmo").model.attrs["window_tokens"] == DEFAULT_WINDOW_TOKENS


def test_bad_window_in_the_config_is_refused(tiny_model_dir):
    with pytest.raises(ValueError, match=r"window_context \(64\) must be less than half of window_tokens \(100\)"):
        make_nlp(tiny_model_dir, window_tokens=100, window_context=64)


def test_a_100000_token_doc_goes_through_nlp_in_bounded_passes(nlp):
    # About 7 s on TINY: in the default suite, as the headline case of long input.
    text, _ = text_of(100_000)
    doc, longest = longest_sequences(nlp, text)
    assert len(doc) == 100_000 and doc.tensor.shape == (100_000, DIM)
    assert longest <= DEFAULT_WINDOW_TOKENS and np.isfinite(doc.tensor).all()
