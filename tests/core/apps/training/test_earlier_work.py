"""No command writes over an earlier run's work: `elmo train`, `widen`, `convert` and `data`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from elmo_core import save_model_folder
from elmo_core.apps.cli import app
from elmo_core.apps.training.model import save_language_model
from elmo_core.model.errors import ElmoError
from tests.conftest import make_tiny_elmo
from tests.core.apps.training.conftest import make_lm
from tests.core.apps.training.test_cli import elmo, train_args

runner = CliRunner()


def refused(*args) -> str:
    """The one-line ElmoError of an `elmo` command."""
    with pytest.raises(ElmoError) as info:
        runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    message = str(info.value)
    assert "\n" not in message
    return message


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(autouse=True)
def eager(monkeypatch):
    """torch's eager operators: the same numbers, without a first compile in the test."""
    monkeypatch.setenv("ELMO_COMPILE", "0")


def test_a_new_train_run_on_an_out_that_holds_a_run_is_refused_naming_resume_and_a_fresh_out(
    tmp_path, options_file, train_file, valid_file
):
    out = tmp_path / "run"
    elmo(*train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 2))
    before = snapshot(out)
    again = train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 3)
    message = refused(*again)
    assert message.startswith(f"--out {out} already holds another training run's files (")
    assert f"--resume {out / 'checkpoint.pt'}" in message and "a fresh --out" in message, message
    assert snapshot(out) == before  # the checkpoint, model and log untouched
    # A run resumed from another folder's checkpoint would overwrite this one's too.
    other = tmp_path / "other"
    elmo(*train_args(other, train_file, valid_file, "--options", options_file, "--max-steps", 1))
    message = refused("train", "--out", out, "--resume", other / "checkpoint.pt", "--max-steps", 3, "--no-progress")
    assert f"--out {other} --resume {other / 'checkpoint.pt'}" in message and "a fresh --out" in message, message
    assert snapshot(out) == before
    # Resuming the run in its own folder is what --resume is for.
    elmo("train", "--out", out, "--resume", out / "checkpoint.pt", "--max-steps", 3, "--no-progress")
    assert json.loads((out / "train_log.jsonl").read_text().splitlines()[-1])["step"] == 3


def test_a_train_out_without_a_checkpoint_is_refused_and_an_empty_one_is_used(
    tmp_path, options_file, train_file, valid_file
):
    out = tmp_path / "run"
    out.mkdir()
    (out / "train_log.jsonl").write_text('{"step": 5}\n')  # a run stopped before its first checkpoint
    message = refused(*train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 1))
    assert "(train_log.jsonl)" in message and "a fresh --out" in message and "no checkpoint.pt there" in message
    assert (out / "train_log.jsonl").read_text() == '{"step": 5}\n'
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.md").write_text("mine\n")  # not a file a run writes
    elmo(*train_args(empty, train_file, valid_file, "--options", options_file, "--max-steps", 1))
    assert (empty / "checkpoint.pt").is_file() and (empty / "notes.md").read_text() == "mine\n"


def test_widen_refuses_an_out_that_holds_a_model_folder(tmp_path, vocab):
    save_language_model(make_lm(vocab), vocab, tmp_path / "lm")
    save_language_model(make_lm(vocab, seed=1), vocab, tmp_path / "taken")
    before = snapshot(tmp_path / "taken")
    message = refused("widen", "--model", tmp_path / "lm", "--out", tmp_path / "taken", "--lstm-dim", 64,
                      "--projection-dim", 32)  # fmt: skip
    assert message.startswith(f"--out {tmp_path / 'taken'} already holds a model folder's files (")
    assert "a fresh --out" in message
    assert snapshot(tmp_path / "taken") == before


def test_convert_refuses_outputs_that_hold_a_model_or_exist(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    prefix = tmp_path / "tf"
    (tmp_path / "tf_weights.hdf5").write_bytes(b"earlier work")
    message = refused("convert", "--to-hdf5", tmp_path / "model", prefix)
    assert message == (
        f"OUT_PREFIX_weights.hdf5 {tmp_path / 'tf_weights.hdf5'} already exists, and this command would "
        "overwrite it. Give another OUT_PREFIX, or delete the old files first."
    )
    assert (tmp_path / "tf_weights.hdf5").read_bytes() == b"earlier work"
    assert not (tmp_path / "tf_options.json").exists()
    (tmp_path / "opts.json").write_text("{}")
    (tmp_path / "w.hdf5").write_bytes(b"")
    message = refused("convert", tmp_path / "opts.json", tmp_path / "w.hdf5", tmp_path / "model")
    assert message.startswith(f"OUT_DIR {tmp_path / 'model'} already holds a model folder's files (")
    assert "a fresh OUT_DIR" in message


def test_data_commands_refuse_an_out_that_exists(tmp_path, train_file):
    taken = tmp_path / "taken.txt"
    taken.write_text("earlier work\n")
    commands = [
        ["pretokenize", train_file, "--out", taken],
        ["vocab", train_file, "--out", taken, "--pretokenized"],
        ["hold-out", train_file, "--out-kept", taken, "--out-held-out", tmp_path / "held.txt"],
    ]
    for command in commands:
        message = refused("data", *command)
        assert message.endswith(f"{taken} already exists, and this command would overwrite it. Give a new path, "
                                "or delete the old file first.")  # fmt: skip
        assert taken.read_text() == "earlier work\n"
        assert not (tmp_path / "held.txt").exists()
