"""Users' files: one place that checks a named input file and decodes its text.

Every command and reader that takes a user's file (`elmo embed`, `train`, `perplexity`,
`probe`, the CoNLL readers, vocabulary and options files) goes through these, so the
rules hold everywhere:

- UTF-8, and a leading byte-order mark (written by some Windows editors) is dropped:
  it is not part of the first token.
- Windows line endings (CRLF) read like Unix ones (LF). A lone `\\r` inside a line is
  left alone, so line numbers are the same on every platform.
- `.xz` files are decompressed on the fly.
- A path that does not exist, is a folder, or cannot be read gives one `ElmoError`
  that names it and the fix, before any work is done.
"""

from __future__ import annotations

import lzma
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from .errors import ElmoError

__all__ = ["BYTE_ORDER_MARK", "ENCODING", "check_input_file", "iter_lines", "open_text", "read_text", "strip_line_end"]

ENCODING = "utf-8-sig"
"""UTF-8 that drops a leading byte-order mark (and reads a file without one as UTF-8)."""

BYTE_ORDER_MARK = "\ufeff"
"""What a leading byte-order mark decodes to; for readers that decode lines themselves."""


def check_input_file(path: str | Path, what: str = "input file") -> Path:
    """`path` as a Path, after checking that it names a readable file.

    Args:
        path: The path a user gave.
        what: How the message names it ("INPUT", "CoNLL file", "--vocab", ...).

    Raises:
        ElmoError: if it does not exist, is a folder, or cannot be read (one line,
            naming the path and what to give instead).
    """
    path = Path(path)
    if path.is_dir():
        raise ElmoError(f"{what} {path} is a folder; give the path of a file.")
    if not path.exists():
        raise ElmoError(f"{what} {path} does not exist.")
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise ElmoError(f"{what} {path} cannot be read ({err.strerror or err}).") from None
    return path


def open_text(path: str | Path, mode: str = "rt") -> TextIO:
    """Open a UTF-8 text file (see the module rules), xz-compressed when the name ends in `.xz`.

    Lines end only at `\\n`; `iter_lines` also drops the `\\r` of a CRLF ending.
    """
    path = Path(path)
    encoding = ENCODING if "r" in mode else "utf-8"  # never write a BOM
    if path.suffix == ".xz":
        return lzma.open(path, mode, encoding=encoding, newline="\n")  # type: ignore[return-value]
    return open(path, mode, encoding=encoding, newline="\n")


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a text file, without their line endings (LF or CRLF)."""
    with open_text(path) as f:
        for line in f:
            yield strip_line_end(line)


def read_text(path: str | Path, what: str = "input file") -> str:
    """The whole text of a file, BOM dropped and CRLF endings read as LF.

    Raises:
        ElmoError: if the file is missing, a folder, unreadable, or not UTF-8 (names
            the line of the first bad byte).
    """
    path = check_input_file(path, what)
    try:
        with open_text(path) as f:
            text = f.read()
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise ElmoError(f"{what} {path} is not UTF-8 text (line {line}: {err.reason}).") from None
    return text.replace("\r\n", "\n")


def strip_line_end(line: str) -> str:
    """`line` without its line ending (LF or CRLF); a lone `\\r` inside it stays."""
    if line.endswith("\n"):
        line = line[:-1]
    if line.endswith("\r"):
        line = line[:-1]
    return line
