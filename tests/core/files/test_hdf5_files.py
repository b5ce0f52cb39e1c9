"""hdf5 files that another process holds open: reported as locked, with the way out, never as damaged."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from elmo_core import WeightFileError, embed_sentences, load_elmo, save_model_folder
from elmo_core.files.hdf5_files import hdf5_lock_error
from tests.conftest import make_tiny_elmo

HOLDER = """
import sys, time, h5py
handle = h5py.File(sys.argv[1], "a")
print("open", flush=True)
time.sleep(120)
"""

ADVICE_OF_A_DAMAGED_FILE = ("truncated", "download", "convert it again", "damaged (")


@contextmanager
def held_open(path: Path) -> Iterator[None]:
    """Another process holds `path` open for writing (h5py mode "a"), as a notebook or a writer does."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.strip() == "open", holder.stderr.read() if holder.stderr else line
        yield
    finally:
        holder.kill()
        holder.communicate(timeout=30)


def assert_says_locked(message: str, path: Path) -> None:
    assert str(path) in message
    assert "locked by another process" in message
    assert "HDF5_USE_FILE_LOCKING=FALSE" in message and "Close that process" in message
    assert not any(word in message for word in ADVICE_OF_A_DAMAGED_FILE), message


def test_loading_weights_another_process_holds_open_says_locked_not_truncated(tiny_bilm_hdf5):
    options, weights = tiny_bilm_hdf5
    with held_open(weights), pytest.raises(WeightFileError) as caught:
        load_elmo(options=options, weights=weights)
    assert_says_locked(str(caught.value), weights)
    # The file was intact all along: once the other process is gone it loads, with its vectors.
    loaded = load_elmo(options=options, weights=weights, dropout=0.0)
    expected = embed_sentences(make_tiny_elmo(dropout=0.0), [["a", "bank"]])[0]
    np.testing.assert_allclose(embed_sentences(loaded, [["a", "bank"]])[0], expected, atol=1e-6, rtol=0)


def test_elmo_embed_with_weights_another_process_holds_says_locked_in_one_line(tiny_bilm_hdf5, tmp_path):
    options, weights = tiny_bilm_hdf5
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    exe = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
    args = [exe, "embed", tmp_path / "in.txt", tmp_path / "out.hdf5", "--options", options, "--weights", weights]
    with held_open(weights):
        result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert_says_locked(lines[0], weights)
    assert not (tmp_path / "out.hdf5").exists()


def test_locked_weights_load_with_hdf5_file_locking_off_as_the_error_advises(tiny_bilm_hdf5):
    options, weights = tiny_bilm_hdf5
    script = (
        "import sys, torch; from elmo_core import load_elmo, embed_sentences; "
        "elmo = load_elmo(options=sys.argv[1], weights=sys.argv[2], dropout=0.0); "
        "torch.save(torch.from_numpy(embed_sentences(elmo, [['a', 'bank']])[0]), sys.argv[3])"
    )
    out = weights.with_name("vectors.pt")
    env = {**os.environ, "HDF5_USE_FILE_LOCKING": "FALSE"}
    with held_open(weights):
        done = subprocess.run(
            [sys.executable, "-c", script, options, weights, out], capture_output=True, text=True, env=env, timeout=120
        )
    assert done.returncode == 0, done.stderr
    expected = embed_sentences(make_tiny_elmo(dropout=0.0), [["a", "bank"]])[0]
    np.testing.assert_allclose(torch.load(out).numpy(), expected, atol=1e-6, rtol=0)


def test_embed_output_another_process_holds_open_is_replaced(tmp_path):
    """OUTPUT (replaced on purpose) is written under another name and renamed over the old file,
    whose reader keeps the old one."""
    from elmo_core.apps.embed_file import embed_file

    elmo = make_tiny_elmo(dropout=0.0)
    (tmp_path / "in.txt").write_text("a b c\nd\n", encoding="utf-8")
    output = tmp_path / "out.hdf5"
    with h5py.File(output, "w") as old:
        old["old"] = np.zeros(2)
    with held_open(output):
        embed_file(elmo, tmp_path / "in.txt", output, overwrite=True)
    with h5py.File(output, "r") as new:
        assert sorted(new) == ["0", "1"]
        np.testing.assert_allclose(new["1"][()], embed_sentences(elmo, [["d"]])[0], atol=1e-6, rtol=0)


def test_convert_to_hdf5_over_weights_another_process_holds_open_refuses_and_leaves_them(tmp_path):
    # An existing output is earlier work: refused in one line before any write, held open or not.
    from typer.testing import CliRunner

    from elmo_core.apps.cli import app

    elmo = make_tiny_elmo(dropout=0.0)
    save_model_folder(elmo, tmp_path / "model")
    weights = tmp_path / "out_weights.hdf5"
    with h5py.File(weights, "w") as old:
        old["old"] = np.arange(2.0)
    with held_open(weights):
        done = CliRunner().invoke(app, ["convert", "--to-hdf5", str(tmp_path / "model"), str(tmp_path / "out")])
    assert done.exit_code != 0 and "already exists, and this command would overwrite it" in str(done.exception)
    with h5py.File(weights, "r") as kept:
        assert list(kept) == ["old"] and kept["old"][()].tolist() == [0.0, 1.0]


@pytest.mark.parametrize("mode", ["r", "w"])
def test_a_lock_the_file_system_refuses_names_the_setting(mode):
    err = OSError(errno.ENOSYS, "Unable to synchronously open file (unable to lock file, errno = 38, ...)")
    message = str(hdf5_lock_error("w.hdf5", mode, err))
    assert "does not support HDF5's file locks" in message and "HDF5_USE_FILE_LOCKING=FALSE" in message


def test_other_open_errors_are_not_called_locked():
    err = OSError(None, "Unable to synchronously open file (file signature not found)")
    assert hdf5_lock_error("w.hdf5", "r", err) is None
