"""A saved pipeline with a missing or damaged biLM, and bad sources: clear errors naming the file."""

from __future__ import annotations

import shutil

import pytest
import spacy

from elmo_core import WeightFileError

from .conftest import make_nlp


@pytest.fixture
def saved(tmp_path, tiny_model_dir):
    nlp = make_nlp(tiny_model_dir)
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipeline")
    return tmp_path / "pipeline"


@pytest.mark.parametrize(
    "damage, match",
    [
        (
            lambda p: (p / "elmo" / "model" / "model.safetensors").unlink(),
            r"the saved pipeline's 'elmo' component cannot load its biLM from .*elmo/model: model folder .*has no "
            r"model.safetensors.*save it again with nlp.to_disk\(\)",
        ),
        (
            lambda p: shutil.rmtree(p / "elmo" / "model"),
            r"cannot load its biLM from .*elmo/model: model folder .* does not exist.*copy it again whole",
        ),
        (
            lambda p: (p / "elmo" / "model" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}"),
            r"cannot load its biLM from .*model.safetensors is not a readable safetensors file",
        ),
    ],
)
def test_saved_pipeline_with_a_missing_or_damaged_biLM(saved, damage, match):
    damage(saved)
    with pytest.raises(WeightFileError, match=match):
        spacy.load(saved)


def test_bad_sources_name_the_file(tmp_path, tiny_bilm_hdf5):
    options, weights = tiny_bilm_hdf5
    weights.write_bytes(weights.read_bytes()[:100])
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"options": str(options), "weights": str(weights)}})
    with pytest.raises(
        WeightFileError, match=r"weights.hdf5 is not a readable hdf5 file .*download or convert it again"
    ):
        nlp.initialize()
    empty = tmp_path / "empty"
    empty.mkdir()
    nlp = make_nlp(empty)
    with pytest.raises(WeightFileError, match=r"is not an ELMo model folder: it has no config.json"):
        nlp("a b")
