from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from elmo_core import (
    ElmoError,
    OptionsError,
    WeightFileError,
    embed_sentences,
    load_elmo,
    load_model_folder,
    save_model_folder,
)
from elmo_core.files.model_folder import ModelSource, check_model_folder, read_model_config, resolve_model_source
from tests.conftest import make_tiny_elmo


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
    a = embed_sentences(elmo, [["x", "y"]])[0]
    np.testing.assert_array_equal(embed_sentences(loaded, [["x", "y"]])[0], a)


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


# ------------------------------------------------------------------ the one loader (load_elmo)
def assert_same_weights(a, b):
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), name


def test_load_elmo_reads_a_model_folder_with_settings_overridden(tmp_path):
    elmo = make_tiny_elmo(dropout=0.25)
    save_model_folder(elmo, tmp_path / "m")
    loaded = load_elmo(tmp_path / "m", dropout=0.0)
    assert loaded.dropout == 0.0 and load_elmo(str(tmp_path / "m")).dropout == 0.25
    assert_same_weights(loaded, elmo)
    assert resolve_model_source(tmp_path / "m") == ModelSource(tmp_path / "m", None, None)


def test_load_elmo_reads_a_bilm_tf_pair_with_settings_for_the_constructor(tiny_bilm_hdf5):
    options, weights = tiny_bilm_hdf5
    loaded = load_elmo(options=options, weights=weights, dropout=0.0, num_output_representations=2)
    assert loaded.dropout == 0.0 and len(loaded.scalar_mixes) == 2
    assert_same_weights(loaded.bilm, make_tiny_elmo().bilm)
    assert resolve_model_source("", str(options), str(weights)).describe() == f"{options} + {weights}"
    with pytest.raises(TypeError, match=r"unknown Elmo settings \['dropuot'\]"):
        load_elmo(options=options, weights=weights, dropuot=0.0)


def test_load_elmo_without_a_source_loads_the_default_model_or_says_none_is_installed(tmp_path, monkeypatch):
    import elmo_core.files.model_folder as model_folder

    monkeypatch.setattr(model_folder, "DEFAULT_MODEL_DIR", tmp_path / "default")
    with pytest.raises(WeightFileError, match="no default model is installed"):
        load_elmo()
    save_model_folder(make_tiny_elmo(), tmp_path / "default")
    assert_same_weights(load_elmo("", "", ""), make_tiny_elmo())
    source = resolve_model_source(None, "", None)
    assert source.is_default and source.describe() == f"the default model ({tmp_path / 'default'})"


@pytest.mark.parametrize(
    "given, match",
    [
        (
            {"path": "m", "options": "o.json", "weights": "w.hdf5"},
            r"give either a model folder \(path\) or bilm-tf's options.json and hdf5 weights "
            r"\(options and weights\), not both; got path = 'm', options = 'o.json', weights = 'w.hdf5'. "
            r"Drop path, or drop options and weights.",
        ),
        ({"path": "m", "weights": "w.hdf5"}, r"not both; got path = 'm', options = \(not given\), weights = 'w.hdf5'"),
        (
            {"options": "o.json"},
            r"options and weights go together: bilm-tf's options.json and its hdf5 weights; got options = 'o.json', "
            r"weights = \(not given\). Give both, or a model folder with path.",
        ),
        ({"path": "", "weights": "w.hdf5"}, r"got options = \(not given\), weights = 'w.hdf5'"),
    ],
)
def test_a_bad_combination_of_sources_is_refused_before_any_file_is_read(given, match):
    with pytest.raises(ElmoError, match=match):
        load_elmo(**given)


def test_source_errors_spell_the_arguments_as_the_caller_does():
    flags = ("--model", "--options", "--weights")
    with pytest.raises(ValueError, match="--options and --weights go together.*a model folder with --model"):
        resolve_model_source(options="o.json", names=flags)
    with pytest.raises(ValueError, match=r"model folder \(--model\).*not both; got --model = 'm'"):
        resolve_model_source("m", "o.json", "w.hdf5", names=flags)


def test_load_elmo_names_a_missing_folder_or_file(tmp_path):
    with pytest.raises(WeightFileError, match="nowhere"):
        load_elmo(tmp_path / "nowhere")
    with pytest.raises(OptionsError, match="missing.json"):
        load_elmo(options=tmp_path / "missing.json", weights=tmp_path / "w.hdf5")


# ---------------------------------------------------------------- the layouts of save_pretrained


def write_transformers_layout(elmo, folder, *, shards: int = 1, variant: str | None = None, prefix: str = "") -> None:
    """Write `elmo` as transformers' `save_pretrained` lays out its weights, without transformers.

    `shards` > 1: `model-0000k-of-0000n.safetensors` + `model.safetensors.index.json`;
    `variant`: `model.<variant>.safetensors`, `model.safetensors.index.<variant>.json` and
    `model.<variant>-0000k-of-0000n.safetensors` (transformers' `_add_variant`); `prefix`:
    the keys as a task model holding the Elmo under that name saves them, with its head.
    """
    save_model_folder(elmo, folder)
    (folder / "model.safetensors").unlink()
    state = {f"{prefix}{k}": v.contiguous() for k, v in elmo.state_dict().items()}
    if prefix:
        state["classifier.weight"] = torch.ones(3, elmo.output_dim)
    stem = "model" if variant is None else f"model.{variant}"
    if shards == 1:
        save_file(state, folder / f"{stem}.safetensors", metadata={"format": "pt"})
        return
    names = list(state)
    weight_map = {}
    for k in range(shards):
        shard = f"{stem}-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {name: state[name] for name in names[k::shards]}
        save_file(part, folder / shard, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, shard))
    index = "model.safetensors.index.json" if variant is None else f"model.safetensors.index.{variant}.json"
    (folder / index).write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))


@pytest.mark.parametrize(
    "layout",
    [
        {"shards": 3},
        {"variant": "fp16"},
        {"shards": 3, "variant": "fp16"},
        {"shards": 4, "prefix": "elmo."},  # a sharded tagger folder (ElmoForTokenClassification)
    ],
    ids=["sharded", "variant", "sharded-variant", "sharded-tagger"],
)
def test_every_weights_layout_of_save_pretrained_loads_with_the_single_files_vectors(tmp_path, layout):
    elmo = make_tiny_elmo(dropout=0.0)
    write_transformers_layout(elmo, tmp_path, **layout)
    assert not (tmp_path / "model.safetensors").exists()
    check_model_folder(tmp_path)  # every shard's header, no error
    loaded = load_model_folder(tmp_path)
    for (name, a), (_, b) in zip(elmo.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    sentences = [["The", "river", "bank", "."], ["a"]]
    for got, expected in zip(
        embed_sentences(loaded, sentences, layers="mix"), embed_sentences(elmo, sentences, layers="mix")
    ):
        np.testing.assert_array_equal(got, expected)
    if "variant" in layout:  # and named explicitly, as save_pretrained(variant=...) was
        assert torch.equal(
            load_model_folder(tmp_path, variant="fp16").bilm.char_cnn.projection.weight,
            elmo.bilm.char_cnn.projection.weight,
        )


def test_a_float16_variant_is_read_into_the_float32_model(tmp_path):
    elmo = make_tiny_elmo(dropout=0.0)
    half = make_tiny_elmo(dropout=0.0).half()
    write_transformers_layout(half, tmp_path, shards=2, variant="fp16")
    loaded = load_model_folder(tmp_path)
    assert loaded.bilm.char_cnn.projection.weight.dtype == torch.float32
    torch.testing.assert_close(
        loaded.bilm.char_cnn.projection.weight, elmo.bilm.char_cnn.projection.weight.half().float(), rtol=0, atol=0
    )


def test_a_missing_shard_or_a_shard_without_its_tensors_is_one_clear_error(tmp_path):
    write_transformers_layout(make_tiny_elmo(), tmp_path, shards=3)
    (tmp_path / "model-00002-of-00003.safetensors").unlink()
    for load in (load_model_folder, check_model_folder):
        with pytest.raises(
            WeightFileError,
            match=r"model.safetensors.index.json names 1 shard file\(s\) the folder does not hold: "
            r"\['model-00002-of-00003.safetensors'\].*copy the whole folder again",
        ):
            load(tmp_path)
    # A shard that is there but holds other tensors than the index says.
    save_file({"other": torch.zeros(1)}, tmp_path / "model-00002-of-00003.safetensors")
    with pytest.raises(WeightFileError, match=r"puts tensor '.*' in model-00002-of-00003.safetensors, which does not"):
        check_model_folder(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text("{not json")
    with pytest.raises(WeightFileError, match=r"index.json is not valid JSON \(line 1, column 2: "):
        load_model_folder(tmp_path)


def test_the_weight_checks_cover_every_shard(tmp_path):
    elmo = make_tiny_elmo()
    write_transformers_layout(elmo, tmp_path, shards=3)
    last = tmp_path / "model-00003-of-00003.safetensors"
    state = load_file(last)
    name = sorted(state)[-1]
    state[name] = torch.full_like(state[name], float("nan"))
    save_file(state, last)
    with pytest.raises(WeightFileError, match=rf"model-00003-of-00003.safetensors: tensor '{name}' holds \d+ NaN"):
        load_model_folder(tmp_path)
    last.write_bytes(last.read_bytes()[:40])  # truncated: its header is unreadable
    with pytest.raises(WeightFileError, match=r"model-00003-of-00003.safetensors is not a readable safetensors"):
        check_model_folder(tmp_path)


def test_a_folder_of_several_variants_asks_which(tmp_path):
    elmo = make_tiny_elmo()
    write_transformers_layout(elmo, tmp_path, variant="fp16")
    write_transformers_layout(elmo, tmp_path, variant="bf16")
    with pytest.raises(WeightFileError, match=r"weights of 2 variants \(bf16, fp16\); say which to read"):
        load_model_folder(tmp_path)
    load_model_folder(tmp_path, variant="bf16")
    with pytest.raises(WeightFileError, match=r"has no model.int8.safetensors \(the weights\)"):
        load_model_folder(tmp_path, variant="int8")


def test_the_stored_elmo_settings_are_the_constructors_keywords_with_its_defaults():
    import inspect

    from elmo_core import Elmo
    from elmo_core.files.model_folder import ELMO_SETTINGS

    parameters = list(inspect.signature(Elmo.__init__).parameters.values())[2:]  # after self, options
    stored = [p for p in parameters if p.name != "requires_grad" and p.kind is not p.KEYWORD_ONLY]  # parts: not stored
    assert list(ELMO_SETTINGS.items()) == [(p.name, p.default) for p in stored]
    assert [p.name for p in parameters if p.kind is p.KEYWORD_ONLY] == [
        "recurrence",
        "token_cache",
        "char_cnn_training",
    ]
