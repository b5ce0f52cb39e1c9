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

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from ..files.atomic_files import atomic_path, atomic_write, check_free_space, full_disk_as_one_error
from ..files.folder_lock import FolderLock
from ..files.hdf5_files import HDF5_FILE_BYTES, HDF5_OBJECT_BYTES, HDF5_STRING_BYTES, import_h5py, open_hdf5
from ..files.text_files import (
    BYTE_ORDER_MARK,
    check_input_file,
    check_output_is_new,
    check_output_spares_inputs,
    decode_line,
    is_stream,
    max_line_bytes,
    open_binary,
    read_line,
    strip_line_end,
)
from ..model.checks import check_int
from ..model.errors import ElmoError
from ..runtime.embedding import EmbedSettings, check_model, iter_embeddings
from ..runtime.token_cache import float64_sum
from .console import progress_bar

if TYPE_CHECKING:
    from ..model.elmo import Elmo

__all__ = ["embed_file"]

logger = logging.getLogger(__name__)

DEFAULT_PIECE_TOKENS = 50_000
"""Tokens per piece: what an interrupted job redoes at most (per process), and the unit
processes share. A few seconds of work for the default model, two minutes for the
original on one CPU core."""

PIECE_BYTES = 64 << 20
"""A piece also ends before this many bytes (unless it is one line): memory stays bounded
however few tokens long lines hold."""

JOB_FORMAT = 1
JOB_NAME = "job.json"
NUL_REPLACEMENT = "\ufffd"  # HDF5 strings end at U+0000; a token's U+0000 is stored as U+FFFD


@dataclass(frozen=True)
class Piece:
    """Lines `[first_line, end_line)` of the input, bytes `[byte_start, byte_end)`.

    `cost` = tokens + 1 per line (so that blank lines also count), used to balance ranks.
    """

    index: int
    first_line: int
    end_line: int
    byte_start: int
    byte_end: int
    cost: int

    @property
    def tokens(self) -> int:
        """Whitespace-separated words of the piece's lines."""
        return self.cost - (self.end_line - self.first_line)


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


def job_folder(output: str | Path) -> Path:
    """Where the pieces of OUTPUT live until the job completes: `OUTPUT.partial/`."""
    output = Path(output)
    return output.with_name(output.name + ".partial")


def check_embed_paths(input_path: str | Path, output_path: str | Path) -> None:
    """Raise a one-line ElmoError, before any work, unless INPUT can be read and OUTPUT
    written without harm: INPUT is a readable file or a stream, OUTPUT is not a folder,
    its folder exists, and OUTPUT is not INPUT (under any spelling) nor does its job
    folder, which is deleted at the end, hold INPUT
    (`elmo_core.files.text_files.check_output_spares_inputs`)."""
    check_input_file(input_path, "INPUT")
    output = Path(output_path)
    if output.is_dir():
        raise ElmoError(f"OUTPUT {output} is a folder; give the path of the hdf5 file to write.")
    if not output.parent.is_dir():
        raise ElmoError(f"the folder of OUTPUT ({output.parent}) does not exist; create it first.")
    check_output_spares_inputs(
        [("OUTPUT", output)], [("INPUT", input_path)], folders=[("OUTPUT's job folder", job_folder(output), None)]
    )


def plan_pieces(
    path: str | Path, piece_tokens: int = DEFAULT_PIECE_TOKENS, name: str | None = None
) -> tuple[list[Piece], int, int, str]:
    """Read the input once: check it is UTF-8, count tokens, cut it into pieces.

    Lines are split as `elmo embed` reads them: at "\\n", with a final newline ending the
    last line (not starting a blank one), a trailing "\\r" dropped and a UTF-8 byte order
    mark at the start ignored. Tokens are counted with `str.split()`. `name` is how errors
    name the input (default: `path`; the stream's name when `path` is its copy). A line
    longer than `ELMO_MAX_LINE_BYTES` is refused (`elmo_core.files.text_files.read_line`).

    Returns:
        `(pieces, lines, tokens, sha256 of the file)`.

    Raises:
        ElmoError: if the file does not exist, is not UTF-8 or holds a line longer than the
            limit (names the line).
    """
    piece_tokens = check_int("piece_tokens", piece_tokens)
    path = Path(path)
    digest = hashlib.sha256()
    pieces: list[Piece] = []
    line = tokens = offset = 0
    first_line = byte_start = cost = 0
    try:
        handle = open_binary(path)
    except FileNotFoundError:
        raise ElmoError(f"input file {path} does not exist.") from None
    with handle:
        limit = max_line_bytes()
        while raw := read_line(handle, name or str(path), line + 1, limit):  # bounded: ELMO_MAX_LINE_BYTES
            digest.update(raw)
            text = decode_line(raw, name or str(path), line + 1)
            n = len(_split_line(text, line).split())
            if line > first_line and (cost + n + 1 > piece_tokens or offset + len(raw) - byte_start > PIECE_BYTES):
                pieces.append(Piece(len(pieces), first_line, line, byte_start, offset, cost))
                first_line, byte_start, cost = line, offset, 0
            cost += n + 1
            tokens += n
            offset += len(raw)
            line += 1
    if line > first_line:
        pieces.append(Piece(len(pieces), first_line, line, byte_start, offset, cost))
    return pieces, line, tokens, digest.hexdigest()


def _split_line(text: str, line: int) -> str:
    """One line's text without its end of line (and without a BOM on line 0), by the
    rules of `elmo_core.files.text_files`."""
    if line == 0 and text.startswith(BYTE_ORDER_MARK):
        text = text[len(BYTE_ORDER_MARK) :]
    return strip_line_end(text)


class _PieceReader:
    """The input, open once for a rank's pieces: a piece is a byte range of the (decompressed)
    text. The pieces come in order, so a compressed file is decompressed once (its forward
    seeks skip ahead)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = open_binary(path)

    def read(self, piece: Piece) -> list[str]:
        self.handle.seek(piece.byte_start)
        return _piece_lines(self.path, piece, self.handle.read(piece.byte_end - piece.byte_start))

    def close(self) -> None:
        self.handle.close()


def _piece_lines(path: Path, piece: Piece, data: bytes) -> list[str]:
    lines = data.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the piece's last line
    if len(lines) != piece.end_line - piece.first_line:
        raise ElmoError(
            f"{path} changed while it was being embedded (lines {piece.first_line}..{piece.end_line - 1} "
            "are no longer where they were). Embed a file that nothing writes to."
        )
    return [_split_line(text, piece.first_line + k) for k, text in enumerate(lines)]


def _assign(pieces: Sequence[Piece], world_size: int) -> list[list[Piece]]:
    """Largest piece first, each to the rank with the smallest total so far (ties: lower rank)."""
    loads = [0] * world_size
    shares: list[list[Piece]] = [[] for _ in range(world_size)]
    for piece in sorted(pieces, key=lambda p: (-p.cost, p.index)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shares[rank].append(piece)
        loads[rank] += piece.cost
    return [sorted(share, key=lambda p: p.index) for share in shares]


def _piece_path(folder: Path, piece: Piece | int) -> Path:
    index = piece.index if isinstance(piece, Piece) else piece
    return folder / f"piece-{index:06d}.h5"


def model_checksum(model: torch.nn.Module) -> str:
    """A short hash of a model's parameter values (to refuse resuming with another model)."""
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            digest.update(f"{name}:{tuple(parameter.shape)}:{float64_sum(parameter)!r};".encode())
    return digest.hexdigest()[:16]


def embed_file(
    model: Elmo,
    input_path: str | Path,
    output_path: str | Path,
    settings: EmbedSettings | None = None,
    *,
    tokenize: Callable[[str], list[str]] | None = None,
    piece_tokens: int = DEFAULT_PIECE_TOKENS,
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
    job_settings = _job_settings(model, settings, tokenize, record)
    check_embed_paths(input_path, output_path)
    files = _JobFiles(Path(input_path), Path(output_path), piece_tokens, overwrite=overwrite)
    if is_stream(input_path):
        return _run_stream_job(model, files, job_settings, settings, tokenize, progress, stop_requested)
    return _run_job(model, files, job_settings, settings, tokenize, progress, stop_requested)


def _finished_job(files: _JobFiles, job_settings: dict[str, Any]) -> dict[str, Any] | None:
    """The job OUTPUT records when it holds this very job (the same input and settings); None
    when OUTPUT may be written (it does not exist, or `overwrite`).

    Raises:
        ElmoError: (`check_output_is_new`) when OUTPUT holds anything else: one line naming
            it, what it holds, and the ways on.
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
    """The job an `embed_file` OUTPUT records in its attribute "job", or None."""
    try:
        with open_hdf5(output, "r") as f:
            job = json.loads(f.attrs["job"])
    except (OSError, KeyError, ValueError, TypeError):  # not hdf5, no record, not JSON
        return None
    keys = ("input", "input_sha256", "lines", "tokens", "pieces", "settings")
    return job if isinstance(job, dict) and all(k in job for k in keys) else None


def _sha256(path: Path) -> str:
    """The sha256 of a file's (decompressed) bytes, as `plan_pieces` computes it."""
    digest = hashlib.sha256()
    with open_binary(path) as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The settings that differ, as "name: OLD then, NEW now; ..."."""
    changed = {k: (old.get(k), v) for k, v in new.items() if old.get(k) != v}
    return "; ".join(f"{k}: {then!r} then, {now!r} now" for k, (then, now) in changed.items())


def _run_stream_job(
    model: Elmo,
    files: _JobFiles,
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


def _job_settings(
    model: Elmo,
    settings: EmbedSettings,
    tokenize: Callable[[str], list[str]] | None,
    record: dict[str, Any] | None,
) -> dict[str, Any]:
    """Everything that changes the vectors, as job.json records it (a resumed job must match)."""
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


@dataclass(frozen=True)
class _JobFiles:
    """The files of one `embed_file` job: INPUT, OUTPUT, OUTPUT.partial/ and the piece size;
    `spool` is the copy of a stream INPUT, read in its place."""

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
        """The file the pieces are read from."""
        return self.spool if self.spool is not None else self.input_path


def _run_job(
    model: Elmo,
    files: _JobFiles,
    job_settings: dict[str, Any],
    settings: EmbedSettings,
    tokenize: Callable[[str], list[str]] | None,
    progress: bool,
    stop_requested: Callable[[], bool] | None,
) -> EmbedFileResult:
    """This process's share of the pieces left to do; then rank 0 merges every piece into OUTPUT."""
    h5py = import_h5py("embed_file (its output is hdf5)")
    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    world_size = dist.get_world_size() if distributed else 1
    folder = files.folder
    finished = _finished_job(files, job_settings)
    if finished is not None:
        return EmbedFileResult(finished["lines"], finished["tokens"], finished["pieces"], finished["pieces"], True)
    job, todo, lock = _open_job(files, job_settings, rank, distributed, _bytes_per_token(model, settings))
    try:  # rank 0 holds the job folder's lock until the job is merged or has failed
        pieces = [Piece(**p) for p in job["pieces"]]
        by_index = {p.index: p for p in pieces}
        left = [by_index[i] for i in todo]
        mine = _assign(left, world_size)[rank]
        bar = _progress_bar(job, left, show=progress and rank == 0)
        watcher = _PieceWatcher(folder, left, mine, bar) if rank == 0 else None
        failure: BaseException | None = None
        reader = _PieceReader(files.text) if mine else None
        try:
            for piece in mine:
                _embed_piece(model, reader, files, piece, tokenize, settings, bar, watcher, stop_requested, h5py)
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
            _merge(files, pieces, job)
    finally:
        if lock is not None:
            lock.release()
    return EmbedFileResult(job["lines"], job["tokens"], len(pieces), len(pieces) - len(todo))


def _open_job(
    files: _JobFiles, job_settings: dict[str, Any], rank: int, distributed: bool, bytes_per_token: int
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
            message[0] = _prepare_job(
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


def _busy_message(files: _JobFiles) -> str:
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


def _raise_unless_all_succeeded(failure: BaseException | None, distributed: bool, bar: Any, files: _JobFiles) -> None:
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


def _prepare_job(  # noqa: ANN202
    input_path: Path, folder: Path, piece_tokens: int, settings: dict[str, Any], input_name: str | None = None
):
    """Plan a new job, or check and resume the one in `folder`; return (job, pieces to do).

    The caller owns `folder` (holds its lock), so the leftovers of a stopped run's pieces
    are deleted here, never those of a live run. `input_name` is how job.json names the
    input (the stream's name, when `input_path` is its copy).
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
        todo = [p.index for p in pieces if not _piece_path(folder, p).is_file()]
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


def _embed_piece(model, reader, files, piece, tokenize, settings, bar, watcher, stop_requested, h5py) -> None:  # noqa: ANN001
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
    per_token = _bytes_per_token(model, settings)
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

    # v108: attributes over 64 kB (long lines' tokens)
    with atomic_path(_piece_path(folder, piece)) as tmp, open_hdf5(tmp, "w", libver="v108") as out:
        out.attrs["first_line"] = piece.first_line
        out.attrs["end_line"] = piece.end_line
        for i, vectors in iter_embeddings(model, sentences, settings, on_window=on_window):
            dataset = out.create_dataset(str(piece.first_line + i), data=vectors)
            dataset.attrs.create("tokens", _storable(sentences[i]), dtype=h5py.string_dtype())
            bar.update(counts[i] - shown[i])
            if watcher is not None:
                watcher.poll()
            if stop_requested is not None and stop_requested():
                raise KeyboardInterrupt  # the piece's temporary file is removed; finished pieces stay


def _storable(tokens: Sequence[str]) -> list[str]:
    return [t.replace("\x00", NUL_REPLACEMENT) if "\x00" in t else t for t in tokens]


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
        for index in [i for i in self.others if _piece_path(self.folder, i).is_file()]:
            self.bar.update(self.others.pop(index))

    def finish(self) -> None:
        self.poll(force=True)


def _bytes_per_token(model: Elmo, settings: EmbedSettings) -> int:
    """Bytes of float32 vectors OUTPUT holds for one token."""
    return 4 * model.output_dim * (model.n_outputs if settings.layers == "all" else 1)


def _check_room(files: _JobFiles, needed: int) -> None:
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


def _check_job_room(files: _JobFiles, job: dict[str, Any], todo: Sequence[int], bytes_per_token: int) -> None:
    """Before any work: room for the pieces left to do, and for OUTPUT beside every piece while they are merged.

    Counts the vectors alone (whitespace tokens), so that a job that may fit is never refused here.
    """
    tokens = {p["index"]: p["cost"] - (p["end_line"] - p["first_line"]) for p in job["pieces"]}
    _check_room(files, bytes_per_token * (sum(tokens[i] for i in todo) + sum(tokens.values())))


def _merge(files: _JobFiles, pieces: Sequence[Piece], job: dict[str, Any]) -> None:
    """Copy every piece's datasets, in line order, into one file; rename it to OUTPUT."""
    folder, output_path = files.folder, files.output_path
    _check_room(files, HDF5_FILE_BYTES + sum(_piece_path(folder, p).stat().st_size for p in pieces))
    # The merged file is written inside the job folder: a merge that is cut short leaves
    # nothing beside OUTPUT.
    with atomic_path(output_path, tmp_dir=folder) as tmp, open_hdf5(tmp, "w", libver="v108") as out:
        out.attrs["layers"] = job["settings"]["layers"]
        out.attrs["dim"] = job["settings"]["dim"]
        record = {k: job[k] for k in ("input", "input_sha256", "lines", "tokens", "settings")}
        out.attrs["job"] = json.dumps({**record, "pieces": len(pieces)})  # recognises the same job later
        for piece in pieces:
            with open_hdf5(_piece_path(folder, piece), "r") as source:
                for line in range(piece.first_line, piece.end_line):
                    source.copy(source[str(line)], out, name=str(line))
    # Renamed first (atomic, under the lock): a run that starts now finds no folder and makes
    # a new one, instead of locking a new .lock inside a folder that is being deleted.
    doomed = folder.with_name(f".{folder.name}.done-{os.getpid()}")
    os.replace(folder, doomed)
    shutil.rmtree(doomed)
