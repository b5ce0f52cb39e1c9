from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from elmo_core import Elmo, embed_sentences, load_bilm_tf, quantize_int8, read_options, save_model_folder
from elmo_core.apps.cli import app
from elmo_core.model.errors import ElmoError
from tests.conftest import make_tiny_elmo

runner = CliRunner()


def read_all(path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {name: f[name][()] for name in f}


def embed(*args: str) -> None:
    result = runner.invoke(app, ["embed", *map(str, args), "--no-progress"], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_fixture_vectors_do_not_depend_on_batch_tokens(fixture_dir, tmp_path):
    weights = ["--options", fixture_dir / "options.json", "--weights", fixture_dir / "lm_weights.hdf5"]
    text = fixture_dir / "sentences.txt"
    for budget in (1, 64, 100_000):
        embed(text, tmp_path / f"{budget}.hdf5", *weights, "--batch-tokens", budget)
    reference = read_all(tmp_path / "100000.hdf5")
    lines = text.read_text(encoding="utf-8").splitlines()
    assert sorted(reference, key=int) == [str(i) for i in range(len(lines))]
    for budget in (1, 64):
        for name, vectors in read_all(tmp_path / f"{budget}.hdf5").items():
            np.testing.assert_allclose(vectors, reference[name], atol=1e-5, rtol=1e-4)
    # And they are the core's vectors for that line.
    elmo = Elmo(read_options(fixture_dir / "options.json"), dropout=0.0)
    load_bilm_tf(elmo, fixture_dir / "lm_weights.hdf5")
    np.testing.assert_allclose(reference["7"], embed_sentences(elmo, [lines[7].split()])[0], atol=1e-6, rtol=0)
    assert reference["7"].shape == (3, len(lines[7].split()), 32)


def test_blank_lines_give_empty_datasets_and_nothing_shifts(tmp_path):
    elmo = make_tiny_elmo()
    save_model_folder(elmo, tmp_path / "model")
    (tmp_path / "in.txt").write_text("a b c\n\nd e\n   \nf\n", encoding="utf-8")
    embed(tmp_path / "in.txt", tmp_path / "out.hdf5", "--model", tmp_path / "model", "--layers", "top")
    out = read_all(tmp_path / "out.hdf5")
    assert {k: v.shape for k, v in out.items()} == {
        "0": (3, 16),
        "1": (0, 16),
        "2": (2, 16),
        "3": (0, 16),
        "4": (1, 16),
    }
    expected = embed_sentences(elmo, [["d", "e"]], layers="top")[0]
    np.testing.assert_allclose(out["2"], expected, atol=1e-6)


@pytest.mark.parametrize("layers, shape", [("all", (3, 2, 16)), ("mix", (2, 16)), ("average", (2, 16)), ("1", (2, 16))])
def test_layer_choices(tmp_path, layers, shape):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "in.txt").write_text("x y\n", encoding="utf-8")
    embed(tmp_path / "in.txt", tmp_path / "out.hdf5", "--model", tmp_path / "model", "--layers", layers)
    assert read_all(tmp_path / "out.hdf5")["0"].shape == shape


def test_tokenize_uses_spacy_english_rules(tmp_path):
    pytest.importorskip("spacy")
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "in.txt").write_text("Don't stop-me now!!\n", encoding="utf-8")
    embed(tmp_path / "in.txt", tmp_path / "out.hdf5", "--model", tmp_path / "model", "--tokenize", "--layers", "top")
    import spacy

    expected = [t.text for t in spacy.blank("en")("Don't stop-me now!!")]
    assert read_all(tmp_path / "out.hdf5")["0"].shape == (len(expected), 16)


def cli(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("elmo") or str(__import__("pathlib").Path(sys.executable).parent / "elmo")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_errors_are_one_clear_line_and_leave_no_output(tmp_path):
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    result = cli("embed", tmp_path / "in.txt", out, "--options", tmp_path / "missing.json")
    assert result.returncode == 2
    assert "--options and --weights go together" in result.stderr and "Traceback" not in result.stderr
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    result = cli("embed", tmp_path / "in.txt", out, "--model", tmp_path / "model", "--layers", "-2")
    assert result.returncode == 2 and "layer index 0..2" in result.stderr
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    result = cli("embed", tmp_path / "latin1.txt", out, "--model", tmp_path / "model")
    assert result.returncode == 2 and "not UTF-8" in result.stderr
    assert not out.exists() and list(tmp_path.glob("*partial*")) == []  # no job folder, no temporary file


def test_a_zero_batch_budget_is_one_line_in_the_options_spelling(tmp_path):
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    for command in (["embed", tmp_path / "in.txt", tmp_path / "out.hdf5"], ["perplexity", tmp_path / "in.txt"]):
        result = cli(*command, "--model", tmp_path / "model", "--batch-tokens", "0")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().splitlines()[-1] == "error: --batch-tokens must be a positive integer; got 0."
    assert not (tmp_path / "out.hdf5").exists()


def test_a_probe_plot_without_matplotlib_fails_before_the_probe_runs(tmp_path, monkeypatch):
    import elmo_core.apps.probe

    ran = []
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    monkeypatch.setattr(elmo_core.apps.probe, "run_probe", lambda *a, **k: ran.append(1))
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "tags.txt").write_text("a X\nb Y\n", encoding="utf-8")
    args = ["probe", tmp_path / "tags.txt", tmp_path / "tags.txt", "--model", tmp_path / "model"]
    with pytest.raises(ElmoError, match=r"the probe's plot needs matplotlib"):
        runner.invoke(app, [str(a) for a in [*args, "--plot", tmp_path / "p.png"]], catch_exceptions=False)
    assert ran == []


def test_without_a_model_the_default_is_used_or_a_clear_error_given(tmp_path, monkeypatch):
    import elmo_core.files.model_folder as model_folder
    from elmo_core import WeightFileError
    from elmo_core.apps.cli.shared import load_model

    monkeypatch.setattr(model_folder, "DEFAULT_MODEL_DIR", tmp_path / "none")
    with pytest.raises(WeightFileError, match="no default model is installed"):
        load_model(None, None, None)
    save_model_folder(make_tiny_elmo(), tmp_path / "none")
    assert load_model(None, None, None).output_dim == 16


def test_precision_and_token_cache_options(tmp_path):
    elmo = make_tiny_elmo()
    save_model_folder(elmo, tmp_path / "model")
    lines = ["the cat sat on the mat .", "a b", "the mat"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = ["--model", tmp_path / "model"]
    embed(tmp_path / "in.txt", tmp_path / "fp32.hdf5", *model)
    embed(tmp_path / "in.txt", tmp_path / "nocache.hdf5", *model, "--token-cache", 0)
    embed(tmp_path / "in.txt", tmp_path / "int8.hdf5", *model, "--precision", "int8")
    fp32, nocache, int8 = (read_all(tmp_path / f"{n}.hdf5") for n in ("fp32", "nocache", "int8"))
    quantized = embed_sentences(quantize_int8(elmo), [line.split() for line in lines])
    for k in range(len(lines)):
        np.testing.assert_allclose(nocache[str(k)], fp32[str(k)], atol=1e-6, rtol=0)
        np.testing.assert_allclose(int8[str(k)], quantized[k], atol=1e-6, rtol=0)  # the int8 model's own vectors
        assert not np.array_equal(int8[str(k)], fp32[str(k)])
    result = cli("embed", tmp_path / "in.txt", tmp_path / "x.hdf5", *model, "--precision", "fp64")
    assert result.returncode == 2 and "--precision must be one of fp32, int8, bf16, fp16" in result.stderr
    assert not (tmp_path / "x.hdf5").exists()


def test_bad_device_or_output_fail_before_any_work(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    model = ["--model", tmp_path / "model"]
    cases = [
        (["--device", "tpu"], "is not a torch device"),
        ([tmp_path / "missing" / "o.hdf5"], "does not exist; create it first"),
        ([tmp_path], "is a folder; give the path of the hdf5 file"),
    ]
    for extra, message in cases:
        out = [tmp_path / "o.hdf5"] if extra and extra[0] == "--device" else []
        result = cli("embed", tmp_path / "in.txt", *out, *extra, *model)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "o.hdf5").exists() and list(tmp_path.rglob("*partial*")) == []


@pytest.mark.parametrize("tokenize", [False, True])
def test_byte_order_mark_and_windows_line_endings_change_nothing(tmp_path, tokenize):
    if tokenize:
        pytest.importorskip("spacy")
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    text = "The cat sat .\n\nA dog ran away .\n"
    (tmp_path / "unix.txt").write_bytes(text.encode("utf-8"))
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    (tmp_path / "crlf.txt").write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))
    extra = ["--tokenize"] if tokenize else []
    for name in ("unix", "bom", "crlf"):
        embed(tmp_path / f"{name}.txt", tmp_path / f"{name}.hdf5", "--model", tmp_path / "model", *extra)
    reference = read_all(tmp_path / "unix.hdf5")
    assert sorted(reference) == ["0", "1", "2"] and reference["0"].shape[1] == 4
    for name in ("bom", "crlf"):
        got = read_all(tmp_path / f"{name}.hdf5")
        assert sorted(got) == sorted(reference)
        for key in reference:
            np.testing.assert_array_equal(got[key], reference[key])


def test_empty_input_warns_and_a_folder_as_input_is_one_clear_line(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "empty.txt").write_bytes(b"")
    result = cli("embed", tmp_path / "empty.txt", tmp_path / "out.hdf5", "--model", tmp_path / "model")
    assert result.returncode == 0 and "warning: INPUT" in result.stderr and "is empty" in result.stderr
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        assert len(f) == 0
    result = cli("embed", tmp_path, tmp_path / "out2.hdf5", "--model", tmp_path / "model")
    assert result.returncode == 2 and "is a folder; give the path of a file" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out2.hdf5").exists()
    for args in (
        ["probe", tmp_path, tmp_path],
        ["perplexity", tmp_path],
        ["convert", tmp_path, tmp_path, tmp_path / "x"],
    ):
        result = cli(*args)
        assert result.returncode == 2 and "is a folder" in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_download_without_a_network_is_one_clear_line(tmp_path):
    pytest.importorskip("transformers")
    # A proxy that refuses every connection stands for a machine without a network.
    env = {**__import__("os").environ, "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    exe = shutil.which("elmo") or str(__import__("pathlib").Path(sys.executable).parent / "elmo")
    result = subprocess.run(
        [exe, "convert", "--download", "small", str(tmp_path / "model")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 2, result.stderr
    assert "could not download" in result.stderr and "elmo convert OPTIONS WEIGHTS OUT_DIR" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "model").exists()


def test_embed_output_records_each_lines_tokens(tmp_path):
    pytest.importorskip("spacy")
    import spacy

    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    lines = ["Don't stop-me now!!", "", "Ada Lovelace, 1843."]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = ["--model", tmp_path / "model"]
    embed(tmp_path / "in.txt", tmp_path / "tok.hdf5", *model, "--tokenize", "--layers", "top")
    embed(tmp_path / "in.txt", tmp_path / "ws.hdf5", *model)
    nlp = spacy.blank("en")
    for name, split in (("tok", lambda s: [t.text for t in nlp(s)] if s.strip() else []), ("ws", str.split)):
        with h5py.File(tmp_path / f"{name}.hdf5", "r") as f:
            for k, line in enumerate(lines):
                tokens = list(f[str(k)].attrs["tokens"])
                assert tokens == split(line)
                assert f[str(k)].shape[-2] == len(tokens)  # one row per token, in order


# ---------------------------------------------------------------- no command writes over its input (R47)
def _spellings(tmp_path):
    """An input file, and OUTPUT paths that all name it: as given, ./x, absolute, a symlink, a hard link."""
    data = tmp_path / "data.txt"
    data.write_text("a b\nc d e\n", encoding="utf-8")
    (tmp_path / "link.txt").symlink_to(data)
    os.link(data, tmp_path / "hard.txt")
    return data, [
        data,
        Path("data.txt"),
        Path("./data.txt"),
        data.resolve(),
        tmp_path / "link.txt",
        tmp_path / "hard.txt",
    ]


def test_embed_refuses_an_output_that_is_its_input_under_any_spelling(tmp_path, monkeypatch):
    data, spellings = _spellings(tmp_path)
    before = data.read_bytes()
    monkeypatch.chdir(tmp_path)
    loaded = []
    monkeypatch.setattr("elmo_core.apps.cli.embed.load_model", lambda *a, **k: loaded.append(1))
    for output in spellings:
        with pytest.raises(ElmoError, match=r"^OUTPUT .* is INPUT .* \(the same file\): writing it would destroy"):
            runner.invoke(app, ["embed", "data.txt", str(output)], catch_exceptions=False)
    # An INPUT inside OUTPUT's job folder, which is deleted when the job completes.
    (tmp_path / "out.h5.partial").mkdir()
    inside = tmp_path / "out.h5.partial" / "in.txt"
    inside.write_bytes(before)
    with pytest.raises(ElmoError, match=r"inside OUTPUT's job folder .* which this command deletes at the end"):
        runner.invoke(app, ["embed", str(inside), "out.h5"], catch_exceptions=False)
    assert loaded == [] and data.read_bytes() == before and inside.read_bytes() == before
    result = cli("embed", data, tmp_path / "link.txt")  # the command line: one line, exit 2
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_every_command_that_writes_refuses_to_write_over_its_inputs(tmp_path, monkeypatch):
    data, _ = _spellings(tmp_path)
    model = tmp_path / "model"
    save_model_folder(make_tiny_elmo(), model)
    conll = tmp_path / "tags.conll"
    conll.write_text("a X\nb Y\n", encoding="utf-8")
    options, weights = tmp_path / "options.json", tmp_path / "weights.hdf5"
    options.write_text("{}", encoding="utf-8")
    weights.write_bytes(b"not read")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text("{}", encoding="utf-8")  # bilm-tf options under HF's name
    os.link(model / "config.json", tmp_path / "x_options.json")  # what --to-hdf5 x would replace
    (tmp_path / "plot.png").symlink_to(conll)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "vocab.txt").write_text("<S>\n</S>\n<UNK>\na\n", encoding="utf-8")
    new = ["--options", options]
    cases = [
        (["probe", conll, conll, "--plot", tmp_path / "plot.png"], r"^--plot .* is TRAIN .* \(the same file\)"),
        (["convert", options, weights, options], r"^OUT_DIR .* is OPTIONS .* \(the same file\)"),
        (["convert", tmp_path / "d" / "config.json", weights, tmp_path / "d"], r"^OPTIONS .* is in OUT_DIR .*"),
        (["convert", "--to-hdf5", model, tmp_path / "x"], r"^OUT_PREFIX_options.json .* is a file of MODEL_DIR"),
        (["train", "--out", data, "--train", data, *new], r"^--out .* is --train .* \(the same file\)"),
        (
            ["train", "--out", tmp_path / "run", "--train", data, "--vocab", tmp_path / "run" / "vocab.txt", *new],
            r"^--vocab .* is in --out .* where this command writes 'vocab.txt'",
        ),
        (["train", "--out", model, "--train", data, "--model", model], r"^--out .* is --model .* \(the same file\)"),
    ]
    ran = []
    monkeypatch.setattr("elmo_core.apps.cli.embed.load_model", lambda *a, **k: ran.append("model"))
    monkeypatch.setattr("elmo_core.apps.training.commands.run_training", lambda *a, **k: ran.append("train"))
    files = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    for args, match in cases:
        with pytest.raises(ElmoError, match=match):
            runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert ran == []  # refused before any work
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == files


# ---------------------------------------------------------------- help at 80 columns, --version
COMMANDS = ["embed", "train", "perplexity", "convert", "probe", "widen", "data pretokenize", "data vocab"]


def _help(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    exe = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
    result = subprocess.run([exe, *args, "--help"], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_at_80_columns_shows_every_option_whole_and_breaks_lines_only_where_they_are_full(command):
    import click
    import typer.main

    text = _help(*command.split())
    lines = text.splitlines()
    assert "…" not in text and max(map(len, lines)) <= 80
    click_command = typer.main.get_command(app)
    for name in command.split():
        click_command = click_command.commands[name]
    flat = " ".join(text.split())
    options = [p for p in click_command.params if isinstance(p, click.Option)]
    for option in options:
        for name in [*option.opts, *option.secondary_opts]:
            assert name in text.split(), name  # the option's name, never cut
        if option.help:
            assert " ".join(option.help.split()) in flat, option.help  # its whole description
    # Greedy wrapping: a line of a paragraph (the description, or one option's help) ends early
    # only where the next word would not fit; an option row's name may stand on a line of its own.
    width = 78  # click wraps at min(COLUMNS, 80) - 2
    in_table = False
    for line, after in zip(lines, lines[1:]):
        in_table = in_table or line in ("Arguments:", "Options:")
        indent = len(after) - len(after.lstrip())
        continues = bool(after.strip()) and (indent > 2 if in_table else indent >= 1)
        names_only = in_table and line.startswith("  -") and "  " not in line.strip()
        if line.strip() and continues and not names_only and line not in ("Arguments:", "Options:"):
            space = 2 if after.split()[0].startswith("[") else 1  # click puts two spaces before "[default: ...]"
            assert len(line.rstrip()) + space + len(after.split()[0]) > width, f"broken early:\n{line}\n{after}"


@pytest.mark.parametrize("program", [["elmo"], ["elmo", "data"], [sys.executable, "-m", "elmo_core"]])
def test_the_list_of_commands_gives_each_summary_whole_at_80_columns(program):
    if program[0] == "elmo":
        program = [shutil.which("elmo") or str(Path(sys.executable).parent / "elmo"), *program[1:]]
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    text = subprocess.run([*program, "--help"], capture_output=True, text=True, timeout=120, env=env).stdout
    listed = text.split("Commands:\n", 1)[1].splitlines()
    assert len(listed) >= 2 and all(len(line) <= 80 for line in listed)
    assert not any(line.rstrip().endswith(("...", "…")) for line in listed), text


def test_embed_options_that_are_embed_settings_take_their_default_and_help_from_the_field():
    from dataclasses import fields

    import typer.main

    from elmo_core import EmbedSettings

    options = {p.name: p for p in typer.main.get_command(app).commands["embed"].params}
    shared = ["layers", "batch_tokens", "batch_size", "window_tokens", "window_context"]
    for f in fields(EmbedSettings):
        if f.name in shared:
            assert options[f.name].help == f.metadata["help"], f.name
            assert options[f.name].default == (f.default or 0 if f.name == "window_tokens" else f.default), f.name
    assert set(shared) < set(options) and "autocast_dtype" not in options  # --precision says it in words


@pytest.mark.parametrize("command", [*COMMANDS, "data hold-out"])
def test_help_names_values_with_words_users_read_not_python_types(command):
    text = runner.invoke(app, [*command.split(), "--help"], terminal_width=200).stdout
    assert re.findall(r"<[a-z][\w\[\]|, ]*>", text) == []  # no <list[str]>, <list[Path]>, <path>, <int>
    assert "see below" not in text
    options = {line.split()[0]: line.split()[1] for line in text.splitlines() if line.startswith("  --")}
    expected = {
        "embed": {"--model": "DIR", "--options": "FILE", "--batch-tokens": "N", "--layers": "LAYERS"},
        "train": {"--train": "FILE", "--out": "DIR", "--lr": "NUMBER", "--resume": "FILE"},
        "perplexity": {"--model": "DIR", "--batch-tokens": "N"},
        "probe": {"--plot": "FILE", "--lr": "NUMBER", "--column": "N"},
        "data vocab": {"--out": "FILE", "--vocab-size": "N"},
        "convert": {"--download": "NAME"},
    }.get(command, {})
    assert {name: options[name] for name in expected} == expected


def test_convert_help_points_at_the_forms_where_they_are():
    text = " ".join(runner.invoke(app, ["convert", "--help"], terminal_width=200).stdout.split())
    assert "see below" not in text
    assert text.index("elmo convert OPTIONS WEIGHTS OUT_DIR writes") < text.index("see the forms above")


def test_errors_from_the_settings_checks_name_the_options_the_user_typed(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    (tmp_path / "tags.txt").write_text("a X\nb Y\n", encoding="utf-8")
    embed = ["embed", tmp_path / "in.txt", tmp_path / "out.h5", "--model", tmp_path / "model"]
    probe = ["probe", tmp_path / "tags.txt", tmp_path / "tags.txt", "--model", tmp_path / "model"]
    cases = [
        ([*embed, "--token-cache", "-1"], "--token-cache must be a non-negative integer (0 switches the cache off)"),
        ([*embed, "--batch-size", "0"], "--batch-size must be a positive integer; got 0."),
        ([*embed, "--window-context", "-1"], "--window-context must be a non-negative integer; got -1."),
        (
            [*embed, "--window-tokens", "8", "--window-context", "4"],
            "--window-context (4) must be less than half of --window-tokens (8): each window keeps "
            "--window-tokens - 2 * --window-context tokens. Lower the context or raise --window-tokens.",
        ),
        ([*embed, "--layers", "5"], "--layers must be 'all', 'top', 'average', 'mix' or a layer index 0..2"),
        ([*probe, "--batch-size", "0"], "--batch-size must be a positive integer (tokens per Adam step); got 0."),
        ([*probe, "--epochs", "0"], "--epochs must be a positive integer; got 0."),
        ([*probe, "--lr", "-1"], "--lr must be a positive learning rate; got -1.0."),
    ]
    for args, message in cases:
        result = runner.invoke(app, [str(a) for a in args])
        assert isinstance(result.exception, ElmoError), (args, result.exception)
        assert str(result.exception).startswith(message), (args, str(result.exception))
        assert not re.search(r"(?<![\w-])(token_cache_words|batch_size|window_\w+|epochs|lr)\b", str(result.exception))
    assert not (tmp_path / "out.h5").exists()


@pytest.mark.parametrize("form", ["bilm-tf files", "--download", "--to-hdf5"])
def test_convert_into_a_path_that_is_a_file_is_one_line_before_any_work(tmp_path, tiny_bilm_hdf5, form):
    options, weights = tiny_bilm_hdf5
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    taken = tmp_path / "taken"
    taken.write_text("someone's file\n", encoding="utf-8")
    args = {
        "bilm-tf files": [options, weights, taken],
        "--download": ["--download", "small", taken],
        "--to-hdf5": ["--to-hdf5", tmp_path / "model", taken / "bilm"],
    }[form]
    result = runner.invoke(app, ["convert", *map(str, args)])
    assert isinstance(result.exception, ElmoError), result.exception
    what = "the folder of OUT_PREFIX" if form == "--to-hdf5" else "OUT_DIR"
    expected = f"{what} {taken} is a file, not a folder; give a folder's path (it is created if missing)."
    assert str(result.exception) == expected
    assert taken.read_text(encoding="utf-8") == "someone's file\n"


def test_version_is_the_installed_package_version():
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"elmo-bilm {version('elmo-bilm')}\n"


# ---------------------------------------------------------------- small things said right
def test_wrote_says_line_and_token_in_the_singular_for_one(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "one.txt").write_text("hello\n", encoding="utf-8")
    result = runner.invoke(
        app,
        [
            "embed",
            str(tmp_path / "one.txt"),
            str(tmp_path / "o.h5"),
            "--model",
            str(tmp_path / "model"),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0 and f"wrote 1 line (1 token) to {tmp_path / 'o.h5'}" in result.stderr
    (tmp_path / "two.txt").write_text("a b\n\n", encoding="utf-8")
    result = runner.invoke(
        app,
        [
            "embed",
            str(tmp_path / "two.txt"),
            str(tmp_path / "t.h5"),
            "--model",
            str(tmp_path / "model"),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0 and "wrote 2 lines (2 tokens)" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_embed_says_that_the_same_command_resumes_it(tmp_path, sig):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    rng = np.random.default_rng(0)
    text = tmp_path / "in.txt"
    text.write_text("".join(" ".join(rng.choice(list("abcdefgh"), 8)) + "\n" for _ in range(3000)), "utf-8")
    exe = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
    command = [
        exe,
        "embed",
        str(text),
        str(tmp_path / "o.h5"),
        "--model",
        str(tmp_path / "model"),
        "--piece-tokens",
        "200",
        "--no-progress",
    ]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    folder = tmp_path / "o.h5.partial"
    while not (folder / "piece-000001.h5").exists():
        assert process.poll() is None, "finished before it could be interrupted"
        time.sleep(0.005)
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + sig and "Traceback" not in stderr and "Aborted" not in stderr
    assert stderr.strip().splitlines()[-1] == (
        f"interrupted: {tmp_path / 'o.h5'} was not written; the finished pieces are kept in {folder}; "
        "run the same command to resume."
    )
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "pieces were already done" in again.stderr, again.stderr


def test_probe_plot_checks_its_suffix_first_and_says_the_file_it_wrote(tmp_path, monkeypatch):
    import elmo_core.apps.probe

    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "tags.txt").write_text("a X\nb Y\n\na Y\nb X\n", encoding="utf-8")
    args = [
        "probe",
        str(tmp_path / "tags.txt"),
        str(tmp_path / "tags.txt"),
        "--model",
        str(tmp_path / "model"),
        "--epochs",
        "1",
    ]
    ran = []
    real = elmo_core.apps.probe.run_probe
    monkeypatch.setattr(elmo_core.apps.probe, "run_probe", lambda *a, **k: ran.append(1) or real(*a, **k))
    with pytest.raises(ElmoError, match=r"^--plot .*probe\.pgn: matplotlib cannot write '\.pgn' files; .*\.png"):
        runner.invoke(app, [*args, "--plot", str(tmp_path / "probe.pgn")], catch_exceptions=False)
    assert ran == [] and not list(tmp_path.glob("probe*"))
    result = runner.invoke(app, [*args, "--plot", str(tmp_path / "probe")], catch_exceptions=False)
    assert result.exit_code == 0 and ran == [1]
    assert result.stderr.strip().splitlines()[-1] == f"wrote the plot to {tmp_path / 'probe.png'}"
    assert (tmp_path / "probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "probe").exists()


def test_a_stop_signal_is_kept_where_python_drops_the_interrupt_its_handler_raised(tmp_path, capfd):
    # A signal that lands while a finalizer runs: Python drops the KeyboardInterrupt (and
    # would print "Exception ignored in ..." with a traceback), so the run would carry on to
    # the end. The recorded stop makes embed_file stop at its next line instead, and the
    # dropped interrupt is not printed (CI once saw its traceback from a weakref callback).
    from elmo_core.apps.cli.embed import _resumable_on_interrupt

    class SignalledInAFinalizer:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)  # the handler runs here, inside __del__

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with _resumable_on_interrupt(tmp_path / "out.h5") as stop_requested:
        assert not stop_requested()
        dropped = SignalledInAFinalizer()
        del dropped  # the KeyboardInterrupt raised in its __del__ is dropped by Python
        assert stop_requested()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("command", ["embed", "probe"])
def test_an_output_that_is_the_file_behind_standard_input_is_refused(tmp_path, command):
    # `elmo embed - data.txt < data.txt`: '-' names standard input's file, so it is an INPUT too.
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    data = tmp_path / "data.txt"
    data.write_text("a X\nb Y\n\na Y\nb X\n", encoding="utf-8")
    before = data.read_bytes()
    exe = shutil.which("elmo") or str(Path(sys.executable).parent / "elmo")
    if command == "embed":
        args = ["embed", "-", data, "--model", tmp_path / "model"]
    else:
        (tmp_path / "plot.png").write_bytes(before)
        data = tmp_path / "plot.png"  # the probe's TRAIN file arrives as standard input, --plot names it
        args = ["probe", "-", tmp_path / "data.txt", "--plot", data, "--model", tmp_path / "model", "--epochs", "1"]
    with open(data, "rb") as stdin:
        result = subprocess.run([exe, *map(str, args)], stdin=stdin, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "(the same file): writing it would destroy" in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and data.read_bytes() == before


def test_a_cut_short_archive_is_one_line_for_embed_and_leaves_no_job_folder(tmp_path):
    import gzip

    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    rng = np.random.default_rng(0)
    text = "".join(" ".join(rng.choice(["a", "bb", "ccc"], 12)) + "\n" for _ in range(3000)).encode()
    packed = gzip.compress(text)
    (tmp_path / "in.txt.gz").write_bytes(packed[: len(packed) // 2])
    out = tmp_path / "out.h5"
    result = cli("embed", tmp_path / "in.txt.gz", out, "--model", tmp_path / "model", "--no-progress")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "in.txt.gz is a damaged or cut-short .gz file (after line" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt.gz", "model"]


def test_embed_precision_help_promises_no_speed_up_and_points_to_the_measurements():
    """A speed-up quoted in help outlives the code it was measured on: the help names where
    the measurements are instead (int8 measured slower than fp32 for the shipped model)."""
    import typing

    from elmo_core.apps.cli.embed import embed

    text = typing.get_type_hints(embed, include_extras=True)["precision"].__metadata__[0].help
    assert not re.search(r"\d\s*x\b|\d+(\.\d+)?-\d+(\.\d+)?x", text), text
    assert "benchmarks/README.md" in text and "not for the default model" in text


def test_embed_warns_of_an_output_suffix_it_does_not_write(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "in.txt").write_text("a b c\n", encoding="utf-8")
    args = ["embed", str(tmp_path / "in.txt"), str(tmp_path / "x.npy"), "--model", str(tmp_path / "model")]
    result = runner.invoke(app, [*args, "--no-progress"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "warning: OUTPUT" in result.stderr and "x.npy is written as hdf5" in result.stderr
    assert "Name it x.hdf5" in result.stderr
    assert read_all(tmp_path / "x.npy")["0"].shape == (3, 3, 16)  # what it says it wrote
    for name in ("y.hdf5", "z.h5"):
        known = runner.invoke(app, [*args[:2], str(tmp_path / name), *args[3:], "--no-progress"])
        assert known.exit_code == 0 and "warning" not in known.stderr, known.output


USAGE = {
    "embed": "elmo embed [OPTIONS] INPUT OUTPUT",
    "perplexity": "elmo perplexity [OPTIONS] FILE...",
    "probe": "elmo probe [OPTIONS] TRAIN EVAL",
    "data pretokenize": "elmo data pretokenize [OPTIONS] FILES...",
    "data vocab": "elmo data vocab [OPTIONS] FILES...",
}


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_arguments_plainly_shows_precision_choices_and_no_repository_path(command):
    text = _help(*command.split())
    usage = " ".join(text.split("\n\n")[0].split())
    assert usage.startswith("Usage: ") and "{" not in usage
    if command in USAGE:
        assert usage == "Usage: " + USAGE[command]
    assert "docs/" not in text  # a wheel has no docs folder
    if "--precision" in text:
        assert re.search(r"--precision \[(auto\|)?fp32\|", text)
