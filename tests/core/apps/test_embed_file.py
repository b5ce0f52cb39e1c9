"""`elmo embed` on a file: one output whatever the number of torchrun processes, resumable.

The torchrun tests start real processes (gloo on the CPU), as a user would:
`torchrun --nproc-per-node 2 -m elmo_core embed INPUT OUTPUT ...`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from elmo_core import save_model_folder
from elmo_core.apps.embed_job import job_folder
from elmo_core.apps.pieces import plan_pieces
from tests.conftest import make_tiny_elmo

BIN = Path(sys.executable).parent
TIMEOUT = 300


def run(*args: object, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def torchrun(*args: object) -> list[object]:
    """A local 2-process torchrun command line (rendezvous on a free port)."""
    return [BIN / "torchrun", "--nproc-per-node", "2", "--master-port", str(_free_port()), *args]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_file(path: Path) -> tuple[dict, dict[str, np.ndarray], dict[str, list[str]]]:
    """File attributes, every dataset, and every dataset's tokens."""
    with h5py.File(path, "r") as f:
        attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in f.attrs.items()}
        data = {name: f[name][()] for name in f}
        tokens = {name: list(f[name].attrs["tokens"]) for name in f}
    return attrs, data, tokens


def assert_same_file(path: Path, reference: Path, atol: float = 1e-6) -> None:
    attrs, data, tokens = read_file(path)
    ref_attrs, ref_data, ref_tokens = read_file(reference)
    job, ref_job = json.loads(attrs.pop("job")), json.loads(ref_attrs.pop("job"))  # the record names its input
    assert attrs == ref_attrs
    assert (job["input_sha256"], job["settings"]) == (ref_job["input_sha256"], ref_job["settings"])
    assert sorted(data, key=int) == sorted(ref_data, key=int)
    assert tokens == ref_tokens
    for name, vectors in data.items():
        assert vectors.shape == ref_data[name].shape and vectors.dtype == ref_data[name].dtype, name
        np.testing.assert_allclose(vectors, ref_data[name], atol=atol, rtol=0, err_msg=f"dataset {name}")


@pytest.fixture
def fixture_model(fixture_dir):
    return ["--options", fixture_dir / "options.json", "--weights", fixture_dir / "lm_weights.hdf5"]


def test_two_torchrun_processes_write_the_single_process_file(fixture_dir, fixture_model, tmp_path):
    text = fixture_dir / "sentences.txt"
    # Small pieces, so that both processes get several and the balance is exercised.
    common = ["--piece-tokens", 60, "--batch-tokens", 200, "--no-progress"]
    single = run(BIN / "elmo", "embed", text, tmp_path / "one.hdf5", *fixture_model, *common)
    assert single.returncode == 0, single.stderr
    two = run(*torchrun("-m", "elmo_core", "embed", text, tmp_path / "two.hdf5", *fixture_model, *common))
    assert two.returncode == 0, two.stderr
    assert two.stderr.count("wrote 30 lines") == 1  # reported once, by rank 0
    assert_same_file(tmp_path / "two.hdf5", tmp_path / "one.hdf5")
    lines = text.read_text(encoding="utf-8").splitlines()
    _, data, tokens = read_file(tmp_path / "two.hdf5")
    assert len(data) == len(lines) and tokens["7"] == lines[7].split()
    assert not job_folder(tmp_path / "two.hdf5").exists()


def test_progress_is_shown_once_under_torchrun(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "in.txt").write_text("a b c\nd e\n" * 20, encoding="utf-8")
    result = run(
        *torchrun(
            "-m",
            "elmo_core",
            "embed",
            tmp_path / "in.txt",
            tmp_path / "o.hdf5",
            "--model",
            tmp_path / "model",
            "--piece-tokens",
            20,
        )
    )
    assert result.returncode == 0, result.stderr
    # One bar (tqdm ends it with the full count once), not one per process.
    assert result.stderr.count("100/100") == 1, result.stderr


def test_an_interrupted_embed_resumes_to_the_same_file(fixture_dir, fixture_model, tmp_path):
    lines = (fixture_dir / "sentences.txt").read_text(encoding="utf-8").splitlines()
    text = tmp_path / "in.txt"
    text.write_text("\n".join(lines * 12) + "\n", encoding="utf-8")  # 360 lines, 8,928 tokens
    common = ["--piece-tokens", 200, "--batch-tokens", 200, "--no-progress"]
    reference = run(BIN / "elmo", "embed", text, tmp_path / "reference.hdf5", *fixture_model, *common)
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "out.hdf5"
    folder = job_folder(out)
    process = subprocess.Popen(
        [str(a) for a in (BIN / "elmo", "embed", text, out, *fixture_model, *common)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.monotonic() + TIMEOUT
    num_pieces = len(plan_pieces(text, 200)[0])
    assert num_pieces > 40
    while not (folder / "piece-000002.h5").exists():  # killed midway: after 3 pieces of about 50
        assert process.poll() is None and time.monotonic() < deadline, "finished before it could be killed"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=TIMEOUT)
    done = sorted(p.name for p in folder.glob("piece-*.h5"))
    assert not out.exists(), "a killed run must not leave an output that looks complete"
    assert 3 <= len(done) < num_pieces

    again = run(BIN / "elmo", "embed", text, out, *fixture_model, *common)
    assert again.returncode == 0, again.stderr
    assert f"{len(done)} of {num_pieces} pieces were already done" in again.stderr
    assert not folder.exists()
    assert_same_file(out, tmp_path / "reference.hdf5")


def test_a_failing_process_leaves_no_output_and_the_job_resumes(fixture_model, fixture_dir, tmp_path):
    # Rank 1 fails on its first piece, as a full disk or a bad node would make it.
    script = tmp_path / "failing_rank.py"
    script.write_text(
        "import os, elmo_core.apps.embed_file as ef\n"
        "real = ef._embed_piece\n"
        "def embed_piece(*args, **kwargs):\n"
        "    if os.environ['RANK'] == '1':\n"
        "        raise OSError('no space left on device (injected)')\n"
        "    return real(*args, **kwargs)\n"
        "ef._embed_piece = embed_piece\n"
        "from elmo_core.apps.cli import main\n"
        "main()\n",
        encoding="utf-8",
    )
    text = fixture_dir / "sentences.txt"
    out = tmp_path / "out.hdf5"
    common = ["--piece-tokens", 60, "--no-progress"]
    failed = run(*torchrun(script, "embed", text, out, *fixture_model, *common))
    assert failed.returncode != 0
    assert "no space left on device (injected)" in failed.stderr
    assert "another process of this torchrun job failed" in failed.stderr
    assert not out.exists()
    assert (job_folder(out) / "job.json").is_file()

    resumed = run(*torchrun("-m", "elmo_core", "embed", text, out, *fixture_model, *common))
    assert resumed.returncode == 0, resumed.stderr
    single = run(BIN / "elmo", "embed", text, tmp_path / "one.hdf5", *fixture_model, *common)
    assert single.returncode == 0, single.stderr
    assert_same_file(out, tmp_path / "one.hdf5")


def test_resuming_with_other_settings_or_input_is_refused(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    text = tmp_path / "in.txt"
    text.write_text("a b c\nd e\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    folder = job_folder(out)
    # An unfinished job: plan it, as a killed run would have left it.
    from elmo_core.apps.embed_job import prepare_job

    prepare_job(text, folder, 100, {"layers": "all"})
    other = run(BIN / "elmo", "embed", text, out, "--model", tmp_path / "model", "--layers", "top")
    assert other.returncode == 2
    assert (
        "holds an unfinished job with other settings" in other.stderr
        and "layers: 'all' then, 'top' now" in other.stderr
    )
    text.write_text("something else\n", encoding="utf-8")
    changed = run(BIN / "elmo", "embed", text, out, "--model", tmp_path / "model")
    assert changed.returncode == 2 and "unfinished job for another input" in changed.stderr
    assert not out.exists() and folder.is_dir()
    shutil.rmtree(folder)
    ok = run(BIN / "elmo", "embed", text, out, "--model", tmp_path / "model", "--no-progress")
    assert ok.returncode == 0, ok.stderr
    assert read_file(out)[2] == {"0": ["something", "else"]}


def test_bom_crlf_and_a_missing_final_newline_read_as_plain_lines(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    text = tmp_path / "in.txt"
    text.write_bytes("\ufeffa b\r\n\r\nc".encode("utf-8"))
    result = run(BIN / "elmo", "embed", text, tmp_path / "o.hdf5", "--model", tmp_path / "model", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert read_file(tmp_path / "o.hdf5")[2] == {"0": ["a", "b"], "1": [], "2": ["c"]}


def test_a_token_with_a_nul_character_is_embedded_and_recorded_with_a_replacement(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "in.txt").write_text("a\x00b c\n", encoding="utf-8")
    result = run(BIN / "elmo", "embed", tmp_path / "in.txt", tmp_path / "o.hdf5", "--model", tmp_path / "model")
    assert result.returncode == 0, result.stderr
    _, data, tokens = read_file(tmp_path / "o.hdf5")
    assert tokens == {"0": ["a\ufffdb", "c"]} and data["0"].shape == (3, 2, 16)


def test_bad_batch_or_window_arguments_fail_before_a_job_folder_exists(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    for extra, message in (
        (["--batch-size", "0"], "--batch-size must be a positive integer"),
        (["--batch-tokens", "-1"], "--batch-tokens must be a positive integer"),
        (["--window-tokens", "8", "--window-context", "4"], "must be less than half of --window-tokens"),
    ):
        result = run(BIN / "elmo", "embed", tmp_path / "in.txt", out, "--model", tmp_path / "model", *extra)
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert not out.exists() and not job_folder(out).exists()


def _many_lines(path: Path, n: int = 1500) -> Path:
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(300)]
    path.write_text("".join(" ".join(rng.choice(words, rng.integers(3, 12))) + "\n" for _ in range(n)), "utf-8")
    return path


def test_a_second_run_on_the_same_output_stops_at_once_and_the_first_completes_alone(tmp_path):
    # R43: a scheduler's retry, or a second terminal, on the job folder of a live run.
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    text = _many_lines(tmp_path / "in.txt")
    common = ["--model", tmp_path / "model", "--piece-tokens", 200, "--no-progress"]
    reference = run(BIN / "elmo", "embed", text, tmp_path / "reference.hdf5", *common)
    assert reference.returncode == 0, reference.stderr
    out = tmp_path / "out.hdf5"
    folder = job_folder(out)
    first = subprocess.Popen(
        [str(a) for a in (BIN / "elmo", "embed", text, out, *common)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.monotonic() + TIMEOUT
    while not (folder / "job.json").exists():
        assert first.poll() is None and time.monotonic() < deadline, "finished before the second run started"
        time.sleep(0.005)
    first.send_signal(signal.SIGSTOP)  # alive and owning the job, with pieces in flight
    try:
        before = sorted(p.name for p in folder.iterdir())
        second = run(BIN / "elmo", "embed", text, out, *common)
        assert second.returncode == 2, second.stderr
        [line] = second.stderr.strip().splitlines()
        assert line.startswith(f"error: another process is working on {out}") and "torchrun" in line, line
        assert sorted(p.name for p in folder.iterdir()) == before  # nothing of the first run deleted
    finally:
        first.send_signal(signal.SIGCONT)
    _, stderr = first.communicate(timeout=TIMEOUT)
    assert first.returncode == 0, stderr
    assert "already done" not in stderr and not folder.exists()
    assert_same_file(out, tmp_path / "reference.hdf5")


def test_a_killed_runs_job_folder_is_free_for_the_next_run(tmp_path):
    # The lock dies with its process: no stale lock keeps the job from being resumed.
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    text = _many_lines(tmp_path / "in.txt", 300)
    common = ["--model", tmp_path / "model", "--piece-tokens", 200, "--no-progress"]
    out = tmp_path / "out.hdf5"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from elmo_core.files.folder_lock import FolderLock; "
            "lock = FolderLock(sys.argv[1], 'busy'); print('locked', flush=True); time.sleep(600)",
            job_folder(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline() == "locked\n"
    busy = run(BIN / "elmo", "embed", text, out, *common)
    assert busy.returncode == 2 and "another process is working on" in busy.stderr
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=TIMEOUT)
    holder.stdout.close()
    again = run(BIN / "elmo", "embed", text, out, *common)
    assert again.returncode == 0, again.stderr
    assert not job_folder(out).exists() and read_file(out)[1]


def _compress(path: Path, suffix: str) -> Path:
    import bz2
    import gzip
    import lzma

    opener = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}[suffix]
    target = path.with_name(path.name + suffix)
    with opener(target, "wb") as f:
        f.write(path.read_bytes())
    return target


@pytest.mark.parametrize("form", [".xz", ".gz", ".bz2", "-", "/dev/stdin"])
def test_embed_reads_compressed_files_and_standard_input_like_the_plain_file(tmp_path, form):
    # R48: the inputs `elmo perplexity` and `elmo train` read; a stream is not resumable from the
    # file, so it is copied aside, and nothing is left behind.
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    text = _many_lines(tmp_path / "in.txt", 120)
    text.write_bytes(b"\xef\xbb\xbf" + text.read_bytes().replace(b"\n", b"\r\n", 3) + b"\n  \nlast")
    common = ["--model", tmp_path / "model", "--piece-tokens", 100, "--no-progress"]
    plain = run(BIN / "elmo", "embed", text, tmp_path / "plain.hdf5", *common)
    assert plain.returncode == 0, plain.stderr
    out = tmp_path / "out.hdf5"
    if form.startswith("."):
        result = run(BIN / "elmo", "embed", _compress(text, form), out, *common)
    else:
        result = subprocess.run(
            [str(BIN / "elmo"), "embed", form, str(out), *map(str, common)],
            input=text.read_bytes(),
            capture_output=True,
            timeout=TIMEOUT,
        )
        result.stderr = result.stderr.decode()
    assert result.returncode == 0, result.stderr
    assert_same_file(out, tmp_path / "plain.hdf5")
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(["model", "in.txt", "plain.hdf5", "out.hdf5"] + ([f"in.txt{form}"] if "." in form else []))


def test_a_stream_that_is_not_utf8_is_one_line_and_leaves_nothing_behind(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    result = subprocess.run(
        [str(BIN / "elmo"), "embed", "-", str(tmp_path / "out.hdf5"), "--model", str(tmp_path / "model")],
        input=b"fine\ncaf\xe9\n",
        capture_output=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 2
    message = result.stderr.decode().strip()
    assert message.startswith("error: - is not UTF-8 text (line 2: invalid continuation byte). Convert it to UTF-8")
    assert "\n" not in message and "iconv -f CP1252 -t UTF-8 in.txt > out.txt" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_stop_request_ends_the_job_at_the_next_line_and_the_same_call_resumes_it(tmp_path):
    # The check elmo embed's signal handler sets: a stop is kept even where Python drops the
    # KeyboardInterrupt the handler raised (see test_cli's test of the handler itself).
    from elmo_core.apps.embed_file import embed_file

    elmo = make_tiny_elmo()
    text = _many_lines(tmp_path / "in.txt", 300)
    out, reference = tmp_path / "out.hdf5", tmp_path / "reference.hdf5"
    embed_file(elmo, text, reference, piece_tokens=200)
    asked: list[int] = []

    def stop_after_two_pieces() -> bool:
        asked.append(1)
        return len(list(job_folder(out).glob("piece-*.h5"))) >= 2

    with pytest.raises(KeyboardInterrupt):
        embed_file(elmo, text, out, piece_tokens=200, stop_requested=stop_after_two_pieces)
    assert not out.exists() and asked
    assert sorted(p.name for p in job_folder(out).glob("piece-*")) == ["piece-000000.h5", "piece-000001.h5"]
    result = embed_file(elmo, text, out, piece_tokens=200)
    assert result.pieces_resumed == 2 and not job_folder(out).exists()
    assert_same_file(out, reference)


def test_a_job_folder_that_is_a_broken_link_is_one_error_not_a_hang(tmp_path):
    from elmo_core.files.folder_lock import FolderLock
    from elmo_core.model.errors import ElmoError

    link = tmp_path / "out.h5.partial"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(ElmoError, match=r"exists but is not a folder \(a file, or a link to a missing place\)"):
        FolderLock(link, busy="busy")
    (tmp_path / "file.partial").write_text("x")
    with pytest.raises(ElmoError, match=r"exists but is not a folder"):
        FolderLock(tmp_path / "file.partial", busy="busy")


class _RecordingBar:
    """A progress bar that remembers every step (in place of tqdm's)."""

    def __init__(self, total: int, initial: int) -> None:
        self.total, self.n, self.disable = total, initial, False
        self.steps: list[int] = []

    def update(self, n: int) -> None:
        self.steps.append(n)
        self.n += n

    def close(self) -> None:
        pass


def test_progress_on_one_long_line_advances_window_by_window_to_its_word_count(tmp_path, monkeypatch):
    from elmo_core.apps import embed_file as module

    bars: list[_RecordingBar] = []

    def recording_bar(job, left, show):
        bars.append(_RecordingBar(job["tokens"], job["tokens"] - sum(p.tokens for p in left)))
        return bars[-1]

    monkeypatch.setattr(module, "_progress_bar", recording_bar)
    words = [f"w{i % 37}" for i in range(3001)]
    (tmp_path / "in.txt").write_text("a b c\n" + " ".join(words) + "\nd e\n", encoding="utf-8")
    elmo = make_tiny_elmo(dropout=0.0)
    settings = {"window_tokens": 64, "batch_tokens": 400}
    module.embed_file(elmo, tmp_path / "in.txt", tmp_path / "out.hdf5", progress=True, **settings)
    (bar,) = bars
    assert bar.n == bar.total == 3006 and sum(bar.steps) == 3006
    # The long line moves the bar about once per batch of windows (3001 tokens in windows keeping
    # 48 each, 6 windows per batch), not once at its end.
    assert len(bar.steps) >= 3001 // (48 * 6)
    assert max(bar.steps) < 3001 // 5
    with h5py.File(tmp_path / "out.hdf5", "r") as out:
        assert out["1"].shape == (3, 3001, 16)


def test_the_windows_of_one_long_line_run_together_and_give_the_vectors_of_one_window_per_pass():
    from elmo_core import embed_sentences

    elmo = make_tiny_elmo(dropout=0.0)
    line = [[f"w{i % 37}" for i in range(700)]]
    together = embed_sentences(elmo, line, window_tokens=64, batch_tokens=4096)[0]  # 13 windows per pass
    alone = embed_sentences(elmo, line, window_tokens=64, batch_size=1)[0]  # one window per pass
    np.testing.assert_allclose(together, alone, atol=1e-6, rtol=0)
    whole_passes = embed_sentences(elmo, [line[0][:64]], window_tokens=64)[0]  # a line of one window
    np.testing.assert_allclose(together[:, :56], whole_passes[:, :56], atol=1e-6, rtol=0)


@pytest.mark.parametrize("suffix", [".h5", ".parquet"])
def test_an_output_holding_another_runs_vectors_is_never_replaced_without_a_word(tmp_path, suffix):
    # R71: a second `elmo embed` with another input into the same OUTPUT replaced the first's vectors.
    if suffix == ".parquet":
        pytest.importorskip("pyarrow", reason="a Parquet OUTPUT needs pyarrow: pip install 'elmo-bilm[parquet]'")
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    first, second = tmp_path / "in.txt", tmp_path / "in2.txt"
    first.write_text("a b c\nthe river bank\n", encoding="utf-8")
    second.write_text("x y\n", encoding="utf-8")
    out = tmp_path / f"out{suffix}"
    common = ["--model", tmp_path / "model", "--no-progress"]
    assert run(BIN / "elmo", "embed", first, out, *common).returncode == 0
    before = out.read_bytes()
    fix = "Give a fresh OUTPUT, or replace it on purpose with --overwrite (Python: overwrite=True)."
    refused = run(BIN / "elmo", "embed", second, out, *common)
    assert (refused.returncode, refused.stderr.splitlines()) == (
        2,
        [
            f"error: OUTPUT {out} already exists, and this command would overwrite it. It holds the vectors of "
            f"another input ({first}, 2 lines). {fix}"
        ],
    )
    piped = subprocess.run(
        [str(BIN / "elmo"), "embed", "-", str(out), *map(str, common)], input=b"x y\n", capture_output=True
    )
    assert piped.returncode == 2 and b"It holds the vectors of another input" in piped.stderr
    other = run(BIN / "elmo", "embed", first, out, *common, "--layers", "top")
    assert other.returncode == 2
    assert f"It holds the vectors of {first} with other settings (layers: 'all' then, 'top' now). {fix}" in other.stderr
    again = run(BIN / "elmo", "embed", first, out, *common)
    assert (again.returncode, again.stderr.splitlines()) == (
        0,
        [
            f"{out} is already complete: it holds the vectors of this input with these settings (2 lines, 6 tokens); "
            "nothing to do."
        ],
    )
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "in2.txt", "model", out.name]
    replaced = run(BIN / "elmo", "embed", second, out, *common, "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    if suffix == ".h5":
        assert read_file(out)[2] == {"0": ["x", "y"]}
    else:
        import pyarrow.parquet as pq

        assert pq.read_table(out, columns=["line", "tokens"]).to_pylist() == [{"line": 0, "tokens": ["x", "y"]}]


def test_embed_file_refuses_an_output_that_is_not_its_own_and_recognises_its_own_job(tmp_path):
    from elmo_core.apps.embed_file import embed_file
    from elmo_core.model.errors import ElmoError

    elmo = make_tiny_elmo()
    text = tmp_path / "in.txt"
    text.write_text("a b\n", encoding="utf-8")
    foreign = tmp_path / "notes.h5"
    foreign.write_text("my notes\n", encoding="utf-8")
    with pytest.raises(ElmoError, match=r"It holds no record of an elmo embed job"):
        embed_file(elmo, text, foreign)
    assert foreign.read_text(encoding="utf-8") == "my notes\n"
    out = tmp_path / "out.h5"
    assert not embed_file(elmo, text, out).already_complete
    done = embed_file(elmo, text, out)
    assert (done.already_complete, done.lines, done.tokens) == (True, 1, 2)
    text.write_text("a c\n", encoding="utf-8")  # the same name, another content
    with pytest.raises(ElmoError, match=r"It holds the vectors of another input"):
        embed_file(elmo, text, out)
    with pytest.raises(ElmoError, match=r"with other settings \(model: "):
        embed_file(make_tiny_elmo(seed=1), tmp_path / "in.txt", out)
    embed_file(elmo, text, out, overwrite=True)
    assert read_file(out)[2] == {"0": ["a", "c"]}


PEAK_RSS = r"""
import resource, subprocess, sys
ran = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(f"{ran.returncode}\n{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\n{ran.stderr}")
"""


def _peak_rss(*args: object, env: dict[str, str]) -> tuple[int, int, str]:
    """(exit status, peak resident kB, stderr) of a command."""
    out = run(sys.executable, "-c", PEAK_RSS, *args, env=env).stdout
    status, peak, stderr = out.split("\n", 2)
    return int(status), int(peak), stderr


def test_a_decompression_bomb_is_refused_in_bounded_memory_naming_the_line_and_the_limit(tmp_path):
    # R63: a small .xz holding one endless line was read and stored whole (8.9 GB for 1.5 GiB of letters).
    import lzma

    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    bomb = tmp_path / "bomb.txt.xz"
    with lzma.open(bomb, "wb", preset=0) as f:
        f.write(b"a b c\n")
        for _ in range(256):
            f.write(b"a" * (1 << 20))  # 256 MiB of letters, no newline: about 40 kB on disk
    small = tmp_path / "small.txt"
    small.write_text("a b c\n", encoding="utf-8")
    env = {"ELMO_MAX_LINE_BYTES": "1000000"}
    common = ["--model", tmp_path / "model", "--no-progress"]
    status, baseline, stderr = _peak_rss(BIN / "elmo", "embed", small, tmp_path / "small.h5", *common, env=env)
    assert status == 0, stderr
    status, peak, stderr = _peak_rss(BIN / "elmo", "embed", bomb, tmp_path / "out.h5", *common, env=env)
    assert (status, stderr.splitlines()) == (
        2,
        [
            f"error: {bomb} line 2 holds more than 1,000,000 bytes, the longest line elmo-bilm reads (its end was "
            "not read). Split the text into shorter lines, or raise the limit: ELMO_MAX_LINE_BYTES=10000000."
        ],
    )
    assert peak - baseline < 64 * 1024, (peak, baseline)  # kB: far below the line's 256 MiB
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.txt.xz", "model", "small.h5", "small.txt"]
