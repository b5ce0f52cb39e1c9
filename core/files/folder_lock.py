"""One owner per job folder: an exclusive `fcntl.flock` on a lock file inside it.

`elmo embed`'s job folder (`OUTPUT.partial/`) and `elmo train`'s `--out` are worked on by
one run at a time. The run that owns one (rank 0 of a torchrun job, or the only process)
holds the lock for its whole life; a second run on the same folder (a scheduler's retry, a
second terminal) finds it taken and stops at once, before it reads or writes anything.

The kernel releases a `flock` when its process dies, however it dies (SIGKILL, out of
memory), so a killed run's folder is free for the next run to resume: there is no stale
lock to clean up. The owner deletes the folder, lock file included (or, for a folder that
stays, the lock file: `release(delete=True)`), while it still holds the lock; a run that
was waiting on the deleted file sees that the path no longer names the file it locked and
starts again (with a new lock file).

Locks are advisory and per open file (`flock(2)`): they hold between processes on one
machine, and on network file systems that support them (NFSv4, Lustre, GPFS).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from ..model.errors import ElmoError

LOCK_NAME = ".lock"


class FolderLock:
    """The exclusive lock of `folder` (created if needed), held until `release()`.

    Args:
        folder: The job folder.
        busy: The message of the ElmoError raised when another process holds the lock.

    Attributes:
        created: True if this call created the folder (so a run that fails before it has
            put anything there can remove it again, leaving nothing behind).

    Raises:
        ElmoError: `busy`, at once (the lock is never waited for), when another live
            process holds it.
    """

    def __init__(self, folder: str | Path, busy: str) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        for _ in range(100):  # a finishing owner removes the folder at most once per try
            try:
                self.folder.mkdir()
                self.created = True
            except FileExistsError:
                self.created = False
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            except (FileNotFoundError, NotADirectoryError):
                if os.path.lexists(self.folder) and not self.folder.is_dir():
                    raise ElmoError(
                        f"{self.folder} exists but is not a folder (a file, or a link to a missing place); "
                        "remove it, or write elsewhere."
                    ) from None
                continue  # the folder was removed by its finishing owner: again
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                os.close(fd)
                if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise ElmoError(busy) from None
                raise ElmoError(
                    f"cannot lock {self.path} ({err.strerror}): its file system has no file locks, so two runs "
                    "could not be kept from working on one job. Write to a folder on a local disk (or on NFSv4)."
                ) from None
            if self._still_names(fd):
                self._fd: int | None = fd
                return
            os.close(fd)  # we locked a file its owner had deleted with the folder: again
        raise ElmoError(f"could not lock {self.path}: its folder kept disappearing; try again.")

    def _still_names(self, fd: int) -> bool:
        """True if `self.path` is still the file open as `fd` (same device and inode)."""
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)

    def release(self, delete: bool = False) -> None:
        """Give the lock up (after deleting the folder, if the job is done); idempotent.

        Args:
            delete: First delete the lock file, so that a folder that stays (a trained
                model folder) holds only its own files, and the folder too if this lock
                created it and nothing else is in it (a run that failed before writing).
        """
        if self._fd is not None and delete:
            with contextlib.suppress(OSError):
                self.path.unlink()
            if self.created:
                with contextlib.suppress(OSError):
                    self.folder.rmdir()  # only if empty
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the file releases the flock
            self._fd = None
