"""A full file system is one clear line, never a crash, in every writer.

`elmo embed` checks the free space before any work, before each piece and before the
merge (HDF5 crashes the process when the disk fills up under it), and keeps the finished
pieces for a resume. The model writers (model folders, `save_pretrained`, `nlp.to_disk`,
checkpoints) turn the failed write into one `DiskFullError` and leave nothing half-written
under a final name. The cheap tests simulate the full disk; the slow one mounts a small
tmpfs in a private mount namespace (root and `unshare` needed, else skipped).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import elmo_core.files.atomic_files as atomic_files
from elmo_core import save_model_folder
from elmo_core.apps.embed_file import embed_file
from elmo_core.apps.embed_job import job_folder
from elmo_core.model.errors import DiskFullError
from tests.conftest import make_tiny_elmo

_FULL = "Error while serializing: I/O error: No space left on device (os error 28)"  # safetensors' words


def _text(path: Path, lines: int = 60) -> Path:
    path.write_text("".join(f"line {i} of the river bank text\n" for i in range(lines)), encoding="utf-8")
    return path


def test_embed_refuses_before_any_work_when_the_output_cannot_fit(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic_files, "free_bytes", lambda path: 1_000)
    output = tmp_path / "out.h5"
    with pytest.raises(DiskFullError) as caught:
        embed_file(make_tiny_elmo(), _text(tmp_path / "in.txt"), output, piece_tokens=100)
    message = str(caught.value)
    assert message.startswith(f"OUTPUT {output}: its file system is full: the job needs ")
    assert "and has 1.0 kB free" in message and "run the same command again to resume" in message
    assert "\n" not in message
    assert not output.exists() and not list(job_folder(output).glob("piece-*"))


def test_embed_stops_before_a_piece_that_cannot_fit_keeps_the_finished_ones_and_resumes(tmp_path, monkeypatch):
    real = atomic_files.free_bytes
    calls = []

    def free_bytes(path):  # room for the start check and the first piece only
        calls.append(path)
        return real(path) if len(calls) <= 2 else 10_000

    monkeypatch.setattr(atomic_files, "free_bytes", free_bytes)
    model, text, output = make_tiny_elmo(), _text(tmp_path / "in.txt"), tmp_path / "out.h5"
    with pytest.raises(DiskFullError, match=r"the job needs .* more and has 10.0 kB free"):
        embed_file(model, text, output, piece_tokens=100)
    assert [p.name for p in sorted(job_folder(output).glob("piece-*"))] == ["piece-000000.h5"]
    assert not list(job_folder(output).glob(".*partial*")) and not output.exists()
    monkeypatch.setattr(atomic_files, "free_bytes", real)
    result = embed_file(model, text, output, piece_tokens=100)
    assert result.pieces_resumed == 1 and result.lines == 60 and output.is_file()


def test_elmo_embed_on_a_full_disk_is_one_line_and_rc_2(tmp_path):
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    args = [
        "elmo",
        "embed",
        str(_text(tmp_path / "in.txt")),
        str(tmp_path / "o.h5"),
        "--model",
        str(tmp_path / "model"),
    ]
    code = (
        "import sys; import elmo_core.files.atomic_files as files; files.free_bytes = lambda path: 5_000; "
        f"sys.argv = {args!r}; from elmo_core.apps.cli import main; main()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("error: OUTPUT ") and "its file system is full: the job needs" in lines[0]


def _fail_on_save(monkeypatch, module: str) -> None:
    import importlib

    def full(*args, **kwargs):
        raise Exception(_FULL)  # noqa: TRY002 - safetensors raises its own SafetensorError(Exception)

    monkeypatch.setattr(importlib.import_module(module), "save_file", full)


def test_save_model_folder_on_a_full_disk_is_one_error_and_writes_nothing(tmp_path, monkeypatch):
    _fail_on_save(monkeypatch, "safetensors.torch")
    with pytest.raises(DiskFullError, match=r"model.safetensors: its file system is full"):
        save_model_folder(make_tiny_elmo(), tmp_path / "model")
    assert list((tmp_path / "model").iterdir()) == []


def test_save_pretrained_on_a_full_disk_is_one_error_and_leaves_the_old_files(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from transformers import AutoModel

    import hf_elmo  # noqa: F401
    from elmo_core import default_model_dir

    model = AutoModel.from_pretrained(default_model_dir())
    model.save_pretrained(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    import transformers.modeling_utils as modeling_utils

    def full(*args, **kwargs):
        raise Exception(_FULL)  # noqa: TRY002 - safetensors raises its own SafetensorError(Exception)

    monkeypatch.setattr(modeling_utils, "safe_save_file", full)
    model.config.dropout = 0.25
    with pytest.raises(DiskFullError, match=r"its file system is full"):
        model.save_pretrained(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # config.json not changed either


def test_spacy_to_disk_on_a_full_disk_is_one_error(tmp_path, monkeypatch):
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(tmp_path / "model")}})
    save_model_folder(make_tiny_elmo(), tmp_path / "model")
    nlp.initialize()
    _fail_on_save(monkeypatch, "safetensors.torch")
    with pytest.raises(DiskFullError, match=r"its file system is full"):
        nlp.to_disk(tmp_path / "pipeline")
    assert not list((tmp_path / "pipeline" / "elmo").rglob("*.safetensors"))


def test_a_checkpoint_on_a_full_disk_is_one_error(tmp_path, monkeypatch):
    import torch

    from elmo_core.apps.training.checkpoint import atomic_torch_save

    def full(obj, f):
        f.write(b"half")
        try:
            raise OSError(28, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")  # noqa: B904

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(DiskFullError, match=r"checkpoint.pt: its file system is full"):
        atomic_torch_save({"step": 1}, tmp_path / "checkpoint.pt")
    assert list(tmp_path.iterdir()) == []


_MOUNTED = r"""
import json, subprocess, sys
from pathlib import Path
import torch
full, work = Path(sys.argv[1]), Path(sys.argv[2])
results = {}
embed = subprocess.run(
    [sys.argv[3], "embed", str(work / "in.txt"), str(full / "out.h5"), "--model", str(work / "model"), "--no-progress"],
    capture_output=True, text=True,
)
results["embed"] = [embed.returncode, embed.stderr]
import hf_elmo, spacy
from transformers import AutoModel
from elmo_core import load_model_folder, save_model_folder
from elmo_core.apps.training.checkpoint import atomic_torch_save
model = load_model_folder(work / "model")
def attempt(name, save):
    try:
        save()
        results[name] = ["saved", ""]
    except Exception as err:
        results[name] = [type(err).__name__, str(err)]
attempt("save_model_folder", lambda: save_model_folder(model, full / "m1"))
attempt("save_pretrained", lambda: AutoModel.from_pretrained(work / "model").save_pretrained(full / "m2"))
nlp = spacy.blank("en")
nlp.add_pipe("elmo", config={"model": {"path": str(work / "model")}})
nlp.initialize()
attempt("to_disk", lambda: nlp.to_disk(full / "m3"))
attempt("checkpoint", lambda: atomic_torch_save({"w": torch.zeros(2_000_000)}, full / "checkpoint.pt"))
results["files"] = sorted(str(p.relative_to(full)) for p in full.rglob("*") if p.is_file())
print(json.dumps(results))
"""


@pytest.mark.slow
def test_every_writer_on_a_full_tmpfs_ends_with_one_line_and_no_crash(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a small tmpfs in a private mount namespace")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not permitted here: {probe.stderr.decode(errors='replace').strip()}")
    from elmo_core import default_model_dir

    work, full = tmp_path / "work", tmp_path / "full"
    work.mkdir()
    full.mkdir()
    shutil.copytree(default_model_dir(), work / "model", ignore=shutil.ignore_patterns("lm_head*", "vocab*"))
    (work / "in.txt").write_text("".join(f"w{i} " * 11 + "\n" for i in range(600)), encoding="utf-8")
    elmo = str(Path(sys.executable).parent / "elmo")
    script = f"mount -t tmpfs -o size=3m tmpfs {full} && exec {sys.executable} -c '{_MOUNTED}' {full} {work} {elmo}"
    if "'" in _MOUNTED:
        pytest.fail("the script must not hold single quotes")
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    rc, stderr = results["embed"]
    assert rc == 2, stderr[-2000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "its file system is full: the job needs" in lines[0], stderr[-2000:]
    for writer in ("save_model_folder", "save_pretrained", "to_disk", "checkpoint"):
        kind, message = results[writer]
        assert kind == "DiskFullError" and "its file system is full" in message and "\n" not in message, (
            writer,
            kind,
            message,
        )
    half = [f for f in results["files"] if f.endswith((".safetensors", ".pt", "out.h5")) and "/." not in f"/{f}"]
    assert half == []
