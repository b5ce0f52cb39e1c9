"""Opening hdf5 files: the one place that imports h5py and tells a locked file from a broken one.

h5py reports a file another process holds open ("unable to lock file") as an OSError,
like a damaged file's. `open_hdf5` says it is locked, and what to do.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from ..model.errors import ElmoError, missing_extra

LOCKING_VARIABLE = "HDF5_USE_FILE_LOCKING"
"""The environment variable that turns HDF5's file locks off (`FALSE`), read when HDF5 starts."""

HDF5_FILE_BYTES = 2**20
"""Room an hdf5 file needs beyond its datasets, about 5x h5py's. HDF5 crashes on a full disk,
so every writer checks the free space first."""

HDF5_OBJECT_BYTES = 4096
"""Room one dataset needs beyond its data (object header, attributes), with a margin."""

HDF5_STRING_BYTES = 200
"""Room one variable-length string needs beyond its UTF-8 bytes, with a margin."""

_BUSY = {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES}


def import_h5py(what: str = "reading or writing hdf5 files") -> Any:
    """h5py, or an ImportError naming the extra that installs it."""
    try:
        import h5py
    except ImportError as err:
        raise missing_extra(err, "h5py", "hdf5", what) from err
    return h5py


def open_hdf5(path: str | Path, mode: str = "r", *, error: type[ElmoError] = ElmoError, **kwargs: Any) -> Any:
    """`h5py.File(path, mode, **kwargs)`, raising `error` when a lock stops it.

    Args:
        path: The hdf5 file.
        mode: h5py's mode.
        error: The ElmoError subclass to raise for a locked file.
        **kwargs: Passed on to `h5py.File`.

    Raises:
        ElmoError: (`error`) if the file is locked or cannot be locked. Other OSErrors pass through.
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
    """The `error` to raise when `err`, from opening `path` in `mode`, is a lock failure, else None."""
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
