"""One owner per job folder (`elmo embed`'s `OUTPUT.partial/`, `elmo train`'s `--out`): an
exclusive `fcntl.flock` on a lock file inside it.

A second run stops at once. The kernel releases the lock when its process dies, so there
is no stale lock to clean up.
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
        created: True if this call created the folder (a failed run removes it again).

    Raises:
        ElmoError: `busy`, at once, when another live process holds the lock.
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
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)

    def release(self, delete: bool = False) -> None:
        """Give the lock up. Idempotent.

        Args:
            delete: First delete the lock file, and the folder if this lock created it
                and it is empty.
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
