"""What the library shows on standard error: progress bars and messages that are dropped
where stderr is closed, full or None, so that the work itself always gets done."""

from __future__ import annotations

import io
import json
import os
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
from tests.conftest import make_tiny_elmo
from tests.core.apps.training.conftest import make_corpus, make_lm, write_lines

runner = CliRunner()
ELMO = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
REDIRECTS = ["2>&-"] + (["2>/dev/full"] if Path("/dev/full").exists() else [])
"""Standard error closed (a daemon started with `2>&-`: Python sets `sys.stderr` to None), and
on a full device (every write fails with ENOSPC)."""


def read_all(path: Path) -> dict[str, tuple[np.ndarray, list[str]]]:
    with h5py.File(path, "r") as f:
        return {name: (f[name][()], list(f[name].attrs["tokens"])) for name in f}


class FailingStream(io.TextIOBase):
    """A stderr whose every write and flush fails, as on a full disk."""

    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        raise OSError(28, "No space left on device")


def test_embed_with_stderr_closed_writes_the_same_file_and_exits_0(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    write_lines(tmp_path / "in.txt", make_corpus(400))
    args = ["embed", tmp_path / "in.txt", tmp_path / "ref.h5", "--model", tmp_path / "model"]
    assert runner.invoke(app, list(map(str, args)), catch_exceptions=False).exit_code == 0  # with a stderr
    line = f"{shlex.quote(ELMO)} embed in.txt out.h5 --model model 2>&-"
    assert subprocess.run(["sh", "-c", line], cwd=tmp_path, timeout=300).returncode == 0
    expected, got = read_all(tmp_path / "ref.h5"), read_all(tmp_path / "out.h5")
    assert sorted(got) == sorted(expected) and len(got) == 400
    for name, (vectors, tokens) in expected.items():
        np.testing.assert_array_equal(got[name][0], vectors)
        assert got[name][1] == tokens
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "out.h5", "ref.h5"]  # no job folder left


COMMANDS = """
import json, sys
from elmo_core.apps.cli import main

for argv in json.loads(sys.argv[1]):
    sys.argv = ["elmo", *argv]
    try:
        main()
        code = 0
    except SystemExit as stop:
        code = stop.code or 0
    print(code, flush=True)
"""
"""Runs `elmo` commands one after the other in one process (each is `main()`, as the console
script runs it) and prints their exit statuses: one process start for them all."""


@pytest.mark.parametrize("redirect", REDIRECTS)
def test_every_command_with_stderr_closed_or_full_does_its_work(tmp_path, redirect):
    from elmo_core.apps.training.model import save_language_model
    from elmo_core.apps.training.vocab import Vocabulary

    corpus = make_corpus(60)
    write_lines(tmp_path / "text.txt", corpus)
    vocab = Vocabulary.build(corpus)
    save_language_model(make_lm(vocab), vocab, tmp_path / "lm")
    (tmp_path / "tags.txt").write_text("".join(f"{w} {'X' if len(w) > 2 else 'Y'}\n" for w in corpus[0] + corpus[1]))
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9\n")
    make_lm(vocab).options.to_json(tmp_path / "options.json")
    args = ["embed", tmp_path / "text.txt", tmp_path / "ref.h5", "--model", tmp_path / "lm", "--layers", "top"]
    assert runner.invoke(app, list(map(str, args)), catch_exceptions=False).exit_code == 0  # with a stderr
    commands = [
        ["embed", "text.txt", "out.h5", "--model", "lm", "--layers", "top"],
        ["perplexity", "text.txt", "--model", "lm", "--pretokenized"],
        ["probe", "tags.txt", "tags.txt", "--model", "lm", "--epochs", "1"],
        ["data", "vocab", "text.txt", "--out", "vocab.txt", "--pretokenized"],
        ["convert", "--to-hdf5", "lm", "bilm"],
        ["train", "--out", "run", "--train", "text.txt", "--options", "options.json", "--pretokenized"]
        + ["--max-steps", "2"],
        ["embed", "latin1.txt", "bad.h5", "--model", "lm"],  # an error: exit 2, its line dropped
    ]
    line = f"{shlex.quote(sys.executable)} -c {shlex.quote(COMMANDS)} {shlex.quote(json.dumps(commands))} {redirect}"
    env = {**os.environ, "ELMO_COMPILE": "0"}
    completed = subprocess.run(["sh", "-c", line], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert completed.returncode == 0
    statuses = [line for line in completed.stdout.splitlines() if line in ("0", "1", "2")]
    assert statuses == ["0"] * 6 + ["2"], completed.stdout
    assert "average" in completed.stdout and "majority label" in completed.stdout  # perplexity's and probe's tables
    for output in ("vocab.txt", "bilm_weights.hdf5", "run/checkpoint.pt"):
        assert (tmp_path / output).is_file(), output
    expected, got = read_all(tmp_path / "ref.h5"), read_all(tmp_path / "out.h5")
    assert sorted(got) == sorted(expected)
    for name, (vectors, _) in expected.items():
        np.testing.assert_array_equal(got[name][0], vectors)
    assert not list(tmp_path.glob("*.partial")) and not (tmp_path / "bad.h5").exists()


@pytest.mark.parametrize("stderr", [None, FailingStream()], ids=["None", "full"])
def test_functions_with_progress_work_without_a_usable_stderr(tmp_path, monkeypatch, stderr):
    from elmo_core.apps.training.commands import run_perplexity
    from elmo_core.apps.training.model import save_language_model
    from elmo_core.apps.training.vocab import Vocabulary

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


def test_an_empty_input_draws_no_progress_bar(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    args = ["embed", tmp_path / "empty.txt", tmp_path / "out.h5", "--model", tmp_path / "model"]
    result = runner.invoke(app, list(map(str, args)), catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        f"warning: INPUT {tmp_path / 'empty.txt'} is empty; OUTPUT holds no sentences.",
        f"wrote 0 lines (0 tokens) to {tmp_path / 'out.h5'}",
    ]


def test_a_progress_bar_is_drawn_on_a_usable_stderr_and_goes_quiet_when_writes_fail(monkeypatch):
    from elmo_core.apps.console import progress_bar

    drawn = io.StringIO()
    monkeypatch.setattr(sys, "stderr", drawn)
    with progress_bar(3, unit="tok") as bar:
        bar.update(3)
    assert "3/3" in drawn.getvalue()
    failing = FailingStream()
    monkeypatch.setattr(sys, "stderr", failing)
    with progress_bar(3, unit="tok") as bar:  # draws, fails, and the count goes on
        bar.update(2)
        bar.update(1)
    assert bar.n == 3
    monkeypatch.setattr(sys, "stderr", None)
    assert progress_bar(3, unit="tok").disable
