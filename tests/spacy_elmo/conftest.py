"""Fixtures for the spaCy face: tiny model folders, pipelines with `elmo` (+ a listening NER)."""

from __future__ import annotations

from pathlib import Path

import pytest
import spacy
import torch
from spacy.language import Language
from spacy.training import Example

from elmo_core import save_model_folder

from ..conftest import data_file, make_tiny_elmo, missing_data

WIKIGOLD = data_file("ner/wikigold/wikigold.conll.txt")

DIM = 16  # TINY: 2 * projection_dim
NUM_LAYERS = 3  # char CNN layer + 2 LSTM layers

TRAIN_DATA = [
    ("Apple is a company in London .", [(0, 5, "ORG"), (22, 28, "LOC")]),
    ("Mary lives in Paris .", [(0, 4, "PER"), (14, 19, "LOC")]),
    ("Google hired John in Berlin .", [(0, 6, "ORG"), (13, 17, "PER"), (21, 27, "LOC")]),
]


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models run faster on one thread, and much faster on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A TINY model folder (seed 0), saved with Elmo's default dropout 0.5."""
    path = tmp_path_factory.mktemp("tiny_elmo")
    save_model_folder(make_tiny_elmo(dropout=0.5), path)
    return path


def make_nlp(model_dir: Path, **model_config) -> Language:
    """spacy.blank("en") + elmo loading `model_dir`."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(model_dir), **model_config}})
    return nlp


def ner_config(tok2vec: dict | None = None, **listener) -> dict:
    """A small spaCy NER whose tok2vec is an ELMo listener (or `tok2vec` if given)."""
    if tok2vec is None:
        tok2vec = {
            "@architectures": "spacy-elmo.ElmoListener.v2",
            "upstream": "elmo",
            "tok2vec": hash_embed_cnn(),
            **listener,
        }
    return {
        "model": {
            "@architectures": "spacy.TransitionBasedParser.v2",
            "state_type": "ner",
            "extra_state_tokens": False,
            "hidden_width": 32,
            "maxout_pieces": 2,
            "use_upper": True,
            "tok2vec": tok2vec,
        }
    }


def hash_embed_cnn() -> dict:
    return {
        "@architectures": "spacy.HashEmbedCNN.v2",
        "pretrained_vectors": None,
        "width": 32,
        "depth": 1,
        "embed_size": 500,
        "window_size": 1,
        "maxout_pieces": 3,
        "subword_features": True,
    }


def examples(nlp: Language) -> list[Example]:
    return [Example.from_dict(nlp.make_doc(text), {"entities": ents}) for text, ents in TRAIN_DATA]


def make_ner_nlp(model_dir: Path, steps: int = 2, annotates: bool = True) -> Language:
    """elmo + a listening NER, initialised and trained for `steps` updates."""
    nlp = make_nlp(model_dir)
    nlp.add_pipe("ner", config=ner_config())
    optimizer = nlp.initialize(lambda: examples(nlp))
    for _ in range(steps):
        nlp.update(examples(nlp), sgd=optimizer, annotates=["elmo"] if annotates else [])
    return nlp


@pytest.fixture
def nlp(tiny_model_dir) -> Language:
    return make_nlp(tiny_model_dir)


@pytest.fixture
def wikigold() -> Path:
    if not WIKIGOLD.is_file():
        pytest.skip(missing_data("ner/wikigold/wikigold.conll.txt"))
    return WIKIGOLD
