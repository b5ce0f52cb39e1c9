"""`elmo embed`: a text file in, one hdf5 or Parquet file out, resumable and shared by torchrun processes.

Rank 0 plans the job or resumes it (`elmo_core.apps.embed_job`). Every rank embeds its share
of the pieces (`elmo_core.apps.pieces`) with `embed_lines`, as a single process does, so the
output does not depend on the number of processes (up to float rounding). Rank 0 then merges
the piece files into OUTPUT. The layout on disk and the rules of resuming: docs/guides/big-corpora.md.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..files.atomic_files import atomic_path, check_free_space, full_disk_as_one_error
from ..files.folder_lock import FolderLock
from ..files.hdf5_files import HDF5_FILE_BYTES, HDF5_OBJECT_BYTES, HDF5_STRING_BYTES
from ..files.parquet_files import check_store_dtype, import_pyarrow
from ..files.text_files import check_input_file, check_output_spares_inputs, is_stream, open_binary
from ..model.checks import check_int
from ..model.errors import ElmoError
from ..runtime.embedding import EmbedSettings, check_model
from .console import progress_bar
from .embed_job import (
    JOB_NAME,
    JobFiles,
    finished_job,
    is_parquet,
    job_folder,
    piece_path,
    prepare_job,
    recorded_settings,
)
from .hdf5_output import Hdf5Output
from .lines import embed_lines
from .pieces import DEFAULT_PIECE_TOKENS, Piece, PieceReader, assign_pieces

if TYPE_CHECKING:
    from ..model.elmo import Elmo

__all__ = ["embed_file"]


@dataclass(frozen=True)
class EmbedFileResult:
    """What `embed_file` did. `already_complete`: OUTPUT already held this job, nothing was done."""

    lines: int
    tokens: int
    pieces: int
    pieces_resumed: int
    already_complete: bool = False


def check_embed_paths(input_path: str | Path, output_path: str | Path) -> None:
    """Raise a one-line ElmoError, before any work, unless INPUT can be read and OUTPUT written without harm.

    OUTPUT must not be INPUT, and its job folder (deleted at the end) must not hold INPUT.
    """
    check_input_file(input_path, "INPUT")
    output = Path(output_path)
    if output.is_dir():
        raise ElmoError(f"OUTPUT {output} is a folder; give the path of the file to write (.hdf5 or .parquet).")
    if not output.parent.is_dir():
        raise ElmoError(f"the folder of OUTPUT ({output.parent}) does not exist; create it first.")
    check_output_spares_inputs(
        [("OUTPUT", output)], [("INPUT", input_path)], folders=[("OUTPUT's job folder", job_folder(output), None)]
    )


def embed_file(
    model: Elmo,
    input_path: str | Path,
    output_path: str | Path,
    settings: EmbedSettings | None = None,
    *,
    tokenize: Callable[[str], list[str]] | None = None,
    piece_tokens: int = DEFAULT_PIECE_TOKENS,
    store_dtype: str = "float32",
    record: dict[str, Any] | None = None,
    progress: bool = False,
    stop_requested: Callable[[], bool] | None = None,
    overwrite: bool = False,
    **overrides: Any,
) -> EmbedFileResult:
    """Write ELMo vectors for every line of a text file to one hdf5 or Parquet file.

    Runs on every process of a torchrun job when a process group is initialised, else alone.
    Resumes the job in `job_folder(output_path)` when there is one.

    Args:
        model: An `Elmo` (stateless), already on its device.
        input_path: UTF-8 text, one sentence (or document) per line.
        output_path: The file to write (.parquet or .pq for Parquet, else hdf5). An existing
            one that holds this very job is left as it is. Another is refused unless `overwrite`.
        settings: `EmbedSettings`, as for `embed_sentences`.
        tokenize: Splits a line into tokens. None: `str.split()`.
        piece_tokens: Tokens per piece. A resumed job keeps the pieces it started with.
        store_dtype: "float32" or "float16".
        record: Anything else that changes the vectors, e.g. the tokenizer and precision.
            Recorded in job.json and checked when resuming.
        progress: Show a progress bar (rank 0 only), in tokens of all ranks.
        stop_requested: Asked after every line. True stops the job with KeyboardInterrupt.
            The finished pieces stay, and the same call resumes.
        overwrite: Replace an OUTPUT that holds another run's vectors.
        **overrides: `EmbedSettings` fields replacing those of `settings`.

    Returns:
        `EmbedFileResult`.

    Raises:
        ElmoError: for an unreadable input, an OUTPUT or job folder of another input or
            settings, or a failure of any process (OUTPUT is then not written).
        ValueError: for a bad `layers`, batch budget or window, before anything is written.
    """
    # Bad arguments fail here, before a job folder records them as the job's settings.
    settings = EmbedSettings.given(settings, overrides)
    check_model(model, settings)
    piece_tokens = check_int("piece_tokens", piece_tokens)
    check_store_dtype(store_dtype)
    job_settings = recorded_settings(model, settings, tokenize, {"store_dtype": store_dtype, **(record or {})})
    check_embed_paths(input_path, output_path)
    files = JobFiles(Path(input_path), Path(output_path), piece_tokens, overwrite=overwrite)
    if is_stream(input_path):
        return _run_stream_job(model, files, job_settings, settings, tokenize, progress, stop_requested)
    return _run_job(model, files, job_settings, settings, tokenize, progress, stop_requested)


def _run_stream_job(
    model: Elmo,
    files: JobFiles,
    job_settings: dict[str, Any],
    settings: EmbedSettings,
    tokenize: Callable[[str], list[str]] | None,
    progress: bool,
    stop_requested: Callable[[], bool] | None,
) -> EmbedFileResult:
    """Copy a stream to a hidden file beside OUTPUT, so its pieces can be read back and the job resumed."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        raise ElmoError(
            f"INPUT {files.input_path} is a stream (standard input or a pipe), which several torchrun processes "
            "cannot share; save it to a file first (cat > input.txt) and embed that."
        )
    output = files.output_path
    fd, name = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.input-", suffix=".txt")
    spool = Path(name)
    try:
        with full_disk_as_one_error(spool), os.fdopen(fd, "wb") as copy, open_binary(files.input_path) as stream:
            shutil.copyfileobj(stream, copy, 1 << 20)
        spooled = replace(files, spool=spool)
        return _run_job(model, spooled, job_settings, settings, tokenize, progress, stop_requested)
    finally:
        spool.unlink(missing_ok=True)


def _run_job(
    model: Elmo,
    files: JobFiles,
    job_settings: dict[str, Any],
    settings: EmbedSettings,
    tokenize: Callable[[str], list[str]] | None,
    progress: bool,
    stop_requested: Callable[[], bool] | None,
) -> EmbedFileResult:
    writer = _output_format(files.output_path, job_settings)
    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    world_size = dist.get_world_size() if distributed else 1
    folder = files.folder
    finished = finished_job(files, job_settings)
    if finished is not None:
        return EmbedFileResult(finished["lines"], finished["tokens"], finished["pieces"], finished["pieces"], True)
    per_token = _bytes_per_token(model, settings, writer.store_dtype)
    job, todo, lock = _open_job(files, job_settings, rank, distributed, per_token)
    try:  # rank 0 holds the job folder's lock until the job is merged or has failed
        pieces = [Piece(**p) for p in job["pieces"]]
        by_index = {p.index: p for p in pieces}
        left = [by_index[i] for i in todo]
        mine = assign_pieces(left, world_size)[rank]
        bar = _progress_bar(job, left, show=progress and rank == 0)
        watcher = _PieceWatcher(folder, left, mine, bar) if rank == 0 else None
        failure: BaseException | None = None
        reader = PieceReader(files.text) if mine else None
        try:
            for piece in mine:
                _embed_piece(model, reader, files, piece, tokenize, settings, bar, watcher, stop_requested, writer)
        except BaseException as err:  # noqa: BLE001 - reported to the other ranks, then raised
            failure = err
        finally:
            if reader is not None:
                reader.close()
        _raise_unless_all_succeeded(failure, distributed, bar, files)
        if watcher is not None:
            watcher.finish()
        bar.close()
        if rank == 0:
            _merge(files, pieces, job, writer)
    finally:
        if lock is not None:
            lock.release()
    return EmbedFileResult(job["lines"], job["tokens"], len(pieces), len(pieces) - len(todo))


def _open_job(
    files: JobFiles, job_settings: dict[str, Any], rank: int, distributed: bool, bytes_per_token: int
) -> tuple[dict[str, Any], list[int], FolderLock | None]:
    """(job, pieces left to do) on every rank, and the job folder's lock on rank 0.

    Rank 0 locks, plans and checks the room. The others wait for its answer or its error.
    """
    message: list[Any] = [None]
    lock = None
    if rank == 0:
        try:
            if files.folder.is_file():  # an earlier version's temporary file under the same name
                files.folder.unlink()
            lock = FolderLock(files.folder, busy=_busy_message(files))
            message[0] = prepare_job(
                files.text, files.folder, files.piece_tokens, job_settings, input_name=str(files.input_path)
            )
            _check_job_room(files, message[0][0], message[0][1], bytes_per_token)
        except (ElmoError, OSError, ValueError) as err:
            message[0] = err if isinstance(err, ElmoError) else ElmoError(str(err))
            if lock is not None:
                if lock.created and not (files.folder / JOB_NAME).exists():
                    shutil.rmtree(files.folder, ignore_errors=True)
                lock.release()
                lock = None
    if distributed:
        dist.broadcast_object_list(message, src=0, device=_collective_device())
    if isinstance(message[0], ElmoError):
        raise message[0]
    job, todo = message[0]
    return job, todo, lock


def _busy_message(files: JobFiles) -> str:
    return (
        f"another process is working on {files.output_path} (it holds {files.folder}): wait for it to finish "
        "(if you stop it, this command resumes its job). To share one job among several processes, start them "
        "together with torchrun: torchrun --nproc-per-node N -m elmo_core embed INPUT OUTPUT ..."
    )


def _progress_bar(job: dict[str, Any], left: Sequence[Piece], show: bool) -> Any:
    return progress_bar(  # counts whitespace-separated words (the tokens without --tokenize)
        job["tokens"], unit="tok", show=show, initial=job["tokens"] - sum(p.tokens for p in left)
    )


def _raise_unless_all_succeeded(failure: BaseException | None, distributed: bool, bar: Any, files: JobFiles) -> None:
    # All ranks leave the collectives together first: gloo aborts a process whose peer is gone.
    ok = _all_agree(failure is None, distributed)
    if distributed:
        dist.barrier()
    if failure is not None:
        bar.close()
        raise failure
    if not ok:
        bar.close()
        raise ElmoError(
            f"another process of this torchrun job failed (see its error above); {files.output_path} was not "
            f"written. The finished pieces are kept in {files.folder}: run the same command again to resume."
        )


def _collective_device() -> torch.device | None:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return None


def _all_agree(flag: bool, distributed: bool) -> bool:
    if not distributed:
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def _embed_piece(model, reader, files, piece, tokenize, settings, bar, watcher, stop_requested, writer) -> None:  # noqa: ANN001
    folder = files.folder
    texts = reader.read(piece)
    counts = [len(text.split()) for text in texts]
    if tokenize is None:
        sentences = [text.split() for text in texts]
    else:
        sentences = [tokenize(text) if text.strip() else [] for text in texts]
    shown = [0] * len(sentences)  # words of each line on the bar so far
    kept = [0] * len(sentences)  # tokens of each long line embedded so far
    per_token = _bytes_per_token(model, settings, writer.store_dtype)
    extra = 2 if model.bilm.keep_sentence_boundaries else 0  # <S> and </S> rows
    needed = HDF5_FILE_BYTES + sum(
        per_token * (len(tokens) + extra)
        + HDF5_OBJECT_BYTES
        + sum(len(t.encode("utf-8", "replace")) + HDF5_STRING_BYTES for t in tokens)
        for tokens in sentences
    )
    _check_room(files, needed)  # HDF5 crashes the process when the disk fills up under it

    def on_window(i: int, tokens: int) -> None:  # a long line moves the bar window by window
        kept[i] += tokens
        words = counts[i] * kept[i] // max(len(sentences[i]), 1)  # the bar counts whitespace words
        bar.update(words - shown[i])
        shown[i] = words
        if watcher is not None:
            watcher.poll()
        if stop_requested is not None and stop_requested():
            raise KeyboardInterrupt

    rows = embed_lines(
        model, texts, tokens=sentences, settings=settings, store_dtype=writer.store_dtype, on_window=on_window
    )
    with atomic_path(piece_path(folder, piece)) as tmp, writer.piece(tmp, piece) as write:
        for row in rows:
            write(piece.first_line + row.index, row)
            bar.update(counts[row.index] - shown[row.index])
            if watcher is not None:
                watcher.poll()
            if stop_requested is not None and stop_requested():
                raise KeyboardInterrupt  # the piece's temporary file is removed; finished pieces stay


def _output_format(output_path: Path, job_settings: dict[str, Any]) -> Any:
    if is_parquet(output_path):
        from .parquet_output import ParquetOutput

        import_pyarrow("elmo embed with a .parquet OUTPUT")
        return ParquetOutput(job_settings["dim"], job_settings["store_dtype"])
    return Hdf5Output(job_settings["layers"], job_settings["dim"], job_settings["store_dtype"])


class _PieceWatcher:
    """Rank 0 counts the other ranks' finished piece files on its bar, at most once a second."""

    def __init__(self, folder: Path, todo: Sequence[Piece], mine: Sequence[Piece], bar: Any) -> None:
        own = {p.index for p in mine}
        self.folder = folder
        self.others = {p.index: p.tokens for p in todo if p.index not in own}
        self.bar = bar
        self.last = 0.0

    def poll(self, force: bool = False) -> None:
        if not self.others or self.bar.disable or (not force and time.monotonic() - self.last < 1.0):
            return
        self.last = time.monotonic()
        for index in [i for i in self.others if piece_path(self.folder, i).is_file()]:
            self.bar.update(self.others.pop(index))

    def finish(self) -> None:
        self.poll(force=True)


def _bytes_per_token(model: Elmo, settings: EmbedSettings, store_dtype: str = "float32") -> int:
    itemsize = check_store_dtype(store_dtype).itemsize
    return itemsize * model.output_dim * (model.n_outputs if settings.layers == "all" else 1)


def _check_room(files: JobFiles, needed: int) -> None:
    check_free_space(
        files.folder,
        needed,
        f"OUTPUT {files.output_path}",
        f"The finished pieces are kept in {files.folder}: run the same command again to resume.",
    )


def _check_job_room(files: JobFiles, job: dict[str, Any], todo: Sequence[int], bytes_per_token: int) -> None:
    # The vectors alone (whitespace tokens): a job that may fit is never refused here.
    tokens = {p["index"]: p["cost"] - (p["end_line"] - p["first_line"]) for p in job["pieces"]}
    _check_room(files, bytes_per_token * (sum(tokens[i] for i in todo) + sum(tokens.values())))


def _merge(files: JobFiles, pieces: Sequence[Piece], job: dict[str, Any], writer: Any) -> None:
    folder, output_path = files.folder, files.output_path
    _check_room(files, HDF5_FILE_BYTES + sum(piece_path(folder, p).stat().st_size for p in pieces))
    # The merged file is written inside the job folder: a merge that is cut short leaves
    # nothing beside OUTPUT.
    record = {k: job[k] for k in ("input", "input_sha256", "lines", "tokens", "settings")}
    with atomic_path(output_path, tmp_dir=folder) as tmp:
        writer.merge(tmp, [piece_path(folder, piece) for piece in pieces], {**record, "pieces": len(pieces)})
    # Renamed first (atomic, under the lock): a run that starts now finds no folder and makes
    # a new one, instead of locking a new .lock inside a folder that is being deleted.
    doomed = folder.with_name(f".{folder.name}.done-{os.getpid()}")
    os.replace(folder, doomed)
    shutil.rmtree(doomed)
