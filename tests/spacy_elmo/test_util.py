"""What travels with a Doc (R21), restore_docs, and the mix arithmetic."""

from __future__ import annotations

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
    # R21 "C": spaCy's DocBin never stores doc.tensor; the layers travel as user data.
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
