"""`elmo train` as a user runs it, in its own process: Ctrl-C, and what it writes on stderr."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest
import torch
from typer.testing import CliRunner

from elmo_core.apps.cli import app
from elmo_core.apps.training.checkpoint import load_checkpoint_file

runner = CliRunner()


@pytest.fixture(autouse=True)
def eager(monkeypatch):
    """torch's eager operators here and in the child process: the same code on both sides of
    an exact comparison, and no first compile in the test."""
    monkeypatch.setenv("ELMO_COMPILE", "0")


def start_train(*args, stderr=subprocess.PIPE) -> subprocess.Popen:
    """`python -m elmo_core train ARGS` on one thread (as this process's tests run)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ELMO_COMPILE": "0"}
    command = [sys.executable, "-m", "elmo_core", "train", *map(str, args)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, text=True, env=env)


def rows(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]


def test_ctrl_c_saves_an_exact_resume_checkpoint_and_prints_the_command_that_resumes(
    tmp_path, options_file, train_file
):
    out = tmp_path / "run"
    common = ["--train", train_file, "--pretokenized", "--batch-tokens", 64, "--log-every", 1, "--no-progress"]
    first = start_train("--out", out, "--options", options_file, *common, "--max-steps", 100_000)
    try:
        for _ in range(6000):  # until it has trained 3 steps (no checkpoint yet: --checkpoint-every 1000)
            if first.poll() is not None or ((out / "train_log.jsonl").is_file() and len(rows(out)) >= 3):
                break
            time.sleep(0.05)
        assert first.poll() is None, first.communicate()[1]
        first.send_signal(signal.SIGINT)
        _, stderr = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, stderr
    step = load_checkpoint_file(out / "checkpoint.pt")["step"]
    assert step >= 3
    last = stderr.strip().splitlines()[-1]
    expected = f"interrupted at step {step}: saved {out / 'checkpoint.pt'}; resume with: "
    assert last.startswith(expected), stderr
    resume = shlex.split(last[len(expected) :])
    assert resume[:2] == ["elmo", "train"] and resume[resume.index("--max-steps") + 1] == "100000"
    assert "stopping after this step to save a checkpoint" in stderr
    # The printed command, to a nearer stop, continues exactly as a run that was never interrupted.
    resume[resume.index("--max-steps") + 1] = str(step + 3)
    result = runner.invoke(app, resume[1:], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    straight = tmp_path / "straight"
    result = runner.invoke(
        app,
        [str(a) for a in ["train", "--out", straight, "--options", options_file, *common, "--max-steps", step + 3]],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    resumed, expected_state = (
        load_checkpoint_file(out / "checkpoint.pt"),
        load_checkpoint_file(straight / "checkpoint.pt"),
    )
    assert resumed["step"] == expected_state["step"] == step + 3
    for name, value in expected_state["model"].items():
        assert torch.equal(resumed["model"][name], value), name
    after = {r["step"]: r["train_ppl"] for r in rows(out) if r["step"] > step}
    assert after == {r["step"]: r["train_ppl"] for r in rows(straight) if r["step"] > step}  # exactly


def test_train_log_lines_are_readable_and_never_run_into_the_progress_bar(tmp_path, options_file, train_file):
    out = tmp_path / "run"
    args = ["--out", out, "--options", options_file, "--train", train_file, "--pretokenized", "--batch-tokens", 64]
    done = start_train(*args, "--max-steps", 4, "--log-every", 2, "--progress")
    _, stderr = done.communicate(timeout=300)
    assert done.returncode == 0, stderr
    pieces = re.split(r"[\r\n]", stderr)  # what a terminal shows: the bar is redrawn after each \r
    logged = [p for p in pieces if "step 2 " in p]
    assert len(logged) == 1, stderr
    row = rows(out)[0]
    assert row["step"] == 2 and row["train_ppl"] != round(row["train_ppl"], 3)  # the file keeps every digit
    pattern = (
        rf"step 2  loss {math.log(row['train_ppl']):.3f}  ppl {row['train_ppl']:.1f}  lr 0\.001  "
        r"words/s [\d,]+  elapsed 0:00:\d\d"
    )
    assert re.fullmatch(pattern, logged[0]), logged[0]
