"""Shared fixtures: tiny models built at test time, the AllenNLP fixture when present."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from elmo_core import BiLMOptions, CharCNNOptions, Elmo, LSTMOptions, save_bilm_tf

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURE_DIR = SHARED / "fixtures" / "allennlp_elmo"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_slow = pytest.mark.skip(reason="slow: run with --slow")
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "slow" in item.keywords and not config.getoption("--slow"):
            item.add_marker(skip_slow)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture
def fixture_dir() -> Path:
    """AllenNLP's ELMo test fixture in ../shared (skips when absent, e.g. in a user's clone)."""
    if not (FIXTURE_DIR / "lm_weights.hdf5").is_file():
        pytest.skip(f"AllenNLP fixture not found at {FIXTURE_DIR} (it lives in ../shared, not in the repo)")
    return FIXTURE_DIR


def make_tiny_options() -> BiLMOptions:
    """A tiny shape: char embedding 4, filters [[1,4],[2,8]], 1 highway,
    2 LSTM layers of cell size 16 with projection 8 (so vectors have 16 values)."""
    return BiLMOptions(
        char_cnn=CharCNNOptions(embedding_dim=4, filters=((1, 4), (2, 8)), n_highway=1),
        lstm=LSTMOptions(dim=16, projection_dim=8, n_layers=2),
    )


@pytest.fixture
def tiny_options() -> BiLMOptions:
    return make_tiny_options()


def make_tiny_elmo(seed: int = 0, **kwargs) -> Elmo:
    torch.manual_seed(seed)
    elmo = Elmo(make_tiny_options(), **kwargs)
    # Larger random weights than the default init, so that clips and gates are exercised.
    with torch.no_grad():
        for p in elmo.bilm.parameters():
            p.normal_(0.0, 0.5)
    return elmo.eval()


@pytest.fixture
def tiny_elmo() -> Elmo:
    return make_tiny_elmo(dropout=0.5)


@pytest.fixture
def sentences() -> list[list[str]]:
    return [
        ["hello", "my", "name", "is", "mud", "."],
        ["The", "river", "bank", "."],
        ["naïve", "😀", "中华人民共和国", "x" * 80],
        ["a"],
    ]


@pytest.fixture
def tiny_bilm_hdf5(tmp_path: Path) -> tuple[Path, Path]:
    """(options.json, weights.hdf5) of a random TINY model, written at test time."""
    elmo = make_tiny_elmo()
    options_path = tmp_path / "options.json"
    weights_path = tmp_path / "weights.hdf5"
    elmo.options.to_json(options_path)
    save_bilm_tf(elmo, weights_path)
    return options_path, weights_path
