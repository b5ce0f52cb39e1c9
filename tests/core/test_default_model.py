"""The default model that ships inside the package."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from elmo_core import embed_sentences, load_model_folder
from elmo_core.files.model_folder import DEFAULT_MODEL_DIR, default_model_dir
from tests.conftest import data_file, missing_data

pytestmark = pytest.mark.skipif(
    not (DEFAULT_MODEL_DIR / "config.json").is_file(), reason="this checkout ships no default model"
)


def test_folder_is_complete_and_small():
    names = {p.name for p in default_model_dir().iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
        "vocab.txt",
        "lm_head.safetensors",
        "README.md",
        "eval_results.json",
    } <= names
    assert sum(p.stat().st_size for p in default_model_dir().iterdir()) < 30 * 2**20


def test_loads_offline_in_a_fresh_process_and_embeds_real_text():
    code = (
        "import elmo_core; from elmo_core.files.model_folder import default_model_dir; "
        "m = elmo_core.load_model_folder(default_model_dir(), dropout=0.0); "
        "v = elmo_core.embed_sentences(m, [['The', 'river', 'bank', 'flooded', '.']], layers='mix')[0]; "
        "print(v.shape, float(abs(v).sum()) > 0)"
    )
    env = {"HF_HUB_OFFLINE": "1", "PATH": "", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    dim = load_model_folder(default_model_dir()).output_dim
    assert out.stdout.split("\n")[0] == f"({5}, {dim}) True"


def test_vectors_are_contextual():
    model = load_model_folder(default_model_dir(), dropout=0.0)
    river, money = embed_sentences(
        model,
        [
            ["We", "sat", "on", "the", "bank", "of", "the", "river", "."],
            ["She", "asked", "the", "bank", "for", "a", "loan", "."],
        ],
        layers="all",
    )
    np.testing.assert_array_equal(river[0, 4], money[0, 3])  # layer 0 sees the word only
    assert np.abs(river[2, 4] - money[2, 3]).max() > 1e-3  # the LSTM layers read the sentence


@pytest.mark.slow
def test_perplexity_command_reproduces_the_model_card():
    test_file = data_file("lm/enwiki2015/test.txt.xz")
    if not test_file.is_file():
        pytest.skip(missing_data("lm/enwiki2015/test.txt.xz"))
    card = json.loads((default_model_dir() / "eval_results.json").read_text())["test"]
    from typer.testing import CliRunner

    from elmo_core.apps.cli import app

    result = CliRunner().invoke(app, ["perplexity", str(test_file)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    row = result.output.strip().split("\n")[-1].split("\t")
    assert [round(float(x), 2) for x in row[1:4]] == [
        round(card["forward_ppl"], 2),
        round(card["backward_ppl"], 2),
        round(card["average_ppl"], 2),
    ]
