"""Files that appear only when complete: write to a temporary name beside them, then rename.

Every file the project writes for a user (model folders, checkpoints, pre-tokenised
corpora, `elmo embed`'s job files, pieces and output) goes through `atomic_path`, so a
crash or a kill never leaves a file that looks complete but is not: either the old file
(or none) is there, or the whole new one (`os.replace` is atomic on one file system). A
leftover from a killed process is a hidden file `.<name>.partial-<random><suffix>`, which no
pattern for the complete files (`piece-*.h5`, `*.safetensors`) matches.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | Path, tmp_dir: str | Path | None = None) -> Iterator[Path]:
    """A temporary path to write `path`'s content to; renamed to `path` when the block
    ends without an error, deleted otherwise.

    The temporary name keeps `path`'s suffix last, so writers that choose a format by
    the file name (`.xz`, `.h5`) still do, and starts with a dot, so patterns for the
    complete files do not match it. The file exists (empty) when the block starts
    and gets the usual permissions (0o666 less the umask) before the rename.

    Args:
        path: The file to write.
        tmp_dir: Where the temporary file lives (default: `path`'s folder; it must be on
            the same file system).

    Raises:
        Whatever the block raises (the temporary file is removed first).
    """
    path = Path(path)
    fd, name = tempfile.mkstemp(
        dir=tmp_dir if tmp_dir is not None else path.parent, prefix=f".{path.name}.partial-", suffix=path.suffix
    )
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        umask = os.umask(0)  # mkstemp makes the file readable by its owner only
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> None:
    """`write(tmp)` into a temporary file, then rename it to `path` (see `atomic_path`)."""
    with atomic_path(path) as tmp:
        write(tmp)
