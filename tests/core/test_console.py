"""What the library shows on standard error: progress bars and messages that are dropped
where stderr is closed, full or None, so that the work itself always gets done."""

from __future__ import annotations

import io
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from elmo_core import EmbedSettings, save_model_folder
from elmo_core.apps.cli import app
from elmo_core.apps.embed_file import embed_file

from ..conftest import make_tiny_elmo
from .training.conftest import make_corpus, make_lm, write_lines

runner = CliRunner()
ELMO = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
REDIRECTS = ["2>&-"] + (["2>/dev/full"] if Path("/dev/full").exists() else [])
"""Standard error closed (a daemon started with `2>&-`: Python sets `sys.stderr` to None), and
on a full device (every write fails with ENOSPC)."""


def shell(command: list[object], redirect: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `elmo ...` through the shell, with standard error redirected as `redirect` says."""
    line = " ".join(shlex.quote(str(a)) for a in [ELMO, *command]) + " " + redirect
    return subprocess.run(["sh", "-c", line], cwd=cwd, stdout=subprocess.PIPE, timeout=300, text=True)


def read_all(path: Path) -> dict[str, tuple[np.ndarray, list[str]]]:
    with h5py.File(path, "r") as f:
        return {name: (f[name][()], list(f[name].attrs["tokens"])) for name in f}


class FailingStream(io.TextIOBase):
    """A stderr whose every write and flush fails, as on a full disk."""

    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("redirect", REDIRECTS)
def test_embed_with_stderr_closed_or_full_writes_the_same_file_and_exits_0(tmp_path, redirect):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    write_lines(tmp_path / "in.txt", make_corpus(400))
    args = ["embed", tmp_path / "in.txt", tmp_path / "ref.h5", "--model", tmp_path / "model"]
    assert runner.invoke(app, list(map(str, args)), catch_exceptions=False).exit_code == 0  # with a stderr
    completed = shell(["embed", "in.txt", "out.h5", "--model", "model"], redirect, tmp_path)
    assert completed.returncode == 0
    expected, got = read_all(tmp_path / "ref.h5"), read_all(tmp_path / "out.h5")
    assert sorted(got) == sorted(expected) and len(got) == 400
    for name, (vectors, tokens) in expected.items():
        np.testing.assert_array_equal(got[name][0], vectors)
        assert got[name][1] == tokens
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "out.h5", "ref.h5"]  # no job folder left


def test_every_command_with_stderr_closed_does_its_work(tmp_path):
    from elmo_core.apps.training import Vocabulary
    from elmo_core.apps.training.model import save_language_model

    corpus = make_corpus(60)
    write_lines(tmp_path / "text.txt", corpus)
    vocab = Vocabulary.build(corpus)
    save_language_model(make_lm(vocab), vocab, tmp_path / "lm")
    (tmp_path / "tags.txt").write_text("".join(f"{w} {'X' if len(w) > 2 else 'Y'}\n" for w in corpus[0] + corpus[1]))
    make_lm(vocab).options.to_json(tmp_path / "options.json")
    commands = {
        "perplexity": (["perplexity", "text.txt", "--model", "lm", "--pretokenized"], None),
        "probe": (["probe", "tags.txt", "tags.txt", "--model", "lm", "--epochs", "1"], None),
        "vocab": (["data", "vocab", "text.txt", "--out", "vocab.txt", "--pretokenized"], "vocab.txt"),
        "convert": (["convert", "--to-hdf5", "lm", "bilm"], "bilm_weights.hdf5"),
        "train": (
            ["train", "--out", "run", "--train", "text.txt", "--options", "options.json", "--pretokenized"]
            + ["--max-steps", "2", "--prefetch", "0"],
            "run/checkpoint.pt",
        ),
    }
    for name, (command, output) in commands.items():
        completed = shell(command, "2>&-", tmp_path)
        assert completed.returncode == 0, name
        if output is not None:
            assert (tmp_path / output).is_file(), name
        else:
            assert completed.stdout.strip(), name  # the result, on stdout
    assert "average" in shell(commands["perplexity"][0], "2>&-", tmp_path).stdout


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_an_error_with_stderr_full_still_exits_2_and_writes_nothing(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "in.txt").write_bytes(b"caf\xe9\n")
    completed = shell(["embed", "in.txt", "out.h5", "--model", "model"], "2>/dev/full", tmp_path)
    assert completed.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model"]


@pytest.mark.parametrize("stderr", [None, FailingStream()], ids=["None", "full"])
def test_functions_with_progress_work_without_a_usable_stderr(tmp_path, monkeypatch, stderr):
    from elmo_core.apps.training import Vocabulary
    from elmo_core.apps.training.model import save_language_model
    from elmo_core.apps.training.commands import run_perplexity

    elmo = make_tiny_elmo()
    corpus = make_corpus(30)
    write_lines(tmp_path / "in.txt", corpus)
    vocab = Vocabulary.build(corpus)
    save_language_model(make_lm(vocab), vocab, tmp_path / "lm")
    expected = run_perplexity([tmp_path / "in.txt"], model=tmp_path / "lm", pretokenized=True)
    monkeypatch.setattr(sys, "stderr", stderr)
    result = embed_file(elmo, tmp_path / "in.txt", tmp_path / "out.h5", EmbedSettings(layers="top"), progress=True)
    assert result.lines == 30 and len(read_all(tmp_path / "out.h5")) == 30
    got = run_perplexity([tmp_path / "in.txt"], model=tmp_path / "lm", pretokenized=True, progress=True)
    assert got[0][1] == expected[0][1]
