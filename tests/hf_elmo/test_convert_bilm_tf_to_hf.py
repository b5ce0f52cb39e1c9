from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer
from typer.testing import CliRunner

from elmo_core import (
    PUBLISHED_OPTIONS,
    Elmo,
    ElmoError,
    load_bilm_tf,
    load_model_folder,
    read_options,
    words_to_char_ids,
)
from elmo_core.apps.cli import app
from hf_elmo import convert_bilm_tf_to_hf as converter

from ..conftest import make_tiny_elmo

runner = CliRunner()


def convert(*args: object) -> None:
    result = runner.invoke(app, ["convert", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def datasets(path: Path) -> dict[str, np.ndarray]:
    found: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: found.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None)
    return found


def fixture_sentences(fixture_dir: Path) -> list[list[list[str]]]:
    """Batch i = [grid[0][i], grid[1][i], grid[2][i]], as the fixture README describes."""
    grid = json.loads((fixture_dir / "sentences.json").read_text(encoding="utf-8"))
    return [[grid[k][i].split() for k in range(3)] for i in range(10)]


def test_fixture_weights_through_auto_model_give_the_cores_activations(fixture_dir, tmp_path):
    convert(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5", tmp_path / "model")
    model = AutoModel.from_pretrained(tmp_path / "model", trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model", trust_remote_code=True)
    core = Elmo(read_options(fixture_dir / "options.json"), dropout=0.0).eval()
    load_bilm_tf(core, fixture_dir / "lm_weights.hdf5")
    batches = fixture_sentences(fixture_dir)
    sentences = [s for b in batches[:2] for s in b]  # 6 sentences of 11 to 53 tokens
    with torch.no_grad():
        out = model(
            **tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt"),
            output_hidden_states=True,
        )
        expected = core(*words_to_char_ids(sentences))
        torch.testing.assert_close(torch.stack(out.hidden_states), expected.activations, atol=1e-6, rtol=0)
        torch.testing.assert_close(out.last_hidden_state, expected.representations[0], atol=1e-6, rtol=0)
        # And the original's own numbers: the first fixture batch, where stateless = stateful.
        first = model(
            **tokenizer(batches[0], is_split_into_words=True, padding=True, return_tensors="pt"),
            output_hidden_states=True,
        )
    for k, sentence in enumerate(batches[0]):
        with h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") as f:
            original = np.concatenate([f["0"][0], f["0"][1]], axis=-1)
        np.testing.assert_allclose(first.hidden_states[-1][k, : len(sentence)].numpy(), original, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("source", ["tiny", "allennlp_fixture"])
def test_hdf5_to_folder_to_hdf5_is_exact_for_every_dataset(source, tiny_bilm_hdf5, request, tmp_path):
    if source == "tiny":
        options, weights = tiny_bilm_hdf5
    else:
        fixture_dir = request.getfixturevalue("fixture_dir")
        options, weights = fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5"
    convert(options, weights, tmp_path / "model")
    convert("--to-hdf5", tmp_path / "model", tmp_path / "back" / "elmo")
    original, back = datasets(weights), datasets(tmp_path / "back" / "elmo_weights.hdf5")
    assert sorted(back) == sorted(original)
    for name, values in original.items():
        assert back[name].dtype == np.float32 and back[name].shape == values.shape, name
        assert np.array_equal(back[name], values.astype(np.float32)), name
    assert read_options(tmp_path / "back" / "elmo_options.json") == read_options(options)


def test_converted_folder_is_a_complete_save_pretrained_folder(tiny_bilm_hdf5, saved_model_dir, tmp_path):
    convert(*tiny_bilm_hdf5, tmp_path / "model")
    names = lambda folder: sorted(p.name for p in folder.iterdir())  # noqa: E731
    assert names(tmp_path / "model") == names(saved_model_dir)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_elmo.ElmoConfig",
        "AutoModel": "modeling_elmo.ElmoModel",
        "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
        "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
    }
    tokenizer_config = json.loads((tmp_path / "model" / "tokenizer_config.json").read_text())
    assert tokenizer_config["auto_map"]["AutoTokenizer"][0] == "tokenization_elmo.ElmoTokenizer"
    loaded = load_model_folder(tmp_path / "model")
    for name, value in make_tiny_elmo().bilm.state_dict().items():
        assert torch.equal(loaded.bilm.state_dict()[name], value), name


def test_convert_command_says_which_paths_it_takes(tmp_path):
    for args, form in ((["a", "b"], "OPTIONS WEIGHTS OUT_DIR"), (["--to-hdf5", "a"], "MODEL_DIR OUT_PREFIX")):
        result = runner.invoke(app, ["convert", *args])
        assert isinstance(result.exception, ElmoError) and form in str(result.exception)


def test_published_urls_follow_allennlps_naming():
    assert set(converter.PUBLISHED_MODELS) == set(PUBLISHED_OPTIONS)
    base = "https://s3-us-west-2.amazonaws.com/allennlp/models/elmo"
    assert converter.published_urls("original") == (
        f"{base}/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json",
        f"{base}/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5",
    )
    assert converter.published_urls("original_5.5B")[1].endswith(
        "2x4096_512_2048cnn_2xhighway_5.5B/elmo_2x4096_512_2048cnn_2xhighway_5.5B_weights.hdf5"
    )
    assert "2x1024_128_2048cnn_1xhighway" in converter.published_urls("small")[0]
    assert "2x2048_256_2048cnn_1xhighway" in converter.published_urls("medium")[0]
    with pytest.raises(ValueError, match="unknown published ELMo model 'large'"):
        converter.published_urls("large")


def test_download_converts_on_arrival_from_local_files(tiny_bilm_hdf5, tmp_path, monkeypatch):
    options, weights = tiny_bilm_hdf5
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for url, source in zip(converter.published_urls("small"), (options, weights)):
        shutil.copyfile(source, mirror / url.rsplit("/", 1)[1])
    fetched: list[str] = []

    def fetch_from_mirror(url: str, dest: Path) -> None:
        fetched.append(url)
        shutil.copyfile(mirror / url.rsplit("/", 1)[1], dest)

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("tests never touch the network")

    monkeypatch.setattr("urllib.request.urlopen", no_network)
    monkeypatch.setattr(converter, "_fetch", fetch_from_mirror)
    out = converter.download_published("small", tmp_path / "model", keep_originals=tmp_path / "originals")
    assert fetched == list(converter.published_urls("small"))
    expected = make_tiny_elmo().bilm.state_dict()
    for name, value in load_model_folder(out).bilm.state_dict().items():
        assert torch.equal(value, expected[name]), name
    converter.download_published("small", tmp_path / "again", keep_originals=tmp_path / "originals")
    assert len(fetched) == 2  # kept originals are reused
    convert("--download", "small", tmp_path / "cli")
    assert len(fetched) == 4 and (tmp_path / "cli" / "modeling_elmo.py").is_file()


def test_converting_weights_another_process_holds_open_says_locked_and_writes_nothing(tiny_bilm_hdf5, tmp_path):
    from ..core.files.test_hdf5_files import assert_says_locked, held_open

    options, weights = tiny_bilm_hdf5
    with held_open(weights):
        result = runner.invoke(app, ["convert", str(options), str(weights), str(tmp_path / "model")])
    assert isinstance(result.exception, ElmoError)
    assert_says_locked(str(result.exception), weights)
    assert not (tmp_path / "model").exists()
