"""Opening hdf5 files: the one place that imports h5py and tells a locked file from a broken one.

HDF5 locks every file it opens (a shared lock to read, an exclusive one to write). While
another process holds a file open for writing (`h5py.File(path, "a")`, a notebook that
writes results), every other open of it fails with "unable to lock file". h5py reports that
as an OSError like any damaged file's, so without a look at the message a good file is taken
for a truncated one. `open_hdf5` turns a lock failure into an error that says so, and what
to do: close the other process, or read with HDF5's locking turned off
(`HDF5_USE_FILE_LOCKING=FALSE` in the environment, read when HDF5 starts).

h5py is imported only when one of these functions is called.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from ..model.errors import ElmoError, missing_extra

LOCKING_VARIABLE = "HDF5_USE_FILE_LOCKING"
"""The environment variable that turns HDF5's file locks off (`FALSE`), read when HDF5 starts."""

HDF5_FILE_BYTES = 2**20
"""Room an hdf5 file needs beyond its datasets (superblock, heaps), with a margin.

HDF5 crashes the process when the disk fills up under it, so every hdf5 writer checks the
free space first (`elmo_core.files.atomic_files.check_free_space`). The margins are about
5x what h5py 3.16 takes (700 bytes a dataset, 40 a short string, 40 kB a file)."""

HDF5_OBJECT_BYTES = 4096
"""Room one dataset needs beyond its data (object header, attributes), with a margin."""

HDF5_STRING_BYTES = 200
"""Room one variable-length string needs beyond its UTF-8 bytes, with a margin."""

_BUSY = {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES}
"""errno values of a lock that another process holds (flock/fcntl)."""


def import_h5py(what: str = "reading or writing hdf5 files") -> Any:
    """h5py, or an ImportError saying that `what` needs it and which extra installs it."""
    try:
        import h5py
    except ImportError as err:
        raise missing_extra(err, "h5py", "hdf5", what) from err
    return h5py


def open_hdf5(path: str | Path, mode: str = "r", *, error: type[ElmoError] = ElmoError, **kwargs: Any) -> Any:
    """`h5py.File(path, mode, **kwargs)`, raising `error` when a lock stops it.

    Args:
        path: The hdf5 file.
        mode: h5py's mode: "r" to read, "w" to create, "a" or "r+" to change.
        error: The ElmoError subclass to raise for a locked file (a WeightFileError for weights).
        **kwargs: Passed on to `h5py.File` (e.g. `libver`).

    Raises:
        ElmoError: (`error`) if another process holds the file locked, or the file system
            refuses HDF5's lock. Other OSErrors (a missing or damaged file) are raised as
            h5py raised them, for the caller to explain.
        ImportError: if h5py is not installed.
    """
    h5py = import_h5py()
    try:
        return h5py.File(path, mode, **kwargs)
    except OSError as err:
        locked = hdf5_lock_error(path, mode, err, error)
        if locked is None:
            raise
        raise locked from err


def hdf5_lock_error(
    path: str | Path, mode: str, err: BaseException, error: type[ElmoError] = ElmoError
) -> ElmoError | None:
    """The error to raise when `err`, from opening `path` with h5py, is a lock failure; else None.

    Args:
        path: The file that was opened.
        mode: The h5py mode it was opened with ("r" reads; any other mode writes).
        err: What h5py raised.
        error: The ElmoError subclass to return.
    """
    if not isinstance(err, OSError) or "unable to lock file" not in str(err):
        return None
    reading = mode == "r"
    if isinstance(err, BlockingIOError) or err.errno in _BUSY:
        if reading:
            way_out = (
                "Close that process (or its h5py.File) and run again. To read the file while it stays "
                f"open, start the program with {LOCKING_VARIABLE}=FALSE in its environment "
                f"(e.g. `{LOCKING_VARIABLE}=FALSE elmo ...`), if the other process does not write to it."
            )
        else:
            way_out = "Close that process (or its h5py.File), or wait for it to finish, and run again."
        intact = "; the file itself is not damaged" if reading else ""
        return error(
            f"{path} is locked by another process that has it open (HDF5 locks a file while it is open{intact}). "
            f"{way_out}"
        )
    return error(
        f"{path} cannot be locked: its file system does not support HDF5's file locks ({err}). Set "
        f"{LOCKING_VARIABLE}=FALSE in the environment before starting the program (e.g. "
        f"`{LOCKING_VARIABLE}=FALSE elmo ...`) to open it without one."
    )
