from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from elmo_core import OptionsError, WeightFileError, load_model_folder, read_model_config, save_model_folder

from ..conftest import make_tiny_elmo


def test_round_trip_keeps_weights_settings_and_mix(tmp_path):
    elmo = make_tiny_elmo(num_output_representations=2, dropout=0.25, do_layer_norm=True)
    with torch.no_grad():
        elmo.scalar_mixes[1].scalar_weights.copy_(torch.tensor([0.5, -1.0, 2.0]))
        elmo.scalar_mixes[1].gamma.fill_(3.0)
    save_model_folder(elmo, tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
    ]
    loaded = load_model_folder(tmp_path / "m")
    assert loaded.options == elmo.options
    assert loaded.dropout == 0.25 and len(loaded.scalar_mixes) == 2 and loaded.scalar_mixes[0].do_layer_norm
    for (name, a), (_, b) in zip(elmo.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    torch.testing.assert_close(
        loaded.scalar_mixes[1].normalized_weights, torch.softmax(torch.tensor([0.5, -1.0, 2.0]), 0)
    )
    save_model_folder(loaded, tmp_path / "again")
    assert (
        load_file(tmp_path / "m" / "model.safetensors").keys()
        == load_file(tmp_path / "again" / "model.safetensors").keys()
    )


def test_config_holds_the_bilm_tf_options_keys_verbatim(tmp_path):
    elmo = make_tiny_elmo()
    save_model_folder(elmo, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "elmo"
    assert config["lstm"] == elmo.options.to_dict()["lstm"]
    assert config["char_cnn"] == elmo.options.to_dict()["char_cnn"]
    tokenizer = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert tokenizer["max_characters_per_token"] == 50 and tokenizer["char_id_offset"] == 1


def test_fixed_mix_survives_save_and_load(tmp_path):
    elmo = make_tiny_elmo(scalar_mix_parameters=[0.0, 0.0, 1.0])
    save_model_folder(elmo, tmp_path)
    loaded = load_model_folder(tmp_path)
    assert not any(p.requires_grad for p in loaded.parameters())
    torch.testing.assert_close(loaded.scalar_mixes[0].normalized_weights, elmo.scalar_mixes[0].normalized_weights)


def test_overrides_and_an_elmo_nested_in_a_task_model(tmp_path):
    """Any submodule name works (the HF tagger's is `elmo.`); the task head's tensors are left out."""
    elmo = make_tiny_elmo()
    state = {f"encoder.contextual.{k}": v for k, v in elmo.state_dict().items()}
    state["head.weight"] = torch.zeros(5, 16)
    save_model_folder(elmo, tmp_path)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    loaded = load_model_folder(tmp_path, dropout=0.0, num_output_representations=2)
    assert loaded.dropout == 0.0 and len(loaded.scalar_mixes) == 2
    a = elmo.embed([["x", "y"]])[0]
    np.testing.assert_array_equal(loaded.embed([["x", "y"]])[0], a)


def test_missing_folder_and_files_are_named(tmp_path):
    with pytest.raises(WeightFileError, match="does not exist or is not a folder"):
        load_model_folder(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightFileError, match="has no config.json"):
        load_model_folder(tmp_path / "empty")
    save_model_folder(make_tiny_elmo(), tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(WeightFileError, match="has no model.safetensors"):
        load_model_folder(tmp_path / "m")


def test_wrong_model_type_and_bad_options(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(WeightFileError, match="model_type 'bert'"):
        read_model_config(tmp_path)
    config["lstm"]["dim"] = 0
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(OptionsError, match="config.json: lstm.dim must be a positive integer"):
        read_model_config(tmp_path)


def test_corrupt_and_mismatched_weights_are_named(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path)
    weights = tmp_path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightFileError, match="model.safetensors is not a readable safetensors file"):
        load_model_folder(tmp_path)
    state = make_tiny_elmo().state_dict()
    state["bilm.char_cnn.projection.weight"] = torch.zeros(8, 3)
    save_file(state, weights)
    with pytest.raises(WeightFileError, match=r"'bilm.char_cnn.projection.weight' has shape \(8, 3\).*\(8, 12\)"):
        load_model_folder(tmp_path)
    del state["bilm.char_cnn.projection.weight"]
    save_file(state, weights)
    with pytest.raises(WeightFileError, match="has no tensor 'bilm.char_cnn.projection.weight'"):
        load_model_folder(tmp_path)


def test_config_keys_outside_the_options_do_not_leak_into_them(tmp_path):
    elmo = make_tiny_elmo(dropout=0.25)
    elmo.options.extra["dropout"] = 0.1  # bilm-tf's training key of the same name
    save_model_folder(elmo, tmp_path, extra_config={"architectures": ["ElmoModel"]})
    options, settings = read_model_config(tmp_path)
    assert options.extra == {} and settings["dropout"] == 0.25


def test_saved_files_are_readable_by_everyone_under_the_usual_umask(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        save_model_folder(make_tiny_elmo(), tmp_path)
    finally:
        os.umask(old)
    for path in tmp_path.iterdir():
        assert path.stat().st_mode & 0o777 == 0o644, path.name
