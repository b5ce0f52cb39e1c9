"""Damaged or mismatched model folders through from_pretrained.

What a user sees is elmo_core's clear error, not transformers' internals.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from transformers import AutoModel

from elmo_core import OptionsError, WeightFileError
from hf_elmo import ElmoConfig, ElmoForTokenClassification, ElmoModel


def _edit_config(folder: Path, edit) -> None:
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))


LOADERS = [
    pytest.param(lambda p: ElmoModel.from_pretrained(p), id="ElmoModel"),
    pytest.param(lambda p: AutoModel.from_pretrained(p, trust_remote_code=True), id="AutoModel"),
    pytest.param(lambda p: ElmoForTokenClassification.from_pretrained(p), id="ElmoForTokenClassification"),
]


@pytest.mark.parametrize("load", LOADERS)
def test_truncated_weights(saved_model_dir, load):
    weights = saved_model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(
        WeightFileError, match=r"model.safetensors is not a readable safetensors file .*copy or save it again"
    ) as info:
        load(saved_model_dir)
    assert str(saved_model_dir) in str(info.value)


@pytest.mark.parametrize("load", LOADERS)
def test_missing_weights(saved_model_dir, load):
    (saved_model_dir / "model.safetensors").unlink()
    with pytest.raises(WeightFileError, match=r"has no model.safetensors \(the weights\).*Copy the whole folder again"):
        load(saved_model_dir)


@pytest.mark.parametrize("load", LOADERS)
def test_options_that_disagree_with_the_weights(saved_model_dir, load):
    _edit_config(saved_model_dir, lambda c: c["lstm"].update(dim=32))
    with pytest.raises(
        WeightFileError,
        match=r"has shape \(64, 8\), but config.json implies \(128, 8\)\. The options in config.json do not match",
    ):
        load(saved_model_dir)


@pytest.mark.parametrize("load", LOADERS)
def test_config_without_the_lstm_options(saved_model_dir, load):
    # transformers would fill in the default (original) model's shape and fail deep inside.
    _edit_config(saved_model_dir, lambda c: c.pop("lstm"))
    with pytest.raises(OptionsError, match=r"config.json: options must have a 'lstm' object"):
        load(saved_model_dir)


def test_wrong_model_type_is_an_error_not_a_warning(saved_model_dir):
    _edit_config(saved_model_dir, lambda c: c.update(model_type="bert"))
    with pytest.raises(ValueError, match=r"has model_type 'bert'; ElmoConfig reads model_type 'elmo' only"):
        ElmoConfig.from_pretrained(saved_model_dir)
    with pytest.raises(
        WeightFileError, match=r"config.json has model_type 'bert'; an ELMo model folder has model_type 'elmo'"
    ):
        ElmoModel.from_pretrained(saved_model_dir)


def test_missing_config(saved_model_dir):
    (saved_model_dir / "config.json").unlink()
    with pytest.raises(WeightFileError, match=r"is not an ELMo model folder: it has no config.json"):
        ElmoModel.from_pretrained(saved_model_dir)


def test_nan_weights_are_refused(saved_model_dir):
    state = load_file(saved_model_dir / "model.safetensors")
    state["bilm.char_cnn.projection.bias"][0] = float("nan")
    save_file(state, saved_model_dir / "model.safetensors", metadata={"format": "pt"})
    # The core's one wording (as elmo_core.load_model_folder): where, how many, what to do.
    match = r"saved: tensor 'bilm.char_cnn.projection.bias' holds 1 NaN or infinite values.*save or download"
    with pytest.raises(WeightFileError, match=match):
        ElmoModel.from_pretrained(saved_model_dir)


def test_a_missing_folder_keeps_transformers_own_error(tmp_path):
    with pytest.raises(OSError):
        ElmoModel.from_pretrained(tmp_path / "does-not-exist")


def test_a_given_config_whose_sizes_disagree_with_the_weights_is_refused_before_building(saved_model_dir, monkeypatch):
    config = ElmoConfig.from_pretrained(saved_model_dir)
    config.lstm = {**config.lstm, "dim": 10 * config.lstm["dim"]}
    built = []
    monkeypatch.setattr(ElmoModel, "post_init", lambda self: built.append(self))  # only the meta-device check's model
    with pytest.raises(ValueError, match=r"tensor 'bilm\..*' has shape .*, but config.json implies"):
        ElmoModel.from_pretrained(saved_model_dir, config=config)
    assert all(p.is_meta for model in built for p in model.parameters())
