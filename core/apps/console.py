"""What the library shows on standard error: progress bars and messages, dropped where
standard error cannot take them.

A process may have no usable standard error: a daemon started with `2>&-` (Python then
sets `sys.stderr` to None), a service whose stderr is a full disk (every write fails), a
`pythonw` program. The work goes on there as anywhere else:

- `progress_bar` is the one tqdm bar of every command and function (`elmo embed`,
  `train`, `perplexity`, `probe`, `embed_file`, ...). It is off without a usable stderr,
  off when there is nothing to count (no empty bars), and a write that fails later
  silences it instead of stopping the run.
- `quiet_failures` holds `sys.stderr` for the length of an `elmo` command, so that its
  messages (and logging's, and warnings') are dropped where they cannot be written.
  Logging and warnings already drop what they cannot write to a None stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tqdm import tqdm


class _DropOnFailure:
    """A text stream that passes writes on to `stream` until one fails (a full disk, a
    closed descriptor), and drops them from then on. Without a stream, it drops them all."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.failed = stream is None

    def write(self, text: str) -> int:
        if not self.failed:
            try:
                return int(self.stream.write(text))
            except (OSError, ValueError):  # ValueError: "I/O operation on closed file"
                self.failed = True
        return len(text)

    def flush(self) -> None:
        if not self.failed:
            try:
                self.stream.flush()
            except (OSError, ValueError):
                self.failed = True

    def isatty(self) -> bool:
        return not self.failed and bool(self.stream.isatty())

    def __getattr__(self, name: str) -> Any:  # fileno, encoding, ... of the stream
        return getattr(self.stream, name)


def _guarded(stream: Any) -> _DropOnFailure:
    """`stream` behind a `_DropOnFailure`, the same object where it already is one
    (`quiet_failures`): tqdm.write, and so its logging redirect, clears only the bars drawn on
    the very stream it writes to, so a log line never runs into the bar."""
    return stream if isinstance(stream, _DropOnFailure) else _DropOnFailure(stream)


def stderr_usable() -> bool:
    """Whether `sys.stderr` can take output: it is there, open, and no write to it has failed
    (as far as `quiet_failures` has seen)."""
    stream = sys.stderr
    if isinstance(stream, _DropOnFailure):
        return not stream.failed
    return stream is not None and not getattr(stream, "closed", False)


def progress_bar(
    total: int | None,
    *,
    unit: str,
    show: bool = True,
    initial: int = 0,
    desc: str | None = None,
    items: Iterable[Any] | None = None,
) -> tqdm:
    """A tqdm bar on standard error, counting `unit`s up to `total` (None: no end known);
    iterating it yields `items`, one count each.

    Off when `show` is False, when `total` is 0 (an empty input draws nothing) and when
    standard error is not usable (`stderr_usable`). A bar with no known end appears only
    after half a second of work, so that an empty or quick input draws none. A write that
    fails once the bar is drawn (the disk filled up, the descriptor was closed) is
    dropped, and the bar stays quiet from then on.
    """
    from tqdm import tqdm

    usable = stderr_usable()
    return tqdm(
        items,
        total=total,
        delay=0.5 if total is None else 0.0,
        initial=initial,
        unit=unit,
        desc=desc,
        dynamic_ncols=True,
        file=_guarded(sys.stderr) if usable else None,
        disable=not (show and total != 0 and usable),
    )


@contextmanager
def quiet_failures() -> Iterator[None]:
    """Within the block, `sys.stderr` drops what it cannot write instead of raising: a
    command's messages and errors, logging's and warnings' lines. Put back after.

    For the `elmo` command, which owns its process; a library call only draws its
    progress bar there (`progress_bar`), which needs no such guard.
    """
    previous = sys.stderr
    sys.stderr = _DropOnFailure(previous)
    try:
        yield
    finally:
        sys.stderr = previous
