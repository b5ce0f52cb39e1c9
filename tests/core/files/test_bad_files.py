"""Damaged or mismatched files: every failure names the file, what is wrong and the fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from safetensors.torch import load_file, save_file

from elmo_core import (
    BiLMOptions,
    Elmo,
    OptionsError,
    WeightFileError,
    embed_sentences,
    load_bilm_tf,
    load_model_folder,
    read_options,
    save_model_folder,
)
from elmo_core.files.model_folder import check_model_folder
from elmo_core.model.options import CharCNNOptions, LSTMOptions
from tests.conftest import make_tiny_elmo, make_tiny_options


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "flipped":  # every 7th byte of the second half inverted
        damaged = bytearray(data)
        for i in range(len(damaged) // 2, len(damaged), 7):
            damaged[i] ^= 0xFF
        path.write_bytes(bytes(damaged))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    return tmp_path / "model"


# ---------------------------------------------------------------- bilm-tf hdf5
@pytest.mark.parametrize(
    "how, match",
    [
        ("truncated", r"is not a readable hdf5 file .*truncated.* download or convert it again"),
        ("empty", r"is not a readable hdf5 file .*download or convert it again"),
        ("flipped", r"(cannot be read|not a readable hdf5 file|NaN or infinite).* download or convert it again"),
    ],
)
def test_damaged_hdf5_names_the_file_and_the_fix(tiny_bilm_hdf5, how, match):
    _, weights = tiny_bilm_hdf5
    damage(weights, how)
    with pytest.raises(WeightFileError, match=match) as info:
        load_bilm_tf(make_tiny_elmo(), weights)
    assert str(weights) in str(info.value)


def test_hdf5_with_nan_weights_is_refused(tiny_bilm_hdf5):
    _, weights = tiny_bilm_hdf5
    with h5py.File(weights, "r+") as f:
        f["CNN_proj/W_proj"][0, 0] = np.nan
    with pytest.raises(WeightFileError, match=r"dataset 'CNN_proj/W_proj' holds 1 NaN or infinite values"):
        load_bilm_tf(make_tiny_elmo(), weights)


def test_hdf5_path_that_is_a_folder_or_missing(tmp_path):
    with pytest.raises(
        WeightFileError, match=r"is a folder, not an hdf5 weight file. For a model folder use load_model_folder"
    ):
        load_bilm_tf(make_tiny_elmo(), tmp_path)
    with pytest.raises(WeightFileError, match=r"weight file .*nothing.hdf5 does not exist. Check the path"):
        load_bilm_tf(make_tiny_elmo(), tmp_path / "nothing.hdf5")


def test_options_that_disagree_with_the_hdf5_weights(tiny_bilm_hdf5):
    _, weights = tiny_bilm_hdf5
    options = make_tiny_options()
    wider = BiLMOptions(char_cnn=options.char_cnn, lstm=LSTMOptions(dim=32, projection_dim=8, n_layers=2))
    with pytest.raises(
        WeightFileError,
        match=r"Cell0/LSTMCell/W_0' has shape \(16, 64\), but the options imply \(16, 128\)\. Check that options.json",
    ):
        load_bilm_tf(Elmo(wider), weights)
    more_filters = BiLMOptions(
        char_cnn=CharCNNOptions(embedding_dim=4, filters=((1, 4), (2, 8), (3, 8)), n_highway=1), lstm=options.lstm
    )
    with pytest.raises(
        WeightFileError, match=r"has no dataset 'CNN/W_cnn_2' \(expected shape \(1, 3, 4, 8\)\).*do the options match"
    ):
        load_bilm_tf(Elmo(more_filters), weights)


# ---------------------------------------------------------------- model folders (safetensors)
@pytest.mark.parametrize("how", ["truncated", "empty"])
def test_damaged_safetensors_names_the_file_and_the_fix(folder, how):
    damage(folder / "model.safetensors", how)
    for load in (load_model_folder, check_model_folder):
        with pytest.raises(
            WeightFileError,
            match=r"model.safetensors is not a readable safetensors file \(SafetensorError: .*copy or save it again",
        ):
            load(folder)


def test_safetensors_with_nan_weights_is_refused(folder):
    state = load_file(folder / "model.safetensors")
    state["bilm.char_cnn.projection.bias"][1] = float("inf")
    save_file(state, folder / "model.safetensors")
    with pytest.raises(
        WeightFileError,
        match=r"tensor 'bilm.char_cnn.projection.bias' holds 1 NaN or infinite values.*save or download",
    ):
        load_model_folder(folder)


def _edit_config(folder: Path, edit) -> None:
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "edit, error, match",
    [
        (
            lambda c: c["lstm"].update(dim=32),
            WeightFileError,
            r"tensor 'bilm.forward_layers.layers.0.input_linear.weight' has shape \(64, 8\), "
            r"but config.json implies \(128, 8\)\. The options in config.json do not match",
        ),
        (
            lambda c: c.update(model_type="bert"),
            WeightFileError,
            r"config.json has model_type 'bert'; an ELMo model folder has model_type 'elmo'",
        ),
        (lambda c: c.pop("model_type"), WeightFileError, r"config.json has model_type None"),
        (lambda c: c.pop("lstm"), OptionsError, r"config.json: options must have a 'lstm' object"),
        (
            lambda c: c["lstm"].update(dim="big"),
            OptionsError,
            r"config.json: lstm.dim must be a positive integer; got 'big'",
        ),
        (
            lambda c: c.update(dropout="high"),
            OptionsError,
            r"config.json: its Elmo settings cannot be used .*fix the value in config.json",
        ),
    ],
)
def test_config_that_disagrees_with_the_weights_or_is_wrong(folder, edit, error, match):
    _edit_config(folder, edit)
    for load in (load_model_folder, check_model_folder):
        with pytest.raises(error, match=match) as info:
            load(folder)
        assert str(folder) in str(info.value)


@pytest.mark.parametrize(
    "name, match",
    [
        (
            "model.safetensors",
            r"has no model.safetensors \(the weights\), only \['config.json', 'tokenizer_config.json'\]\. "
            r"Copy the whole folder again",
        ),
        ("config.json", r"is not an ELMo model folder: it has no config.json"),
    ],
)
def test_model_folder_with_a_missing_file(folder, name, match):
    (folder / name).unlink()
    with pytest.raises(WeightFileError, match=match):
        load_model_folder(folder)


def test_a_json_file_that_is_not_json_or_not_utf8_names_the_file_the_line_and_the_column(folder, tmp_path):
    # options.json and a model folder's config.json are read by one reader (`read_json`).
    options = tmp_path / "options.json"
    config = folder / "config.json"
    for read, path, what, error in (
        (lambda: read_options(options), options, "options file", OptionsError),
        (lambda: load_model_folder(folder), config, "model config", WeightFileError),
    ):
        path.write_text('{"lstm": {\n  "dim": 16,\n}\n', encoding="utf-8")
        with pytest.raises(error) as err:
            read()
        assert str(err.value) == (
            f"{what} {path} is not valid JSON (line 3, column 1: Expecting property name enclosed in double quotes)."
        )
        path.write_bytes(b'{"lstm": {\n  "name": "caf\xe9"\n}}\n')
        with pytest.raises(error) as err:
            read()
        assert str(err.value).startswith(f"{what} {path} is not UTF-8 text (line 2: invalid continuation byte). ")


def test_weights_of_another_model_in_the_folder(folder, tmp_path):
    other = Elmo(
        BiLMOptions(char_cnn=make_tiny_options().char_cnn, lstm=LSTMOptions(dim=16, projection_dim=8, n_layers=1))
    )
    save_model_folder(other, tmp_path / "other")
    shutil.copy(tmp_path / "other" / "model.safetensors", folder / "model.safetensors")
    with pytest.raises(
        WeightFileError,
        match=r"config.json declares lstm.n_layers = 2, but .*model.safetensors holds 1 "
        r"\(tensors 'bilm.forward_layers.layers.\*'\)\. The options in config.json do not match these weights",
    ):
        load_model_folder(folder)


def test_a_good_folder_passes_the_check(folder):
    check_model_folder(folder)  # no exception, nothing loaded
    np.testing.assert_array_equal(
        embed_sentences(load_model_folder(folder), [["a"]])[0], embed_sentences(make_tiny_elmo(), [["a"]])[0]
    )
