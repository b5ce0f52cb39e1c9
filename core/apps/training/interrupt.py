"""Ctrl-C and SIGTERM during training: stop at the next step boundary, so the run can save.

The first SIGINT or SIGTERM stops the loop after its step, and the run saves a checkpoint.
A second signal stops at once, without saving. One within `REPEAT_AFTER_S` of the first is
the same request: torchrun passes the terminal's Ctrl-C on to processes that got it already.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from types import FrameType, TracebackType
from typing import Any

REPEAT_AFTER_S = 1.0
"""Seconds after the first signal from which a second one stops at once."""

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """A context manager: while entered, SIGINT and SIGTERM ask the training loop to stop.

    The earlier handlers are put back on exit. Outside the main thread nothing is installed.

    Args:
        notice: A line for standard error when the first signal arrives. None: silent.

    Attributes:
        received: The number of the first signal received, or None.
    """

    def __init__(self, notice: str | None = None) -> None:
        self.notice = notice
        self.received: int | None = None
        self._first_at = 0.0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.received is None:
            self.received, self._first_at = signum, now
            if self.notice is not None:
                with contextlib.suppress(OSError):  # no usable standard error: the stop goes on regardless
                    os.write(2, f"\n{self.notice}\n".encode())
        elif now - self._first_at >= REPEAT_AFTER_S:
            raise KeyboardInterrupt
