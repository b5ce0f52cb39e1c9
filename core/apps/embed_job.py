"""The job folder `OUTPUT.partial/` of `elmo embed` and its record `job.json`.

The record holds the input's sha256, the settings and the pieces. A run resumes a job only
when its input and settings match the record.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..files.atomic_files import atomic_write
from ..files.hdf5_files import open_hdf5
from ..files.parquet_files import read_job_record
from ..files.text_files import check_output_is_new, open_binary
from ..model.errors import ElmoError
from ..runtime.embedding import EmbedSettings
from ..runtime.token_cache import float64_sum
from .pieces import Piece, plan_pieces

if TYPE_CHECKING:
    from ..model.elmo import Elmo

logger = logging.getLogger(__name__)

JOB_FORMAT = 1
JOB_NAME = "job.json"
PARQUET_SUFFIXES = (".parquet", ".pq")


def job_folder(output: str | Path) -> Path:
    """`OUTPUT.partial/`: where the pieces of OUTPUT live until the job completes."""
    output = Path(output)
    return output.with_name(output.name + ".partial")


@dataclass(frozen=True)
class JobFiles:
    """The files of one `embed_file` job. `spool` is the copy of a stream INPUT, read in its place."""

    input_path: Path
    output_path: Path
    piece_tokens: int
    spool: Path | None = None
    overwrite: bool = False

    @property
    def folder(self) -> Path:
        return job_folder(self.output_path)

    @property
    def text(self) -> Path:
        return self.spool if self.spool is not None else self.input_path


def piece_path(folder: Path, piece: Piece | int) -> Path:
    index = piece.index if isinstance(piece, Piece) else piece
    suffix = ".parquet" if is_parquet(folder.name.removesuffix(".partial")) else ".h5"
    return folder / f"piece-{index:06d}{suffix}"


def is_parquet(output_path: str | Path) -> bool:
    """True when OUTPUT is a Parquet file (by its suffix), else it is hdf5."""
    return Path(output_path).suffix.lower() in PARQUET_SUFFIXES


def model_checksum(model: torch.nn.Module) -> str:
    """A short hash of a model's parameter values, to refuse resuming with another model."""
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            digest.update(f"{name}:{tuple(parameter.shape)}:{float64_sum(parameter)!r};".encode())
    return digest.hexdigest()[:16]


def recorded_settings(
    model: Elmo,
    settings: EmbedSettings,
    tokenize: Callable[[str], list[str]] | None,
    record: dict[str, Any] | None,
) -> dict[str, Any]:
    """Everything that changes the vectors, as job.json records it. A resumed job must match."""
    return {
        "layers": str(settings.layers),
        "window_tokens": settings.window_tokens or 0,
        "window_context": settings.window_context,
        "tokenize": None if tokenize is None else getattr(tokenize, "__name__", "custom"),
        "autocast": str(settings.autocast_dtype),
        "model": model_checksum(model),
        "dim": model.output_dim,
        **(record or {}),
    }


def prepare_job(  # noqa: ANN202
    input_path: Path, folder: Path, piece_tokens: int, settings: dict[str, Any], input_name: str | None = None
):
    """Plan a new job, or check and resume the one in `folder`. Returns (job, pieces to do).

    The caller holds `folder`'s lock, so the leftovers deleted here are a stopped run's.
    `input_name` is how job.json names the input (a stream's name, when `input_path` is its copy).
    """
    job_file = folder / JOB_NAME
    if job_file.is_file():
        job = json.loads(job_file.read_text(encoding="utf-8"))
        _, lines, tokens, sha256 = plan_pieces(input_path, piece_tokens, input_name)
        if job.get("format") != JOB_FORMAT or job.get("input_sha256") != sha256:
            raise ElmoError(
                f"{folder} holds an unfinished job for another input (or another version of {input_path.name}). "
                f"To embed {input_path}, delete {folder} (or write to another OUTPUT); to finish the other "
                "job, run it with its own input."
            )
        details = _changes(job["settings"], settings)
        if details:
            raise ElmoError(
                f"{folder} holds an unfinished job with other settings ({details}). Run the same command "
                f"as before to finish it, or delete {folder} to start over with the new settings."
            )
        for leftover in folder.glob("*.partial*"):  # what the stopped run was writing (atomic_path)
            leftover.unlink()
        pieces = [Piece(**p) for p in job["pieces"]]
        todo = [p.index for p in pieces if not piece_path(folder, p).is_file()]
        logger.info("resuming %s: %d of %d pieces left", folder, len(todo), len(pieces))
        return job, todo
    pieces, lines, tokens, sha256 = plan_pieces(input_path, piece_tokens, input_name)
    folder.mkdir(exist_ok=True)
    job = {
        "format": JOB_FORMAT,
        "input": input_name or str(input_path),
        "input_sha256": sha256,
        "lines": lines,
        "tokens": tokens,
        "piece_tokens": piece_tokens,
        "settings": settings,
        "pieces": [asdict(p) for p in pieces],
    }
    atomic_write(job_file, lambda tmp: tmp.write_text(json.dumps(job, indent=1) + "\n", encoding="utf-8"))
    return job, [p.index for p in pieces]


def finished_job(files: JobFiles, job_settings: dict[str, Any]) -> dict[str, Any] | None:
    """The job OUTPUT records when it holds this very job. None when OUTPUT may be written.

    Raises:
        ElmoError: when OUTPUT holds anything else, naming what it holds and the ways on.
    """
    output = files.output_path
    if files.overwrite or not os.path.lexists(output):
        return None
    recorded = _recorded_job(output)
    settings = json.loads(json.dumps(job_settings))  # as job.json and OUTPUT record them
    if recorded is None:
        holds = "no record of an elmo embed job (another program's file, or an older version's output)"
    elif recorded["settings"] != settings:
        holds = f"the vectors of {recorded['input']} with other settings ({_changes(recorded['settings'], settings)})"
    elif recorded["input_sha256"] != _sha256(files.text):
        holds = f"the vectors of another input ({recorded['input']}, {recorded['lines']} lines)"
    else:
        return recorded
    check_output_is_new(
        "OUTPUT",
        output,
        f"It holds {holds}. Give a fresh OUTPUT, or replace it on purpose with --overwrite (Python: overwrite=True).",
    )
    return None


def _recorded_job(output: Path) -> dict[str, Any] | None:
    try:
        if output.suffix.lower() in PARQUET_SUFFIXES:
            job = json.loads(read_job_record(output))
        else:
            with open_hdf5(output, "r") as f:
                job = json.loads(f.attrs["job"])
    except (OSError, KeyError, ValueError, TypeError, ElmoError):  # unreadable, no record, not JSON
        return None
    keys = ("input", "input_sha256", "lines", "tokens", "pieces", "settings")
    return job if isinstance(job, dict) and all(k in job for k in keys) else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open_binary(path) as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    changed = {k: (old.get(k), v) for k, v in new.items() if old.get(k) != v}
    return "; ".join(f"{k}: {then!r} then, {now!r} now" for k, (then, now) in changed.items())
