"""A process-wide default dtype set by the user does not change the model a loader builds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from elmo_core import Elmo, embed_sentences, load_bilm_tf, load_elmo, load_model_folder, save_model_folder
from elmo_core.runtime.parts import serving_parts
from tests.conftest import make_tiny_elmo, make_tiny_options

SENTENCES = [["The", "river", "bank", "flooded", "."], ["naïve", "x"]]
OTHER_DEFAULTS = [torch.bfloat16, torch.float64, torch.float16]


@pytest.fixture
def tiny_folder(tmp_path: Path) -> Path:
    save_model_folder(make_tiny_elmo(dropout=0.0), tmp_path / "tiny")
    return tmp_path / "tiny"


@contextmanager
def under_default(dtype: torch.dtype) -> Iterator[None]:
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def assert_float32_and_same_vectors(build, reference: np.ndarray, dtype: torch.dtype) -> None:
    """`build()` under the default `dtype`: float32 parameters and buffers, the float32 vectors."""
    with under_default(dtype):
        elmo = build()
        vectors = embed_sentences(elmo, SENTENCES, layers="all")
        assert torch.get_default_dtype() == dtype  # the user's default is left as they set it
    floats = {t.dtype for t in [*elmo.parameters(), *elmo.buffers()] if t.is_floating_point()}
    assert floats == {torch.float32}
    for got, want in zip(vectors, reference):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", OTHER_DEFAULTS, ids=str)
def test_load_model_folder_builds_float32_whatever_the_default_dtype(tiny_folder, dtype):
    reference = embed_sentences(load_model_folder(tiny_folder), SENTENCES, layers="all")
    assert_float32_and_same_vectors(lambda: load_model_folder(tiny_folder), reference, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64], ids=str)
def test_the_default_model_loads_as_float32_under_another_default_dtype(dtype):
    reference = embed_sentences(load_elmo(dropout=0.0), SENTENCES, layers="all")
    assert_float32_and_same_vectors(lambda: load_elmo(dropout=0.0), reference, dtype)


@pytest.mark.parametrize("dtype", OTHER_DEFAULTS, ids=str)
def test_elmo_built_from_options_and_bilm_tf_weights_is_float32(tiny_bilm_hdf5, dtype):
    options, weights = tiny_bilm_hdf5
    reference = embed_sentences(load_elmo(options=options, weights=weights, dropout=0.0), SENTENCES, layers="all")
    assert_float32_and_same_vectors(lambda: load_elmo(options=options, weights=weights, dropout=0.0), reference, dtype)

    def by_hand() -> Elmo:
        elmo = Elmo(make_tiny_options(), dropout=0.0, **serving_parts())
        load_bilm_tf(elmo, weights)
        return elmo.eval()

    assert_float32_and_same_vectors(by_hand, reference, dtype)


def test_another_precision_only_when_asked_for(tiny_folder):
    elmo = load_model_folder(tiny_folder).to(torch.float64)
    assert {p.dtype for p in elmo.parameters()} == {torch.float64}
