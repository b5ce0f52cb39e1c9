"""Fixtures for the pretraining tests: a tiny LM, a tiny corpus, written at test time."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from elmo_core import BiLMOptions
from elmo_core.apps.training.model import BiLMLanguageModel
from elmo_core.apps.training.vocab import Vocabulary
from elmo_core.model.options import CharCNNOptions, LSTMOptions

WORDS = "the cat sat on a mat and dog ran to big red house . , it was".split()


def make_lm_options() -> BiLMOptions:
    """A tiny biLM: char embedding 4, 32 filters, 1 highway, 2 layers of 32 cells projected to 16."""
    return BiLMOptions(
        char_cnn=CharCNNOptions(embedding_dim=4, filters=((1, 8), (2, 8), (3, 16)), n_highway=1),
        lstm=LSTMOptions(dim=32, projection_dim=16, n_layers=2),
    )


def make_corpus(num_sentences: int = 300, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(rng.randint(1, 12))] for _ in range(num_sentences)]


def write_lines(path: Path, sentences: list[list[str]]) -> Path:
    path.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    return path


def make_lm(vocab: Vocabulary, seed: int = 0, **kwargs) -> BiLMLanguageModel:
    torch.manual_seed(seed)
    return BiLMLanguageModel(make_lm_options(), len(vocab), **kwargs)


@pytest.fixture
def corpus() -> list[list[str]]:
    return make_corpus()


@pytest.fixture
def vocab(corpus) -> Vocabulary:
    return Vocabulary.build(corpus)


@pytest.fixture
def train_file(tmp_path, corpus) -> Path:
    return write_lines(tmp_path / "train.txt", corpus)


@pytest.fixture
def options_file(tmp_path) -> Path:
    """A tiny biLM's options.json (`make_lm_options`)."""
    path = tmp_path / "options.json"
    make_lm_options().to_json(path)
    return path


@pytest.fixture
def valid_file(tmp_path) -> Path:
    return write_lines(tmp_path / "valid.txt", make_corpus(40, seed=1))


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy CPU OpenMP's
    spinning threads can make a step 50x slower; one thread keeps the tests quick."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
