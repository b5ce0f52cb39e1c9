"""`elmo embed`: a text file in, one hdf5 file out; resumable, and shared across torchrun processes.

The input's lines are cut into *pieces*: runs of consecutive lines of about
`piece_tokens` tokens (a line is never split; a longer line is a piece of its own).
A piece is the unit of work, of resuming and of sharing among processes:

    INPUT    line 0 .. line 11 | line 12 .. line 30 | line 31 .. line 40 | ...
    pieces   piece 0            piece 1              piece 2
    ranks    rank 0             rank 1               rank 1    (largest first, each to the
                                                               rank with the fewest tokens)

    OUTPUT.partial/                      while running (clearly partial)
        .lock                            held by the run that owns the job (flock)
        job.json                         the input's sha256, the settings and the pieces
        piece-000000.h5                  every line of piece 0; renamed into place only
        piece-000001.h5                  when complete, so present = complete
    OUTPUT                               at the end: rank 0 copies the pieces into one
                                         file, renames it to OUTPUT, deletes OUTPUT.partial

Under torchrun, every process runs the same command; rank 0 reads the input, writes
job.json and tells the others the pieces left to do, balanced by token count (largest
piece first, to the least loaded rank). Each rank embeds its pieces with the same
`iter_embeddings` a single process uses, so the output does not depend on the number
of processes (beyond float rounding of batches, about 1e-7). A process that fails
makes every process stop; OUTPUT is not written, OUTPUT.partial stays.

One run owns a job folder at a time (`elmo_core.files.folder_lock`): a second run on the same
OUTPUT while the first is alive stops at once with an ElmoError, and deletes nothing.
Running the same command again after a run stopped (same input, model and settings; any
number of processes) skips the pieces already in OUTPUT.partial and redoes at most the
pieces that were running. A different input or setting is refused with a message: finish the
job or delete OUTPUT.partial. With several machines, OUTPUT's folder must be on a file
system that every machine sees (as for a training checkpoint).

The input is read by `elmo_core.files.text_files.open_binary`, as every command reads text: a
`.xz`, `.gz` or `.bz2` file is decompressed on the fly (pieces are byte ranges of the
decompressed text, read in order), and a stream (`-` for standard input, a pipe) is first
copied to a hidden file beside OUTPUT, deleted at the end, so that its pieces can be read
back and the job resumed with the same stream; several torchrun processes cannot share a
stream, so they refuse it before reading.

The output: one dataset per input line, named by its 0-based line number, of shape
(layers, tokens, dim) for layers="all" and (tokens, dim) otherwise, with the line's
tokens in its attribute "tokens" (an array of str, one per row; see README "Reading
the output"). File attributes "layers" and "dim" record the settings.
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
    """What `embed_file` did: lines and tokens of the input, and pieces done before this run.

    `already_complete` is True when OUTPUT already held this job's vectors (nothing was done).
    """

    lines: int
    tokens: int
    pieces: int
    pieces_resumed: int
    already_complete: bool = False


def check_embed_paths(input_path: str | Path, output_path: str | Path) -> None:
    """Raise a one-line ElmoError, before any work, unless INPUT can be read and OUTPUT
    written without harm: INPUT is a readable file or a stream, OUTPUT is not a folder,
    its folder exists, and OUTPUT is not INPUT (under any spelling) nor does its job
    folder, which is deleted at the end, hold INPUT
    (`elmo_core.files.text_files.check_output_spares_inputs`)."""
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
    """Write ELMo vectors for every line of a text file to one hdf5 file (see module docstring).

    Runs on every process of a torchrun job when a process group is initialised
    (`elmo_core.runtime.distributed.init_distributed`), else alone. Resumes the job in
    `job_folder(output_path)` when there is one.

    Args:
        model: An `Elmo` (stateless), already on its device.
        input_path: UTF-8 text, one sentence (or document) per line.
        output_path: The hdf5 file to write. One that exists is left alone: when it holds
            this very job (the same input and settings) nothing is done; else an ElmoError,
            unless `overwrite`.
        settings: `EmbedSettings`, as for `embed_sentences`.
        tokenize: Splits a line into tokens; None = `str.split()` (whitespace).
        piece_tokens: Tokens per piece (see `DEFAULT_PIECE_TOKENS`). A resumed job keeps
            the pieces it started with.
        store_dtype: "float32" or "float16": the dtype the vectors are stored in.
        record: Anything else that changes the vectors (recorded in job.json, and
            checked when resuming), e.g. the tokenizer's name and the precision.
        progress: Show a progress bar (rank 0 only), in tokens of all ranks.
        stop_requested: Asked after every line written; True stops the job with
            KeyboardInterrupt (the finished pieces stay, and the same call resumes). `elmo
            embed` sets it from SIGINT/SIGTERM, so a stop is kept even where Python drops
            the KeyboardInterrupt a signal handler raised (inside a finalizer, say).
        overwrite: Replace an OUTPUT that holds another run's vectors (`elmo embed --overwrite`).
        **overrides: `EmbedSettings` fields, as keywords, replacing those of `settings`.

    Returns:
        `EmbedFileResult`.

    Raises:
        ElmoError: for an unreadable input, an OUTPUT or a job folder that holds another
            input's or other settings' vectors, or a failure of any process (OUTPUT is then
            not written).
        ValueError: for a bad `layers`, batch budget or window (before anything is written).
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
    """A stream (standard input, a pipe): copied to a hidden file beside OUTPUT (deleted at
    the end), then embedded as a file. The job folder records the stream's name and the
    sha256 of what it gave, so the same command with the same stream resumes it."""
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
    """This process's share of the pieces left to do; then rank 0 merges every piece into OUTPUT."""
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
    """(job.json's content, indices of the pieces left to do), the same on every rank, and
    on rank 0 the job folder's lock (None elsewhere).

    Rank 0 takes the job folder's lock (or stops at once: another run owns it), reads the
    input, prepares the job folder and checks that OUTPUT's file system has room for the
    vectors (`bytes_per_token` each); the others wait for its answer (or its error,
    raised on every rank). A folder this run created is removed again if it fails here.
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
    """A bar over the job's tokens, starting at those of the pieces already done."""
    return progress_bar(  # counts whitespace-separated words (the tokens without --tokenize)
        job["tokens"], unit="tok", show=show, initial=job["tokens"] - sum(p.tokens for p in left)
    )


def _raise_unless_all_succeeded(failure: BaseException | None, distributed: bool, bar: Any, files: JobFiles) -> None:
    """Raise this process's failure, or an ElmoError when another process failed; all ranks
    leave the collectives together first (gloo aborts a process whose peer is gone)."""
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
    """True on every rank iff `flag` is True on every rank."""
    if not distributed:
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def _embed_piece(model, reader, files, piece, tokenize, settings, bar, watcher, stop_requested, writer) -> None:  # noqa: ANN001
    """Embed one piece into its own file, written under a temporary name and renamed when complete.

    The free space is checked first: HDF5 crashes the process when the disk fills up under it.
    """
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
    _check_room(files, needed)

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
    """The writer of OUTPUT's format (by its suffix): `Hdf5Output` or `ParquetOutput`."""
    if is_parquet(output_path):
        from .parquet_output import ParquetOutput

        import_pyarrow("elmo embed with a .parquet OUTPUT")
        return ParquetOutput(job_settings["dim"], job_settings["store_dtype"])
    return Hdf5Output(job_settings["layers"], job_settings["dim"], job_settings["store_dtype"])


class _PieceWatcher:
    """Rank 0's view of the other ranks' progress: their finished piece files, at most once a second."""

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
    """Bytes of vectors OUTPUT holds for one token (before any compression)."""
    itemsize = check_store_dtype(store_dtype).itemsize
    return itemsize * model.output_dim * (model.n_outputs if settings.layers == "all" else 1)


def _check_room(files: JobFiles, needed: int) -> None:
    """Stop with one line (a `DiskFullError`) unless OUTPUT's file system has `needed` bytes free.

    Any output format checks before each piece and before the merge: HDF5 crashes the
    process when the disk fills up under it.
    """
    check_free_space(
        files.folder,
        needed,
        f"OUTPUT {files.output_path}",
        f"The finished pieces are kept in {files.folder}: run the same command again to resume.",
    )


def _check_job_room(files: JobFiles, job: dict[str, Any], todo: Sequence[int], bytes_per_token: int) -> None:
    """Before any work: room for the pieces left to do, and for OUTPUT beside every piece while they are merged.

    Counts the vectors alone (whitespace tokens), so that a job that may fit is never refused here.
    """
    tokens = {p["index"]: p["cost"] - (p["end_line"] - p["first_line"]) for p in job["pieces"]}
    _check_room(files, bytes_per_token * (sum(tokens[i] for i in todo) + sum(tokens.values())))


def _merge(files: JobFiles, pieces: Sequence[Piece], job: dict[str, Any], writer: Any) -> None:
    """Copy every piece's rows, in line order, into one file; rename it to OUTPUT."""
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
