from __future__ import annotations

import json

import pytest
import torch

from elmo_core import PUBLISHED_OPTIONS, BiLM, BiLMOptions, Elmo, OptionsError, read_options

ORIGINAL_JSON = (
    '{"lstm": {"use_skip_connections": true, "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, '
    '"dim": 4096, "n_layers": 2}, "char_cnn": {"activation": "relu", "filters": [[1, 32], [2, 32], '
    '[3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]], "n_highway": 2, "embedding": {"dim": 16}, '
    '"n_characters": 262, "max_characters_per_token": 50}}'
)


@pytest.mark.parametrize(
    "name, expected",
    [("original", 93_600_848), ("original_5.5B", 93_600_848), ("medium", 28_027_728), ("small", 13_593_296)],
)
def test_published_shapes_have_published_parameter_counts(name, expected):
    with torch.device("meta"):
        bilm = BiLM(PUBLISHED_OPTIONS[name])
    assert sum(p.numel() for p in bilm.parameters()) == expected


def test_published_original_json_parses_to_the_original_options():
    options = BiLMOptions.from_dict(json.loads(ORIGINAL_JSON))
    assert options == PUBLISHED_OPTIONS["original"]
    assert options.to_dict() == json.loads(ORIGINAL_JSON)


def test_json_round_trip_keeps_training_keys(tmp_path):
    data = json.loads(ORIGINAL_JSON)
    data["n_tokens_vocab"] = 793471
    data["lstm"]["some_future_key"] = 1
    path = tmp_path / "options.json"
    path.write_text(json.dumps(data))
    options = read_options(path)
    assert options.extra["n_tokens_vocab"] == 793471
    options.to_json(tmp_path / "again.json")
    again = read_options(tmp_path / "again.json")
    assert again == options
    assert again.to_dict() == data


def test_training_n_characters_261_reads_as_262():
    data = json.loads(ORIGINAL_JSON)
    data["char_cnn"]["n_characters"] = 261
    assert BiLMOptions.from_dict(data).char_cnn.n_characters == 262


def test_fixture_options_load(fixture_dir):
    options = read_options(fixture_dir / "options.json")
    assert options.output_dim == 32 and options.n_outputs == 3
    assert options.char_cnn.n_filters == 124


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: d["lstm"].pop("dim"), "missing the key 'dim'"),
        (lambda d: d["lstm"].update(dim=-4), "lstm.dim must be a positive integer; got -4"),
        (lambda d: d["char_cnn"].update(activation="gelu"), "activation must be one of"),
        (lambda d: d["char_cnn"].update(n_characters=300), "n_characters must be 262"),
        (lambda d: d["char_cnn"].update(filters=[[60, 4]]), "wider than max_characters_per_token"),
        (lambda d: d["lstm"].update(cell_clip="3"), "cell_clip must be a finite number"),
        (lambda d: d.pop("char_cnn"), "must have a 'char_cnn' object"),
    ],
)
def test_invalid_options_raise_options_error(edit, match):
    data = json.loads(ORIGINAL_JSON)
    edit(data)
    with pytest.raises(OptionsError, match=match):
        BiLMOptions.from_dict(data)


def test_options_file_errors_name_the_file(tmp_path):
    path = tmp_path / "options.json"
    path.write_text("{not json")
    with pytest.raises(OptionsError, match="options.json is not valid JSON"):
        read_options(path)
    with pytest.raises(OptionsError, match="does not exist"):
        read_options(tmp_path / "missing.json")


def test_zero_clip_means_no_clip():
    data = json.loads(ORIGINAL_JSON)
    data["lstm"]["cell_clip"] = 0
    assert BiLMOptions.from_dict(data).lstm.cell_clip is None


def test_elmo_output_dim_is_twice_the_projection(tiny_options):
    assert Elmo(tiny_options).output_dim == 16
