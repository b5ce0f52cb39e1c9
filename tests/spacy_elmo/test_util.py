"""What travels with a Doc, restore_docs, and the mix arithmetic."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from spacy.tokens import Doc, DocBin

from spacy_elmo.util import mix_layers, restore_docs

from .conftest import DIM

TEXTS = ["Apple is a company .", "The river bank ."] * 10


def assert_same_vectors(docs, reference):
    assert len(docs) == len(reference)
    for doc, ref in zip(docs, reference):
        np.testing.assert_array_equal(doc.tensor, ref.tensor)
        np.testing.assert_array_equal(doc._.elmo_layers, ref._.elmo_layers)
        for token, ref_token in zip(doc, ref):
            assert token.vector.shape == (DIM,) and token.vector.any()
            np.testing.assert_allclose(token.vector, ref_token.vector, rtol=0, atol=1e-5)


def test_docbin_with_user_data_then_restore_docs_gives_everything_back(nlp):
    # spaCy's DocBin never stores doc.tensor; the layers travel as user data.
    A = list(nlp.pipe(TEXTS))
    doc_bin = DocBin(store_user_data=True, docs=A)
    C = list(DocBin().from_bytes(doc_bin.to_bytes()).get_docs(nlp.vocab))
    assert all(doc.tensor.size == 0 for doc in C)  # what DocBin does
    assert restore_docs(C) == len(C)
    assert_same_vectors(C, A)
    assert C[1][2].similarity(A[1][2]) == pytest.approx(1.0, abs=1e-6)


def test_docbin_without_user_data_warns_instead_of_zeros(nlp):
    A = list(nlp.pipe(TEXTS[:2]))
    C = list(DocBin(docs=A).get_docs(nlp.vocab))
    with pytest.warns(UserWarning, match="2 Doc\\(s\\) carry no ELMo layers"):
        assert restore_docs(C) == 0
    assert all(doc.tensor.size == 0 for doc in C)


def test_doc_to_bytes_keeps_tensor_and_layers_and_warns_about_hooks(nlp):
    A = nlp("The river bank .")
    with pytest.warns(UserWarning, match="W109"):  # spaCy: user hooks cannot be serialised
        data = A.to_bytes()
    B = Doc(nlp.vocab).from_bytes(data)
    assert_same_vectors([B], [A])
    restore_docs([B])
    assert B[2].similarity(A[2]) == pytest.approx(1.0, abs=1e-6)


def test_mix_layers_is_the_formula_and_checks_its_input():
    rng = np.random.default_rng(0)
    layers = rng.normal(size=(3, 4, 5)).astype("float32")
    mix = np.array([0.2, 0.3, 0.5, 2.0], dtype="float32")
    np.testing.assert_allclose(mix_layers(layers, mix), 2.0 * np.tensordot(mix[:3], layers, axes=1), rtol=1e-6)
    assert mix_layers(layers, mix).dtype == np.float32
    with pytest.raises(ValueError, match="one weight per layer plus gamma"):
        mix_layers(layers, mix[:3])


def test_retokenize_merge_drops_stale_layers_with_a_warning_never_misaligned(nlp):
    doc = nlp("New York is a big city .")
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    assert doc.tensor.shape[0] == len(doc) == 6
    with pytest.warns(UserWarning, match=r"computed for other tokens .* nlp.get_pipe\('elmo'\)\(doc\)"):
        assert doc._.elmo_layers is None
    with pytest.warns(UserWarning, match="tokens changed after the elmo component ran"):
        assert restore_docs([doc]) == 0
    nlp.get_pipe("elmo")(doc)  # the recomputation the warning names
    fresh = nlp.get_pipe("elmo")(Doc(nlp.vocab, words=[t.text for t in doc], spaces=[bool(t.whitespace_) for t in doc]))
    assert doc._.elmo_layers.shape[1] == len(doc) and doc[0].text == "New York"
    np.testing.assert_allclose(doc._.elmo_layers, fresh._.elmo_layers, atol=1e-6, rtol=1e-6)


def test_retokenize_split_drops_stale_layers_with_a_warning(nlp):
    doc = nlp("I live in NewYork .")
    with doc.retokenize() as retokenizer:
        retokenizer.split(doc[3], ["New", "York"], heads=[(doc[3], 1), doc[2]])
    with pytest.warns(UserWarning, match="computed for other tokens"):
        assert doc._.elmo_layers is None


def test_copy_keeps_the_layers_and_span_as_doc_never_gets_other_tokens_rows(nlp):
    doc = nlp("The bank of the river is steep .")
    copy = doc.copy()
    np.testing.assert_array_equal(copy._.elmo_layers, doc._.elmo_layers)
    assert restore_docs([copy]) == 1
    np.testing.assert_array_equal(copy.tensor, doc.tensor)
    for span_doc in (doc[2:5].as_doc(), doc[2:5].as_doc(copy_user_data=True)):
        layers = span_doc._.elmo_layers
        assert layers is None or layers.shape[1] == len(span_doc) == 3
    # A Doc that carries the whole Doc's layers but only some of its tokens gets None and a warning.
    span_doc = doc[2:5].as_doc()
    span_doc.user_data.update(doc.user_data)
    with pytest.warns(UserWarning, match="computed for other tokens"):
        assert span_doc._.elmo_layers is None


def test_doc_from_docs_never_reads_the_first_docs_layers_as_its_own(nlp):
    docs = [nlp("The bank ."), nlp("A river bank is steep .")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        joined = Doc.from_docs(docs)  # spaCy skips Doc-level extensions (its warning W101)
        layers = joined._.elmo_layers
    assert layers is None or layers.shape[1] == len(joined)
    assert any("elmo_layers" in str(w.message) for w in caught)
