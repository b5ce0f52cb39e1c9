"""Files that appear only when complete: write to a temporary name beside them, then rename.

`os.replace` is atomic on one file system. It replaces a link at the final name and
never writes through it, so a Hugging Face cache blob never changes. The umask is never
set. A full file system is one `DiskFullError`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from ..model.errors import DiskFullError

__all__ = [
    "atomic_folder",
    "atomic_path",
    "atomic_write",
    "check_free_space",
    "disk_full_error",
    "free_bytes",
    "full_disk_as_one_error",
]

_FULL_WORDS = ("No space left on device", "os error 28", "errno = 28", "ENOSPC")


@contextlib.contextmanager
def atomic_path(path: str | Path, tmp_dir: str | Path | None = None) -> Iterator[Path]:
    """A temporary path to write to, renamed to `path` (after fsync) if the block succeeds, else deleted.

    The name is hidden (`.<name>.partial-<random><suffix>`) and keeps the suffix, which
    some writers read. A link at `path` is replaced, not written through. `tmp_dir` must be
    on the same file system.

    Raises:
        DiskFullError: if the file system filled up (nothing is left under `path`).
    """
    path = Path(path)
    tmp = _new_file(Path(tmp_dir) if tmp_dir is not None else path.parent, f".{path.name}.partial-", path.suffix)
    usual = stat.S_IMODE(tmp.stat().st_mode)
    try:
        with full_disk_as_one_error(path):
            yield tmp
            _finish(tmp, usual)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> None:
    """`write(tmp)` into a temporary file, then rename it to `path` (see `atomic_path`)."""
    with atomic_path(path) as tmp:
        write(tmp)


@contextlib.contextmanager
def atomic_folder(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """A hidden temporary folder inside `folder` to save into. Its files are then renamed in, one by one.

    For writers that write in place (`save_pretrained`, spaCy's `to_disk`). An error in
    the block changes nothing in `folder`.

    Raises:
        DiskFullError: if the file system filled up.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    staging = _new_folder(folder)
    probe = _new_file(staging, ".mode-", "")
    usual = stat.S_IMODE(probe.stat().st_mode)
    probe.unlink()
    try:
        with full_disk_as_one_error(folder):
            yield staging
            _move_in(staging, folder, usual)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def full_disk_as_one_error(path: str | os.PathLike[str]) -> Iterator[None]:
    """Raise an error of the block that means a full file system as one `DiskFullError` naming `path`."""
    try:
        yield
    except Exception as err:
        full = disk_full_error(err, path)
        if full is None:
            raise
        raise full from err


def check_free_space(path: str | Path, needed: int, what: str, kept: str = "") -> None:
    """Raise a `DiskFullError` unless `path`'s file system has `needed` bytes free.

    `what` names the writer ("OUTPUT out.h5"). `kept` ends the message: what is kept, how to resume.
    """
    free = free_bytes(path)
    if free < needed:
        raise DiskFullError(
            f"{what}: its file system is full: the job needs {_size(needed)} more and has {_size(free)} free. "
            f"Free some space or choose another folder.{' ' + kept if kept else ''}"
        )


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes an unprivileged writer may still use on `path`'s file system (`sys.maxsize` if unknown)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        stats = os.statvfs(path)
    except OSError:  # a file system that does not say: the writes themselves will tell
        return sys.maxsize
    return stats.f_bavail * stats.f_frsize


def disk_full_error(err: BaseException, path: str | os.PathLike[str]) -> DiskFullError | None:
    """The `DiskFullError` for `err` if it means a full file system, read along its chain of causes."""
    if isinstance(err, DiskFullError):
        return err
    seen: set[int] = set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if (isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT)) or any(
            word in str(link) for word in _FULL_WORDS
        ):
            return DiskFullError(
                f"cannot write {path}: its file system is full ({_size(free_bytes(path))} free). Nothing was "
                "written under that name. Free some space or choose another folder, and save again."
            )
        link = link.__cause__ or link.__context__
    return None


def _size(n: int) -> str:
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _new_file(folder: Path, prefix: str, suffix: str) -> Path:
    # os.open with 0o666: the kernel applies the umask, so it is never read or set here
    # (setting it, even for a moment, changes the files the process's other threads create).
    while True:
        tmp = folder / f"{prefix}{secrets.token_hex(4)}{suffix}"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue


def _new_folder(parent: Path) -> Path:
    while True:
        staging = parent / f".saving-{secrets.token_hex(4)}"
        try:
            staging.mkdir()
            return staging
        except FileExistsError:
            continue


def _finish(path: Path, mode: int) -> None:
    """Flush `path` and give it `mode`: safetensors replaces the file with an owner-only one."""
    if stat.S_IMODE(path.stat().st_mode) != mode:
        os.chmod(path, mode)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _move_in(staging: Path, folder: Path, mode: int) -> None:
    for source in sorted(staging.iterdir()):
        target = folder / source.name
        if source.is_dir() and not source.is_symlink():
            if target.is_symlink() or (target.exists() and not target.is_dir()):
                target.unlink()  # a link to a folder elsewhere: replaced by a folder of our own
            target.mkdir(exist_ok=True)
            _move_in(source, target, mode)
        else:
            _finish(source, mode)
            os.replace(source, target)
