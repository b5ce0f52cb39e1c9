"""Saving into a folder of links (the Hugging Face cache's snapshots) replaces the links, in every face.

`blobs/` holds the default model's files; `snapshots/target/` and `snapshots/other/` link to
them. A changed model saved into `target` by any face leaves every blob as it was, so
`other`, which took no part, still reads the old files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch

from elmo_core import default_model_dir, load_model_folder, save_model_folder

FILES = ("config.json", "model.safetensors", "tokenizer_config.json")


def _sha256(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    for name in FILES:
        shutil.copyfile(default_model_dir() / name, blobs / name)
    for snapshot in ("target", "other"):
        folder = tmp_path / "snapshots" / snapshot
        folder.mkdir(parents=True)
        for name in FILES:
            (folder / name).symlink_to(os.path.relpath(blobs / name, folder))
    return tmp_path


def _noisy(model: torch.nn.Module) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".bilm." in f".{name}":
                parameter.add_(0.01 * torch.randn(parameter.shape, generator=generator))
    return model


def _check_only_target_changed(cache: Path, before: dict[str, str], written: tuple[str, ...] = FILES) -> None:
    assert _sha256(cache / "blobs") == before
    target = cache / "snapshots" / "target"
    assert not any((target / name).is_symlink() for name in written)
    assert not [p.name for p in target.iterdir() if p.name.startswith(".")]  # no temporary file left
    other = cache / "snapshots" / "other"
    assert all((other / name).is_symlink() for name in FILES)


def test_save_model_folder_replaces_links_and_leaves_their_targets(cache):
    before = _sha256(cache / "blobs")
    model = _noisy(load_model_folder(default_model_dir()))
    save_model_folder(model, cache / "snapshots" / "target")
    _check_only_target_changed(cache, before, ("config.json", "model.safetensors"))  # a tokenizer config is kept
    loaded = load_model_folder(cache / "snapshots" / "target")
    assert torch.equal(loaded.bilm.char_cnn.projection.weight, model.bilm.char_cnn.projection.weight)


def test_save_pretrained_of_model_config_and_tokenizer_replaces_links_and_leaves_their_targets(cache):
    pytest.importorskip("transformers")
    from transformers import AutoModel, AutoTokenizer

    import hf_elmo  # noqa: F401 - registers the Auto classes

    before = _sha256(cache / "blobs")
    target = cache / "snapshots" / "target"
    model = _noisy(AutoModel.from_pretrained(default_model_dir()))
    model.config.dropout = 0.25  # a changed config.json too
    model.save_pretrained(target)
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    saved = tokenizer.save_pretrained(target)
    model.config.save_pretrained(target)
    _check_only_target_changed(cache, before)
    assert all(Path(path).parent == target for path in saved)
    again = AutoModel.from_pretrained(target)
    assert again.config.dropout == 0.25
    assert torch.equal(again.bilm.char_cnn.projection.weight, model.bilm.char_cnn.projection.weight)


def test_a_sharded_save_pretrained_deletes_old_shards_as_transformers_does(tmp_path):
    pytest.importorskip("transformers")
    from transformers import AutoModel

    import hf_elmo  # noqa: F401

    model = AutoModel.from_pretrained(default_model_dir())
    model.save_pretrained(tmp_path, max_shard_size="4MB")
    shards = sorted(p.name for p in tmp_path.glob("model-*-of-*.safetensors"))
    assert len(shards) > 1
    model.save_pretrained(tmp_path, max_shard_size="8MB")
    assert len(list(tmp_path.glob("model-*-of-*.safetensors"))) < len(shards)
    AutoModel.from_pretrained(tmp_path)


def test_spacy_to_disk_replaces_links_in_the_component_folder(tmp_path):
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(default_model_dir())}})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipeline")
    component = tmp_path / "pipeline" / "elmo"
    blobs = tmp_path / "blobs"
    shutil.copytree(component, blobs)
    shutil.rmtree(component)
    component.mkdir()
    for path in blobs.rglob("*"):
        if path.is_file():
            link = component / path.relative_to(blobs)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in blobs.rglob("*") if p.is_file()}
    _noisy(nlp.get_pipe("elmo").elmo)
    nlp.to_disk(tmp_path / "pipeline")
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in blobs.rglob("*") if p.is_file()} == before
    assert not any(p.is_symlink() for p in component.rglob("*"))
    loaded = spacy.load(tmp_path / "pipeline")
    assert torch.equal(
        loaded.get_pipe("elmo").elmo.bilm.char_cnn.projection.weight,
        nlp.get_pipe("elmo").elmo.bilm.char_cnn.projection.weight,
    )
