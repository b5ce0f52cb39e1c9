"""What the library shows on standard error: progress bars and messages.

A process may have no usable standard error: a daemon started with `2>&-`, a full disk, a
`pythonw` program. The work goes on there as anywhere else, and what cannot be written is dropped.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tqdm import tqdm


class _DropOnFailure:
    """Passes writes on to `stream` until one fails (a full disk, a closed descriptor), then drops them."""

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
    # The same object where it already is one: tqdm.write clears only the bars drawn on the
    # very stream it writes to, so a log line never runs into the bar.
    return stream if isinstance(stream, _DropOnFailure) else _DropOnFailure(stream)


def stderr_usable() -> bool:
    """Whether `sys.stderr` is there, open, and has not failed a write (as far as `quiet_failures` saw)."""
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
    """The tqdm bar of every command, counting `unit`s up to `total` (None: no end known).

    Iterating it yields `items`, one count each. It is off when `show` is False, when `total`
    is 0 and when standard error is not usable. A bar with no known end appears after half a
    second, so a quick input draws none. A write that fails silences the bar, not the run.
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
    """Within the block, `sys.stderr` drops what it cannot write instead of raising.

    For the `elmo` command, which owns its process. A library call only draws its progress
    bar, which needs no such guard.
    """
    previous = sys.stderr
    sys.stderr = _DropOnFailure(previous)
    try:
        yield
    finally:
        sys.stderr = previous
