from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from typer.testing import CliRunner

from elmo_core import load_model_folder
from elmo_core.apps.cli import app
from elmo_core.apps.training.commands import run_perplexity, run_training
from elmo_core.apps.training.data import TrainingStream
from elmo_core.apps.training.model import load_language_model
from elmo_core.apps.training.settings import TrainingSettings
from elmo_core.model.errors import ElmoError, WeightFileError
from tests.core.apps.training.conftest import make_lm_options

runner = CliRunner()


def elmo(*args) -> str:
    result = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def train_args(out, train_file, valid_file, *more):
    return [
        "train",
        "--out",
        out,
        "--train",
        train_file,
        "--valid",
        valid_file,
        "--pretokenized",
        "--batch-tokens",
        64,
        "--no-progress",
        "--checkpoint-every",
        2,
        "--validate-every",
        2,
        *more,
    ]


def test_train_writes_a_model_folder_that_perplexity_scores(tmp_path, options_file, train_file, valid_file):
    out = tmp_path / "model"
    elmo(*train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 3, "--vocab-size", 12))
    elmo_model = load_model_folder(out)  # the embedding side loads it as is
    assert elmo_model.options == make_lm_options()
    assert {"vocab.txt", "lm_head.safetensors", "checkpoint.pt", "train_log.jsonl"} <= {p.name for p in out.iterdir()}
    rows = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["valid_ppl"] is not None] == [2, 3]

    printed = elmo("perplexity", "--model", out, "--pretokenized", valid_file).splitlines()
    assert printed[0].split("\t")[:4] == ["file", "forward_ppl", "backward_ppl", "average_ppl"]
    forward, backward, average = map(float, printed[1].split("\t")[1:4])
    [(_, expected)] = run_perplexity([valid_file], model=out, pretokenized=True)
    assert (forward, backward, average) == (
        round(expected.forward, 3),
        round(expected.backward, 3),
        round(expected.average, 3),
    )
    assert average == pytest.approx(rows[-1]["valid_ppl"], rel=1e-3)  # same text, same model
    assert 1 < average < 12 * 3


def test_train_resumes_and_continues_from_a_model_folder(tmp_path, options_file, train_file, valid_file):
    out = tmp_path / "run"
    elmo(*train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 2))
    elmo(
        "train",
        "--out",
        out,
        "--resume",
        out / "checkpoint.pt",
        "--valid",
        valid_file,
        "--max-steps",
        4,
        "--no-progress",
    )
    assert json.loads((out / "train_log.jsonl").read_text().splitlines()[-1])["step"] == 4
    _, vocab, _ = load_language_model(out)
    more = tmp_path / "more"
    elmo(*train_args(more, train_file, valid_file, "--model", out, "--max-steps", 1))
    lm, more_vocab, _ = load_language_model(more)
    assert more_vocab == vocab


def test_a_resumed_run_keeps_its_learning_rate_or_takes_a_new_one_for_good(
    tmp_path, options_file, train_file, valid_file
):
    out = tmp_path / "run"
    elmo(*train_args(out, train_file, valid_file, "--options", options_file, "--lr", 0.002, "--max-steps", 2))
    resume = ["train", "--out", out, "--resume", out / "checkpoint.pt", "--no-progress", "--log-every", 1]
    elmo(*resume, "--max-steps", 3)  # no --lr: the checkpoint's
    elmo(*resume, "--max-steps", 4, "--lr", 0.0005)  # a lower rate from here on
    elmo(*resume, "--max-steps", 5)  # no --lr: the checkpoint's, which is now the lower one
    rows = {r["step"]: r for r in map(json.loads, (out / "train_log.jsonl").read_text().splitlines())}
    assert [rows[step]["lr"] for step in (2, 3, 4, 5)] == [0.002, 0.002, 0.0005, 0.0005]


def test_a_resumed_run_takes_lr_halving_from_its_checkpoint_or_its_command(
    tmp_path, options_file, train_file, valid_file
):
    out = tmp_path / "run"
    start = ("--options", options_file, "--lr", 0.002, "--validate-every", 1, "--halve-lr-below", 0.0, "--max-steps", 2)
    elmo(*train_args(out, train_file, valid_file, *start))
    resume = ["train", "--out", out, "--resume", out / "checkpoint.pt", "--no-progress", "--validate-every", 1]
    elmo(*resume, "--max-steps", 6)  # the checkpoint's threshold 0: halved at each validation that is not lower
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    assert state["config"]["halve_lr_below"] == 0.0
    elmo(*resume, "--max-steps", 8, "--halve-lr-below", 0.99)  # a new threshold: 99% gains, never met
    rows = {r["step"]: r for r in map(json.loads, (out / "train_log.jsonl").read_text().splitlines())}
    rates = [rows[step]["lr"] for step in range(1, 9)]
    assert rates[0] == 0.002 and rates[:6] == sorted(rates[:6], reverse=True)
    assert rates[6:] == [rates[5] / 2, rates[5] / 4]  # 0.99 is never met: halved at steps 7 and 8
    assert torch.load(out / "checkpoint.pt", weights_only=False)["config"]["halve_lr_below"] == 0.99


def test_a_resumed_run_keeps_validating_on_its_valid_file_and_its_patience_needs_no_valid(
    tmp_path, options_file, train_file, valid_file
):
    # The README's resume (`--out run/ --resume run/checkpoint.pt --max-hours 10`) names no
    # --valid: the run used to go on without any validation, and --patience was refused.
    out = tmp_path / "run"
    elmo(*train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 2))
    resume = ["train", "--out", out, "--resume", out / "checkpoint.pt", "--no-progress", "--validate-every", 1]
    elmo(*resume, "--max-steps", 3)
    elmo(*resume, "--max-steps", 4, "--patience", 5)
    rows = {r["step"]: r for r in map(json.loads, (out / "train_log.jsonl").read_text().splitlines())}
    assert [rows[step]["valid_ppl"] is not None for step in (2, 3, 4)] == [True, True, True]
    [(_, expected)] = run_perplexity([valid_file], model=out, pretokenized=True)
    assert rows[4]["valid_ppl"] == pytest.approx(expected.average, rel=1e-3)  # the same file as before


def test_a_resumed_run_keeps_its_precision_or_takes_a_new_one_for_good(
    tmp_path, options_file, train_file, valid_file, monkeypatch
):
    from elmo_core.model import precision

    monkeypatch.setattr(precision, "cpu_bf16_support", lambda: "avx512_bf16")  # bf16 is refused without it
    out = tmp_path / "run"
    elmo(*train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 2))
    other = tmp_path / "other"
    shutil.copytree(out, other)

    def resume(folder, *more):
        elmo("train", "--out", folder, "--resume", folder / "checkpoint.pt", "--no-progress", "--log-every", 1, *more)
        rows = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]
        config = torch.load(folder / "checkpoint.pt", map_location="cpu", weights_only=False)["config"]
        return rows[-1], config["precision"]

    kept, kept_precision = resume(out, "--max-steps", 3)  # no --precision: the checkpoint's ("auto": fp32 here)
    changed, changed_precision = resume(other, "--max-steps", 3, "--precision", "bf16")
    assert (kept_precision, changed_precision) == ("auto", "bf16")
    # The same data and weights, computed in bf16: close to fp32's loss, but not equal to it.
    assert changed["train_ppl"] != kept["train_ppl"]
    assert changed["train_ppl"] == pytest.approx(kept["train_ppl"], rel=0.05)
    assert resume(other, "--max-steps", 4)[1] == "bf16"  # no --precision: the checkpoint's, now bf16


def test_max_epochs_stops_at_the_end_of_a_pass_and_counts_across_resumes(
    tmp_path, options_file, train_file, valid_file, vocab
):
    def batches_in(epochs: int) -> int:  # the stream elmo train builds (its data settings, seed 0)
        return sum(1 for _ in TrainingStream([train_file], vocab, 64, buffer_sentences=20_000, epochs=epochs))

    out = tmp_path / "run"
    elmo(*train_args(out, train_file, valid_file, "--options", options_file, "--max-epochs", 1))

    def last_step() -> int:
        return json.loads((out / "train_log.jsonl").read_text().splitlines()[-1])["step"]

    assert last_step() == batches_in(1) > 1
    resume = ["train", "--out", out, "--resume", out / "checkpoint.pt", "--no-progress"]
    elmo(*resume, "--max-epochs", 1)  # the pass is complete: not one step more
    assert last_step() == batches_in(1)
    elmo(*resume, "--max-epochs", 2)
    assert last_step() == batches_in(2)


def test_train_needs_exactly_one_starting_point(tmp_path, options_file, train_file, valid_file):
    with pytest.raises(ElmoError, match="exactly one of --options"):
        runner.invoke(
            app,
            [str(a) for a in train_args(tmp_path / "x", train_file, valid_file, "--max-steps", 1)],
            catch_exceptions=False,
        )


def test_every_train_option_is_the_training_settings_field_of_its_name():
    import inspect
    from dataclasses import fields

    from elmo_core.apps.cli.train import train

    parameters = inspect.signature(train).parameters
    assert set(parameters) == {f.name for f in fields(TrainingSettings)} - {"splitter", "valid_batch_tokens"}
    for f in fields(TrainingSettings):  # the option's default is the field's, and its help the field's
        if f.name in parameters and f.name != "out":
            assert parameters[f.name].default == f.default, f.name
            assert parameters[f.name].annotation.__metadata__[0].help == f.metadata["help"], f.name


def test_run_training_takes_settings_or_their_fields_as_keywords(tmp_path, options_file, train_file):
    common = {"valid": None, "options": options_file, "batch_tokens": 64, "max_steps": 2, "progress": False}
    by_keywords = run_training(train=[train_file], out=tmp_path / "a", pretokenized=True, **common)
    settings = TrainingSettings(train=[train_file], out=tmp_path / "b", pretokenized=False, **common)
    by_settings = run_training(settings, pretokenized=True)  # keywords change the settings given
    assert by_settings["tokens"] == by_keywords["tokens"] > 0
    a, b = load_model_folder(tmp_path / "a"), load_model_folder(tmp_path / "b")
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"model": "folder"}, ElmoError, "exactly one of --options"),
        ({"vocab_size": 10, "min_count": 2}, ElmoError, "--vocab-size or --min-count, not both"),
        ({"n_layers": 2}, TypeError, "n_layers"),
        ({"max_steps": 0}, ElmoError, r"^--max-steps must be a positive integer, or leave --max-steps out; got 0\.$"),
        ({"max_steps": -2}, ElmoError, r"^--max-steps must be a positive integer, or leave --max-steps out; got -2\.$"),
        ({"batch_tokens": 0}, ElmoError, r"^--batch-tokens must be a positive integer; got 0\.$"),
        ({"vocab_size": 0}, ElmoError, r"^--vocab-size must be an integer >= 4 \(3 specials and 1 word\)"),
        ({"log_every": -1}, ElmoError, r"^--log-every must be a non-negative integer; got -1\.$"),
        ({"lr": -1.0}, ElmoError, r"^--lr must be a positive learning rate; got -1\.0\.$"),
        ({"dropout": 1.0}, ElmoError, r"^--dropout must be in \[0, 1\); got 1\.0\.$"),
        ({"max_hours": 0.0}, ElmoError, r"^--max-hours must be a positive number of hours; got 0\.0\.$"),
        ({"max_steps": 1, "patience": 2}, ElmoError, r"^--patience stops when the validation perplexity .* no --valid"),
        (
            {"max_steps": 1, "halve_lr_below": 0.05},
            ElmoError,
            r"^--halve-lr-below acts when the validation perplexity stops improving, but there is no --valid",
        ),
        ({"halve_lr_below": 1.0}, ElmoError, r"^--halve-lr-below is a fraction in \[0, 1\), e\.g\. 0\.05; got 1\.0\.$"),
        (
            {"max_steps": 1, "halve_lr_below": 0.05, "validate_every": 0},
            ElmoError,
            r"^--halve-lr-below acts at validations; give --validate-every N > 0 steps with it\.$",
        ),
        (
            {"max_steps": 1, "patience": 0},
            ElmoError,
            r"^--patience must be a positive integer \(validations without a better perplexity\), "
            r"or leave --patience out; got 0\.$",
        ),
    ],
)
def test_run_training_refuses_bad_settings_before_starting(tmp_path, options_file, fields, error, match):
    with pytest.raises(error, match=match):
        run_training(train=None, valid=None, out=tmp_path / "x", options=options_file, **fields)
    assert not (tmp_path / "x").exists()


def test_perplexity_without_a_model_names_the_missing_default_model(tmp_path, valid_file, monkeypatch):
    import elmo_core.files.model_folder

    monkeypatch.setattr(elmo_core.files.model_folder, "DEFAULT_MODEL_DIR", tmp_path / "nowhere")
    with pytest.raises(WeightFileError, match="no default model is installed"):
        runner.invoke(app, ["perplexity", "--pretokenized", str(valid_file)], catch_exceptions=False)


def test_prepare_commands_write_a_cache_and_a_vocabulary(tmp_path):
    pytest.importorskip("spacy")
    raw = tmp_path / "raw.txt"
    raw.write_text("The cat sat. It was red!\n\nA dog ran.\n", encoding="utf-8")
    cache = tmp_path / "cache.txt"
    result = runner.invoke(app, ["data", "pretokenize", str(raw), "--out", str(cache)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert cache.read_text(encoding="utf-8") == "The cat sat .\nIt was red !\nA dog ran .\n"
    vocab = tmp_path / "vocab.txt"
    result = runner.invoke(
        app, ["data", "vocab", str(cache), "--out", str(vocab), "--pretokenized"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert vocab.read_text(encoding="utf-8").splitlines()[:4] == ["<S>\t3", "</S>\t3", "<UNK>\t0", ".\t2"]


@pytest.mark.parametrize(
    "option, value, message",
    [
        (
            "--max-sentence-tokens",
            "0",
            "--max-sentence-tokens must be a positive integer, or leave --max-sentence-tokens out; got 0.",
        ),
        ("--buffer-sentences", "0", "--buffer-sentences must be a positive integer; got 0."),
        ("--prefetch", "-1", "--prefetch must be a non-negative integer"),
    ],
)
def test_train_errors_name_the_options_the_user_typed(tmp_path, options_file, train_file, option, value, message):
    args = ["train", "--out", tmp_path / "run", "--train", train_file, "--options", options_file, "--max-steps", 1]
    result = runner.invoke(app, [str(a) for a in [*args, option, value]])
    assert isinstance(result.exception, ElmoError) and str(result.exception).startswith(message), result.exception
    assert not (tmp_path / "run").exists()


def test_data_vocab_prints_like_the_other_commands_and_warns_on_an_empty_input(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    exe = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
    args = ["data", "vocab", "empty.txt", "--out", "vocab.txt", "--pretokenized", "--no-progress"]
    result = subprocess.run([exe, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [  # no timestamped logger line
        "warning: FILES hold no words (empty.txt); vocab.txt holds only the 3 special tokens.",
        "wrote 3 tokens to vocab.txt; they cover 0.00% of the running words",
    ]
    (tmp_path / "text.txt").write_text("a b a\nc a\n", encoding="utf-8")
    args = ["data", "vocab", str(tmp_path / "text.txt"), "--out", str(tmp_path / "v.txt"), "--pretokenized"]
    shown = runner.invoke(app, args, catch_exceptions=False).stderr
    assert shown.splitlines()[-1] == f"wrote 6 tokens to {tmp_path / 'v.txt'}; they cover 100.00% of the running words"


def test_data_pretokenize_warns_on_an_empty_input(tmp_path):
    pytest.importorskip("spacy")
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    args = ["data", "pretokenize", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "cache.txt")]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0
    assert result.stderr.splitlines()[0] == f"warning: FILES hold no sentences ({tmp_path / 'empty.txt'})."


# ---------------------------------------------------------------- every bad file gets one line
def one_line_error(*args) -> str:
    """Run the `elmo` command line as a user would; it must fail with one line and exit 2."""
    import subprocess
    import sys
    from pathlib import Path

    exe = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
    result = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]  # the others are progress logs
    assert "Traceback" not in result.stderr and len(errors) == 1 and lines[-1] == errors[0], result.stderr
    return errors[0]


@pytest.fixture
def lm_folder(tmp_path, vocab):
    from elmo_core.apps.training.model import save_language_model
    from tests.core.apps.training.conftest import make_lm

    save_language_model(make_lm(vocab), vocab, tmp_path / "lm")
    return tmp_path / "lm"


@pytest.mark.parametrize("how", ["empty", "truncated"])
def test_a_truncated_or_empty_resume_checkpoint_is_one_line(tmp_path, options_file, train_file, valid_file, how):
    out = tmp_path / "run"
    elmo(*train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 2))
    checkpoint = out / "checkpoint.pt"
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(b"" if how == "empty" else data[: len(data) // 2])
    message = one_line_error("train", "--out", out, "--resume", checkpoint, "--max-steps", 4, "--no-progress")
    damaged = r"cannot be read by torch.load \(\w+Error: .+\): it is cut short"
    expected = r"is empty \(0 bytes\)" if how == "empty" else damaged
    assert message.startswith(f"error: checkpoint {checkpoint} ") and re.search(expected, message), message
    assert "Aborted" not in message


def test_non_utf8_input_to_perplexity_probe_and_train_names_the_file_and_the_line(tmp_path, options_file, lm_folder):
    from elmo_core import save_model_folder
    from tests.conftest import make_tiny_elmo

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the cat sat\na dog ran\ncaf\xe9 au lait\n")
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    conll = tmp_path / "bad.conll"
    conll.write_bytes(b"a X\nb Y\n\ncaf\xe9 Z\n")
    expected = "is not UTF-8 text (line {}: invalid continuation byte)."
    pretokenized = ["--pretokenized", "--max-steps", 1]
    for args, path, line in (
        (["perplexity", "--model", lm_folder, "--pretokenized", bad], bad, 3),
        (["probe", conll, conll, "--model", tmp_path / "model"], conll, 4),
        (["train", "--out", tmp_path / "run", "--train", bad, "--options", options_file, *pretokenized], bad, 3),
    ):
        message = one_line_error(*args)
        assert message.startswith("error: ") and str(path) in message and expected.format(line) in message, message


def test_perplexity_of_an_empty_file_warns_instead_of_printing_nan(tmp_path, lm_folder, valid_file):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"\n\n")
    result = runner.invoke(
        app, ["perplexity", "--model", str(lm_folder), "--pretokenized", str(empty), str(valid_file), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()
    assert len(rows) == 2 and rows[1].startswith(f"{valid_file}\t") and "nan" not in result.stdout
    assert result.stderr.strip() == f"warning: FILE {empty} holds no sentences, so it has no perplexity (no row)."


def test_perplexity_shows_progress_on_stderr(tmp_path, lm_folder, valid_file):
    result = runner.invoke(app, ["perplexity", "--model", str(lm_folder), "--pretokenized", str(valid_file)])
    assert result.exit_code == 0, result.output
    [(_, expected)] = run_perplexity([valid_file], model=lm_folder, pretokenized=True)
    assert f"{expected.tokens}/{expected.tokens}" in result.stderr and "tok" in result.stderr  # tqdm's last update
    assert "tok" not in result.stdout


# ---------------------------------------------------------------- the inputs every command takes (R48)
def test_perplexity_reads_compressed_files_and_standard_input_like_the_plain_file(tmp_path, lm_folder, valid_file):
    import lzma
    import subprocess
    import sys
    from pathlib import Path

    xz = tmp_path / "valid.txt.xz"
    xz.write_bytes(lzma.compress(valid_file.read_bytes()))
    exe = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
    rows = []
    for path, stdin in ((valid_file, None), (xz, None), ("-", valid_file.read_bytes())):
        result = subprocess.run(
            [exe, "perplexity", "--model", str(lm_folder), "--pretokenized", "--no-progress", str(path)],
            input=stdin,
            capture_output=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        rows.append(result.stdout.decode().splitlines()[1].split("\t", 1))
    assert [r[0] for r in rows] == [str(valid_file), str(xz), "-"]
    assert rows[0][1] == rows[1][1] == rows[2][1]


def test_train_refuses_a_stream_as_training_text_before_reading_it(tmp_path, options_file):
    with pytest.raises(ElmoError, match=r"^--train - is a stream .* reads its training files again on every epoch"):
        run_training(train=["-"], valid=None, out=tmp_path / "run", options=options_file)
    assert not (tmp_path / "run").exists()


def test_prepare_commands_refuse_to_write_over_their_input(tmp_path, train_file):
    before = train_file.read_bytes()
    (tmp_path / "cache.txt").symlink_to(train_file)
    commands = [
        ["pretokenize", train_file, "--out", tmp_path / "cache.txt"],
        ["vocab", train_file, "--out", train_file, "--pretokenized"],
    ]
    for command in commands:
        with pytest.raises(ElmoError, match=r"^--out .* is FILES .* \(the same file\): writing it would destroy"):
            runner.invoke(app, ["data", *map(str, command)], catch_exceptions=False)
    assert train_file.read_bytes() == before


# ---------------------------------------------------------------- one run owns a job folder (R43)
def test_a_second_train_on_the_same_out_stops_at_once_and_a_killed_runs_folder_resumes(
    tmp_path, options_file, train_file, valid_file
):
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from elmo_core.apps.training.checkpoint import load_checkpoint_file

    exe = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
    out = tmp_path / "run"
    args = train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 10**9)
    first = subprocess.Popen([exe, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        checkpoint = out / "checkpoint.pt"
        for _ in range(6000):  # until the first run has saved a checkpoint (it is still training)
            if checkpoint.is_file() or first.poll() is not None:
                break
            time.sleep(0.05)
        assert first.poll() is None and checkpoint.is_file(), first.stderr.read() if first.poll() is not None else ""
        log_rows = (out / "train_log.jsonl").read_text().count("\n")
        message = one_line_error(*train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 2))
        assert message.startswith(f"error: another elmo train is running in --out {out} ") and "torchrun" in message
        assert "wait for it to finish" in message and "another --out" in message, message
        assert (out / "train_log.jsonl").read_text().count("\n") >= log_rows  # the first run's log is intact
    finally:
        first.send_signal(signal.SIGKILL)  # killed, as by a scheduler or the OOM killer: no clean-up
        first.wait(timeout=300)
        first.stderr.close()
    step = load_checkpoint_file(checkpoint)["step"]
    resume = ["train", "--out", out, "--resume", checkpoint, "--max-steps", step + 1, "--no-progress"]
    elmo(*resume)  # the killed run's lock died with it
    assert load_checkpoint_file(checkpoint)["step"] == step + 1
    assert not (out / ".lock").exists()  # a finished run leaves a clean model folder


@pytest.mark.parametrize("content", [b"", b"\n \n\n"], ids=["zero bytes", "blank lines"])
def test_train_refuses_an_empty_valid_file_before_it_trains(tmp_path, options_file, train_file, content):
    empty = tmp_path / "valid.txt"
    empty.write_bytes(content)
    out = tmp_path / "run"
    message = one_line_error(*train_args(out, train_file, empty, "--options", options_file, "--max-steps", 2))
    assert message == (
        f"error: --valid {empty} holds no sentences, so there would be no validation perplexity; "
        "give held-out text, or leave --valid out to train without validation."
    )
    assert not out.exists()


def test_train_refuses_an_out_that_is_a_file_before_it_trains(tmp_path, options_file, train_file):
    out = tmp_path / "notes.txt"
    out.write_text("keep me\n")
    with pytest.raises(ElmoError, match=r"^--out .*notes.txt is a file; give the folder to write the model into\.$"):
        run_training(train=[train_file], valid=None, out=out, options=options_file, pretokenized=True, max_steps=1)
    assert out.read_text() == "keep me\n"


def test_under_torchrun_the_writing_rank_owns_out_and_every_rank_stops_when_it_is_taken(
    tmp_path, options_file, train_file, valid_file
):
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    from elmo_core.files.folder_lock import FolderLock

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torchrun = [Path(sys.executable).parent / "torchrun", "--nproc-per-node", 2, "--master-port", port]
    out = tmp_path / "run"
    args = train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 2)

    def launch() -> subprocess.CompletedProcess:
        command = [str(a) for a in [*torchrun, "-m", "elmo_core", *args]]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)

    other = FolderLock(out, busy="busy")  # another run holds --out
    try:
        busy = launch()
    finally:
        other.release()
    assert busy.returncode != 0 and busy.stderr.count("error: another elmo train is running in --out") == 2
    assert not (out / "checkpoint.pt").exists()  # no rank wrote anything
    done = launch()
    assert done.returncode == 0, done.stderr
    assert (out / "checkpoint.pt").is_file() and not (out / ".lock").exists()


@pytest.mark.parametrize("spelling", ["{out}/*.txt", "./{name}/*.txt", "{out}/*"])
def test_a_train_glob_that_would_match_what_the_run_writes_in_out_is_refused_up_front(
    tmp_path, options_file, train_file, valid_file, spelling, monkeypatch
):
    # The first run would pass, and its resume fail: the glob then matches the run's own vocab.txt.
    out = tmp_path / "run"
    out.mkdir()
    (out / "a.txt").write_bytes(train_file.read_bytes())
    monkeypatch.chdir(tmp_path)
    pattern = spelling.format(out=out, name=out.name)
    message = one_line_error(*train_args(out, pattern, valid_file, "--options", options_file, "--max-steps", 1))
    assert message.startswith(f"error: --train {pattern!r} is a pattern in --out {out}, where this command writes ")
    assert sorted(p.name for p in out.iterdir()) == ["a.txt"]


def test_training_settings_are_a_train_config_and_restate_none_of_its_fields():
    from dataclasses import fields

    from elmo_core.apps.training.config import TrainConfig

    assert issubclass(TrainingSettings, TrainConfig)
    own = TrainingSettings.__dict__["__annotations__"]
    assert {f.name for f in fields(TrainConfig)} & set(own) == {"precision"}  # None: the checkpoint's on --resume
    settings = TrainingSettings(out="run", train=["t.txt"], options="o.json", max_steps=3, lr=0.5)
    config = settings.train_config()
    assert type(config) is TrainConfig and (config.max_steps, config.lr, config.precision) == (3, 0.5, "auto")


def test_hold_out_writes_the_kept_and_the_held_out_sentences(tmp_path):
    lines = [f"w{i} x y" for i in range(40)]
    source = tmp_path / "words.txt"
    source.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    kept, held = tmp_path / "kept.txt", tmp_path / "held.txt"
    elmo("data", "hold-out", source, "--out-kept", kept, "--out-held-out", held, "--fraction", 0.1, "--seed", 1)
    from elmo_core.apps.training.corpus import hold_out

    expected = hold_out(lines, 0.1, seed=1)
    assert kept.read_text(encoding="utf-8").splitlines() == expected[0] and len(expected[1]) == 4
    assert held.read_text(encoding="utf-8").splitlines() == expected[1]
    message = one_line_error("data", "hold-out", source, "--out-kept", kept, "--out-held-out", kept)
    assert "--out-kept and --out-held-out are both" in message
    message = one_line_error("data", "hold-out", source, "--out-kept", kept, "--out-held-out", held, "--fraction", 2)
    assert "--fraction must be in (0, 1), e.g. 0.05 (the share of sentences held out); got 2.0" in message
    assert str(source) not in message  # the option was wrong, not the file


def test_hold_out_into_a_missing_folder_writes_neither_file_and_says_which_folder(tmp_path):
    # The kept file was written, then the held-out one failed with its temporary file's name.
    source = tmp_path / "words.txt"
    source.write_text("".join(f"w{i} x\n" for i in range(10)), encoding="utf-8")
    kept, held = tmp_path / "kept.txt", tmp_path / "nowhere" / "held.txt"
    message = one_line_error("data", "hold-out", source, "--out-kept", kept, "--out-held-out", held)
    assert message == f"error: the folder of --out-held-out ({held.parent}) does not exist; create it first."
    assert sorted(p.name for p in tmp_path.iterdir()) == ["words.txt"]


def test_train_with_patience_continues_a_model_folder_and_keeps_its_best_validation(
    tmp_path, options_file, train_file, valid_file
):
    start = tmp_path / "start"
    elmo(*train_args(start, train_file, valid_file, "--options", options_file, "--max-steps", 2))
    adapted = tmp_path / "adapted"
    # --lr 1.0 wrecks the model at the first step: every validation after it is worse, so
    # the run stops after --patience 2 of them and the folder keeps the starting weights.
    more = ("--model", start, "--max-epochs", 1, "--patience", 2, "--lr", 1.0, "--validate-every", 1)
    elmo(*train_args(adapted, train_file, valid_file, *more))
    rows = [json.loads(line) for line in (adapted / "train_log.jsonl").read_text().splitlines()]
    validated = [r["step"] for r in rows if r["valid_ppl"] is not None]
    assert validated == [0, 1, 2] and rows[0]["valid_ppl"] < min(r["valid_ppl"] for r in rows[1:])
    before, after = load_language_model(start)[0].bilm, load_language_model(adapted)[0].bilm
    for (name, x), y in zip(before.state_dict().items(), after.state_dict().values()):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)
    [(_, ppl)] = run_perplexity([valid_file], model=adapted, pretokenized=True)
    assert ppl.average == pytest.approx(rows[0]["valid_ppl"], rel=1e-6)


def test_a_run_without_a_stop_condition_is_refused_naming_the_options_and_what_a_resume_needs(
    tmp_path, options_file, train_file, valid_file
):
    out = tmp_path / "run"
    elmo(*train_args(out, train_file, valid_file, "--options", options_file, "--max-steps", 2))
    before = sorted(p.name for p in out.iterdir())
    for start in (["--options", options_file, "--out", tmp_path / "new"], ["--resume", out / "checkpoint.pt"]):
        args = ["train", "--out", out, "--train", train_file, "--pretokenized", *start]
        with pytest.raises(ElmoError, match=r"^give --max-steps, --max-hours or --max-epochs .* again with --resume"):
            runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert sorted(p.name for p in out.iterdir()) == before and not (tmp_path / "new").exists()


# ---------------------------------------------------------------- the compile cache folder (R60)
@pytest.mark.parametrize(
    "compile_flag", [pytest.param("1", marks=pytest.mark.slow), "0"], ids=["compiling", "ELMO_COMPILE=0"]
)
def test_train_with_a_compile_cache_folder_it_cannot_write_trains_and_names_the_folder(
    tmp_path, options_file, train_file, compile_flag
):
    """TORCHINDUCTOR_CACHE_DIR below a regular file cannot be created, as a folder on a read-only
    file system cannot (root may write a chmod-read-only folder, so the test uses a file)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "a_file").write_text("not a folder\n")
    cache = tmp_path / "a_file" / "inductor"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "ELMO_COMPILE": compile_flag}
    exe = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
    out = tmp_path / "run"
    args = ["train", "--out", out, "--train", train_file, "--options", options_file, "--pretokenized"]
    args += ["--batch-tokens", 64, "--no-progress", "--max-steps", 2]
    done = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Errno" not in done.stderr
    assert load_model_folder(out) is not None
    warned = [line for line in done.stderr.splitlines() if "RuntimeWarning" in line]
    if compile_flag == "0":
        assert warned == []  # nothing is compiled, so nothing to say
    else:
        assert len(warned) == 1, done.stderr
        assert f"the compile cache folder {cache} (TORCHINDUCTOR_CACHE_DIR) is not writable" in warned[0]
        assert "ELMO_COMPILE=0 to train without compiling" in warned[0]


def test_train_on_an_empty_file_says_so_before_any_progress_bar(tmp_path, options_file):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    args = ["train", "--out", tmp_path / "run", "--train", empty, "--options", options_file, "--max-steps", 2]
    with pytest.raises(ElmoError) as caught:
        runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert str(caught.value) == f"the training files hold no sentences: ['{empty}']; give text with --train."
    stream = TrainingStream([empty], None, 64)  # a one-process stream names no rank either
    with pytest.raises(ValueError, match=r"^the training files hold no sentences: \["):
        next(iter(stream))


@pytest.mark.parametrize("jobs", [1, 2])
def test_pretokenize_shows_the_sentences_written_on_a_progress_bar(tmp_path, monkeypatch, jobs):
    pytest.importorskip("spacy")
    import elmo_core.apps.training.corpus as corpus

    bars = []

    def recorded(*args, **kwargs):
        bars.append(corpus_progress_bar(*args, **kwargs))
        bars[-1].show = kwargs["show"]
        return bars[-1]

    corpus_progress_bar = corpus.progress_bar
    monkeypatch.setattr(corpus, "progress_bar", recorded)
    raws = [tmp_path / "a.txt", tmp_path / "b.txt"]
    raws[0].write_text("The cat sat. It was red!\n", encoding="utf-8")
    raws[1].write_text("A dog ran.\n", encoding="utf-8")
    args = ["data", "pretokenize", *map(str, raws), "--out", str(tmp_path / "c.txt"), "--jobs", str(jobs)]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [(bar.n, bar.unit, bar.show) for bar in bars] == [(3, " sentences", True)]
    quiet = runner.invoke(app, [*args[:-3], str(tmp_path / "d.txt"), *args[-2:], "--no-progress"])
    assert quiet.exit_code == 0 and bars[-1].show is False
