"""Smoke test of an installed wheel: each face of elmo-bilm on the default model that ships inside it.

.ci/run installs the wheel into a fresh virtual environment and runs this file there, from a temporary
folder, so the repository's own folders cannot be imported. A module, data file or entry point missing
from the wheel fails here. Each face is checked against the core's vectors for the same words.

Run: `VENV/bin/python .ci/smoke_test.py` (from any folder but the repository's).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything comes from the wheel: nothing from a hub

import numpy as np  # noqa: E402

WORDS = ["The", "river", "bank", "."]
ATOL = 1e-5  # a batch of one against a batch of two: float sums in another order, never another value


def check_installed_not_checked_out() -> Path:
    import elmo_core

    where = Path(elmo_core.__file__).resolve().parent
    assert where.name == "elmo_core" and "site-packages" in where.parts, f"elmo_core imported from {where}"
    return where


def check_core() -> np.ndarray:
    from elmo_core import embed_sentences, load_elmo

    elmo = load_elmo(dropout=0.0)
    vectors = embed_sentences(elmo, [WORDS, ["Hello", "!"]], layers="all")
    assert vectors[0].shape == (3, 4, 256) and vectors[0].dtype == np.float32, vectors[0].shape
    assert vectors[1].shape == (3, 2, 256), vectors[1].shape
    assert np.isfinite(vectors[0]).all()
    return vectors[0]


def check_cli(core_layers: np.ndarray, folder: Path) -> None:
    import h5py

    text = folder / "sentences.txt"
    text.write_text(" ".join(WORDS) + "\nHello !\n", encoding="utf-8")
    elmo = Path(sys.executable).with_name("elmo")  # the console script the wheel declares
    subprocess.run([str(elmo), "embed", str(text), str(folder / "vectors.hdf5"), "--no-progress"], check=True)
    with h5py.File(folder / "vectors.hdf5", "r") as out:
        assert sorted(out) == ["0", "1"], sorted(out)
        np.testing.assert_allclose(out["0"][()], core_layers, atol=ATOL)


def check_spacy(core_layers: np.ndarray) -> None:
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")  # found through the wheel's spacy_factories entry point
    doc = nlp(" ".join(WORDS))
    assert [t.text for t in doc] == WORDS
    np.testing.assert_allclose(doc._.elmo_layers, core_layers, atol=ATOL)


def check_hugging_face(core_layers: np.ndarray) -> np.ndarray:
    from transformers import AutoModel, AutoTokenizer

    import hf_elmo  # noqa: F401  (registers the Auto classes)
    from elmo_core.files.model_folder import default_model_dir

    folder = default_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(tokenizer).__name__ == "ElmoTokenizer", type(tokenizer)
    model = AutoModel.from_pretrained(folder).eval()
    batch = tokenizer([WORDS], is_split_into_words=True, return_tensors="pt")
    out = model(**batch, output_hidden_states=True)
    layers = np.stack([h[0].detach().numpy() for h in out.hidden_states])
    np.testing.assert_allclose(layers, core_layers, atol=ATOL)
    assert tuple(out.last_hidden_state.shape) == (1, 4, 256), out.last_hidden_state.shape
    return out.last_hidden_state[0].detach().numpy()


def check_feature_pipeline(model_output: np.ndarray) -> None:
    from transformers import pipeline

    import hf_elmo  # noqa: F401  (registers "elmo-feature-extraction")

    extractor = pipeline("elmo-feature-extraction")  # the default model's folder, from raw text
    vectors = np.asarray(extractor(" ".join(WORDS)))[0]
    np.testing.assert_allclose(vectors, model_output, atol=ATOL)  # the model's output, one row per word


def main() -> None:
    print("elmo_core installed at", check_installed_not_checked_out())
    core_layers = check_core()
    print("core: embed_sentences on the default model: ok")
    with tempfile.TemporaryDirectory() as folder:
        check_cli(core_layers, Path(folder))
    print("cli: elmo embed: ok")
    check_spacy(core_layers)
    print('spaCy: nlp.add_pipe("elmo"): ok')
    model_output = check_hugging_face(core_layers)
    print("Hugging Face: AutoModel and AutoTokenizer from the default model folder: ok")
    check_feature_pipeline(model_output)
    print('Hugging Face: pipeline("elmo-feature-extraction"): ok')


if __name__ == "__main__":
    main()
