"""Sizes from a model's config are checked against its weights before anything is allocated, in every face.

A copy of the default model whose config.json (or options.json, for bilm-tf files) declares
absurd sizes is loaded by the core, `elmo embed`, spaCy and `AutoModel` in a process whose
address space is capped at what it uses after its imports plus 1.5 GiB (a normal load of the
default model needs about 60 MB more). Each face refuses in one line that names the file, the
tensor (or dataset) and both shapes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from elmo_core import default_model_dir, read_options

pytest.importorskip("spacy")
pytest.importorskip("transformers")

_CAPPED = r"""
import resource

def vm_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024

def cap_address_space():  # what the imports took, plus 1.5 GiB
    cap = vm_bytes() + 3 * 2**29
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
"""

_SCRIPT = (
    _CAPPED
    + r"""
import contextlib, io, json, sys
import spacy, transformers
import hf_elmo
from elmo_core import load_elmo, load_model_folder
from elmo_core.apps.cli import main
cap_address_space()
cases, text = json.loads(sys.argv[1]), sys.argv[2]
results = []
for case in cases:
    for face in case["faces"]:
        err = io.StringIO()
        try:
            pair = ["--options", case.get("options"), "--weights", case.get("weights")]
            if face == "core":
                load_elmo(case.get("folder"), case.get("options"), case.get("weights"))
            elif face == "cli":
                model = ["--model", case["folder"]] if "folder" in case else pair
                sys.argv = ["elmo", "embed", text, case["out"], *model]
                with contextlib.redirect_stderr(err):
                    main()
            elif face == "spacy":
                nlp = spacy.blank("en")
                nlp.add_pipe("elmo", config={"model": {"path": case["folder"]}})
                nlp.initialize()
            elif face == "hf":
                transformers.AutoModel.from_pretrained(case["folder"])
            results.append([case["name"], face, "loaded", ""])
        except SystemExit as stop:
            results.append([case["name"], face, f"exit {stop.code}", err.getvalue()])
        except BaseException as exc:
            results.append([case["name"], face, type(exc).__name__, str(exc)])
print(json.dumps(results))
"""
)


def _folder(tmp_path: Path, name: str, change) -> Path:
    folder = tmp_path / name
    shutil.copytree(default_model_dir(), folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    change(config)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def refusals(tmp_path_factory) -> dict[tuple[str, str], tuple[str, str]]:
    from elmo_core import load_model_folder, save_bilm_tf

    tmp_path = tmp_path_factory.mktemp("sizes")
    faces = ["core", "cli", "spacy", "hf"]
    cases = []
    for name, key, value in (("dim_1e9", "dim", 10**9), ("dim_2e5", "dim", 200_000), ("layers_1e5", "n_layers", 10**5)):
        folder = _folder(tmp_path, name, lambda c, k=key, v=value: c["lstm"].update({k: v}))
        cases.append({"name": name, "folder": str(folder), "out": str(tmp_path / f"{name}.h5"), "faces": faces})
    weights = tmp_path / "weights.hdf5"
    save_bilm_tf(load_model_folder(default_model_dir()), weights)
    options = read_options(default_model_dir() / "config.json").to_dict()
    options["lstm"]["dim"] = 200_000
    (tmp_path / "options.json").write_text(json.dumps(options), encoding="utf-8")
    cases.append(
        {
            "name": "pair_dim_2e5",
            "options": str(tmp_path / "options.json"),
            "weights": str(weights),
            "out": str(tmp_path / "pair.h5"),
            "faces": ["core", "cli"],
        }
    )
    text = tmp_path / "in.txt"
    text.write_text("the river bank\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(cases), str(text)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {(case, face): (kind, message) for case, face, kind, message in json.loads(done.stdout.splitlines()[-1])}


@pytest.mark.parametrize("face", ["core", "cli", "spacy", "hf"])
@pytest.mark.parametrize("case", ["dim_1e9", "dim_2e5"])
def test_a_config_declaring_absurd_sizes_is_refused_before_allocating_in_every_face(refusals, case, face):
    kind, message = refusals[(case, face)]
    dim = 10**9 if case == "dim_1e9" else 200_000
    assert kind == ("exit 2" if face == "cli" else "WeightFileError"), (kind, message)
    assert "tensor 'bilm." in message and "has shape (2048, 128), but config.json implies" in message
    assert f"({4 * dim}, 128)" in message
    assert message.strip().count("\n") == 0  # one line


@pytest.mark.parametrize("face", ["core", "cli", "spacy", "hf"])
def test_a_config_declaring_more_layers_than_the_weights_hold_is_refused_before_building(refusals, face):
    kind, message = refusals[("layers_1e5", face)]
    assert kind == ("exit 2" if face == "cli" else "WeightFileError"), (kind, message)
    assert "config.json declares lstm.n_layers = 100000, but" in message and "holds 2" in message


@pytest.mark.parametrize("face", ["core", "cli"])
def test_bilm_tf_options_declaring_absurd_sizes_are_refused_before_allocating(refusals, face):
    kind, message = refusals[("pair_dim_2e5", face)]
    assert kind == ("exit 2" if face == "cli" else "WeightFileError"), (kind, message)
    assert "options.json) imply (256, 800000)" in message and "has shape (256, 2048)" in message


_REMOTE = (
    _CAPPED
    + r"""
import sys
import transformers
cap_address_space()
try:
    transformers.AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True)
    print("loaded")
except BaseException as exc:
    print(type(exc).__name__, str(exc))
assert "hf_elmo" not in sys.modules and "elmo_core" not in sys.modules  # the folder's own code ran
"""
)


def test_a_saved_folders_own_code_refuses_absurd_sizes_before_allocating(tmp_path):
    from transformers import AutoModel

    import hf_elmo  # noqa: F401

    AutoModel.from_pretrained(default_model_dir()).save_pretrained(tmp_path / "saved")
    config = json.loads((tmp_path / "saved" / "config.json").read_text(encoding="utf-8"))
    assert "auto_map" in config
    config["lstm"]["dim"] = 200_000
    (tmp_path / "saved" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", _REMOTE, str(tmp_path / "saved")],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("ValueError ") and "model.safetensors: tensor 'bilm." in last
    assert re.search(r"has shape \(2048(, 128)?,?\), but config.json implies \(800000(, 128)?,?\)", last), last


def test_character_slots_no_weight_depends_on_are_bounded_in_every_face(tmp_path):
    """`max_characters_per_token` sets no weight's shape, so it cannot be checked against the weights:
    a value past any model's (10 million slots would take 80 MB a token) is refused where it is read."""
    from elmo_core import OptionsError, load_model_folder

    folder = _folder(tmp_path, "chars", lambda c: c["char_cnn"].update({"max_characters_per_token": 10**7}))
    with pytest.raises(OptionsError, match=r"max_characters_per_token must be 3 to 1024 .* got 10000000"):
        load_model_folder(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["max_characters_per_token"] = 10**7
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    from transformers import AutoTokenizer

    import hf_elmo  # noqa: F401

    with pytest.raises(ValueError, match=r"max_characters_per_token must be an integer from 3 to 1024; got 10000000"):
        AutoTokenizer.from_pretrained(folder)
