"""Fixtures for the Hugging Face face: tiny saved models, an offline, private HF cache."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

# Before transformers is imported: never touch the network, and keep the modules that
# trust_remote_code loads out of the user's cache (transformers reads these at import).
os.environ["HF_HUB_OFFLINE"] = "1"
_MODULES_CACHE = tempfile.mkdtemp(prefix="elmo-hf-modules-")
atexit.register(shutil.rmtree, _MODULES_CACHE, ignore_errors=True)
os.environ.setdefault("HF_MODULES_CACHE", _MODULES_CACHE)

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import hf_elmo  # noqa: E402,F401  (registers the Auto classes)
from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer  # noqa: E402

from ..conftest import data_file, make_tiny_elmo  # noqa: E402

TOKENS = [["Hello", "world", "."], ["naïve", "😀"], ["a"]]
WIKIGOLD = data_file("ner/wikigold/wikigold.conll.txt")


def read_conll(path: Path, limit: int) -> list[list[tuple[str, str]]]:
    """The first `limit` sentences of a two-column CoNLL file, as (word, tag) pairs."""
    sentences, current = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("-DOCSTART-"):
                if current:
                    sentences.append(current)
                    current = []
                if len(sentences) == limit:
                    break
                continue
            word, tag = line.rsplit(" ", 1)
            current.append((word, tag))
    return sentences


def make_tiny_hf_model(seed: int = 0, **settings) -> ElmoModel:
    """An `ElmoModel` holding exactly the weights of the core's TINY `make_tiny_elmo(seed)`."""
    settings.setdefault("dropout", 0.0)
    core = make_tiny_elmo(seed, **settings)
    model = ElmoModel(ElmoConfig.from_options(core.options, **settings))
    model.load_state_dict(core.state_dict())
    return model.eval()


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy machine OpenMP's
    waiting threads made these tests 10-30x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def hf_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a subprocess: offline, its own HF cache, one thread."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf_home"),
        HF_MODULES_CACHE=str(tmp_path / "hf_modules"),
        OMP_NUM_THREADS="1",
    )
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture
def tiny_hf_model() -> ElmoModel:
    return make_tiny_hf_model()


@pytest.fixture
def tiny_tokenizer() -> ElmoTokenizer:
    return ElmoTokenizer.from_options(make_tiny_elmo().options)


@pytest.fixture
def saved_model_dir(tmp_path: Path, tiny_hf_model: ElmoModel, tiny_tokenizer: ElmoTokenizer) -> Path:
    """A folder written by save_pretrained (model + tokenizer)."""
    folder = tmp_path / "saved"
    tiny_hf_model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


def batch(tokenizer: ElmoTokenizer, sentences=TOKENS) -> dict[str, torch.Tensor]:
    return dict(tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt"))


# Put before a script run with `python -I -S`: no site-packages processing (so no
# editable-install hook), no PYTHONPATH, no current folder; only the site-packages
# folders passed as the first argument. So transformers, torch and spaCy import, and
# elmo-bilm's packages do not (a finder refuses them, which also holds for a
# non-editable install), nor is its distribution metadata visible (its entry points
# would make spaCy or the tokenizer import spacy_elmo), as where the package was never
# installed. The script then sees its own arguments from sys.argv[1] on.
WITHOUT_ELMO_BILM = r"""
import importlib.abc, importlib.metadata, json, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("elmo_core", "hf_elmo", "spacy_elmo"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
sys.path.extend(json.loads(sys.argv.pop(1)))
_discover = importlib.metadata.Distribution.discover.__func__
importlib.metadata.Distribution.discover = classmethod(
    lambda cls, **kw: (d for d in _discover(cls, **kw) if d.metadata["Name"] != "elmo-bilm"))
for name in ("elmo_core", "hf_elmo", "spacy_elmo"):
    try:
        __import__(name)
    except ModuleNotFoundError:
        continue
    raise AssertionError(f"{name} must not be importable here")
assert not importlib.metadata.entry_points(group="elmo_core.tokenizers")
"""


def run_script(
    script: str, args: list, env: dict[str, str], cwd: Path, *, without_elmo_bilm: bool
) -> subprocess.CompletedProcess:
    """Run `script` in a fresh interpreter, optionally one where elmo-bilm is not installed.

    Without `without_elmo_bilm`, the interpreter is this environment's, which has
    elmo-bilm installed (the script decides whether it imports hf_elmo).
    """
    path = cwd / "script.py"
    if without_elmo_bilm:
        site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
        path.write_text(WITHOUT_ELMO_BILM + script, encoding="utf-8")
        command = [sys.executable, "-I", "-S", str(path), json.dumps(site)]
    else:
        path.write_text(script, encoding="utf-8")
        command = [sys.executable, str(path)]
    return subprocess.run([*command, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
