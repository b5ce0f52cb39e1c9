"""Users' files: every command checks a named input and decodes its text here, by one set of rules.

UTF-8, a leading byte-order mark dropped, CRLF read as LF. `.xz`, `.gz` and `.bz2` are
decompressed, `-` is standard input. Bad text or a missing file is one `ElmoError` that
names the file, the line and the fix.
"""

from __future__ import annotations

import bz2
import fnmatch
import gzip
import json
import lzma
import os
import shlex
import stat
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, TextIO, cast

from ..model.environment import environment_value
from ..model.errors import ElmoError

ENCODING = "utf-8-sig"
"""UTF-8 that drops a leading byte-order mark."""

BYTE_ORDER_MARK = "\ufeff"

STDIN = "-"
"""Standard input. `pathlib` reads `./-` as `-`: name a file called `-` by its absolute path."""

COMPRESSIONS: dict[str, Callable[..., IO[Any]]] = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}
"""File name suffix -> opener of the compressed files every reader reads."""


def is_stream(path: str | Path) -> bool:
    """True for `-` and anything not a regular file (a pipe, `<(...)`): it can be read only once."""
    if str(path) == STDIN:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def check_input_file(path: str | Path, what: str = "input file", *, streams: str | None = None) -> Path:
    """`path` as a Path, after checking that it names a readable file.

    Args:
        path: The path a user gave. `-` is standard input.
        what: How the message names it ("INPUT", "--vocab").
        streams: None to accept a stream, else why this reader refuses one.

    Raises:
        ElmoError: if it does not exist, is a folder, cannot be read, or is a refused stream.
    """
    path = Path(path)
    if is_stream(path):
        if streams is not None:
            raise ElmoError(f"{what} {path} is a stream (standard input or a pipe), but {streams}; give a file.")
        return path
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


def open_binary(path: str | Path) -> IO[bytes]:
    """A file's bytes, decompressed by suffix (`COMPRESSIONS`). `-` is standard input, left open on close."""
    if str(path) == STDIN:
        return cast(IO[bytes], _Unclosed(sys.stdin.buffer))  # a proxy: IO[bytes] by delegation
    opener = COMPRESSIONS.get(Path(path).suffix)
    if opener is None:
        return open(path, "rb")  # noqa: SIM115
    return cast(IO[bytes], _Decompressed(path, opener(path, "rb")))  # the reading side of an IO[bytes]


def max_line_bytes() -> int:
    """`ELMO_MAX_LINE_BYTES`: the longest line read, in bytes without its "\\n"."""
    return int(environment_value("ELMO_MAX_LINE_BYTES"))


def read_line(handle: IO[bytes], name: str, line: int, limit: int | None = None) -> bytes:
    """The next line's bytes with its "\\n" (b"" at the end), read no further than `limit` bytes.

    So a decompression bomb's one endless line is refused at once. `name` and `line` (from 1)
    are for the message. `limit` None is `max_line_bytes()`.

    Raises:
        ElmoError: for a longer line.
    """
    limit = max_line_bytes() if limit is None else limit
    data = handle.readline(limit + 1)
    if len(data) > limit and not data.endswith(b"\n"):
        raise ElmoError(
            f"{name} line {line} holds more than {limit:,} bytes, the longest line elmo-bilm reads (its end was "
            f"not read). Split the text into shorter lines, or raise the limit: ELMO_MAX_LINE_BYTES={10 * limit}."
        )
    return data


DECOMPRESSION_ERRORS = (EOFError, lzma.LZMAError, zlib.error, OSError)
"""What gzip, lzma and bz2 raise for a cut-short or damaged file."""


class _Decompressed:
    """A compressed file whose damage is an ElmoError (an EOFError would reach click as "Aborted!")."""

    def __init__(self, path: str | Path, raw: IO[bytes]) -> None:
        self.name = str(path)
        self._raw = raw
        self._lines: int | None = 0  # newlines read so far (None after a seek into the middle)

    def _call(self, method: str, *args: Any) -> Any:
        try:
            data = getattr(self._raw, method)(*args)
        except DECOMPRESSION_ERRORS as err:
            where = f"after line {self._lines}: " if self._lines is not None else ""
            raise ElmoError(
                f"{self.name} is a damaged or cut-short {Path(self.name).suffix} file ({where}{err}); copy or "
                "download it again, or test it with its tool (xz -t, gzip -t, bzip2 -t)."
            ) from None
        if isinstance(data, bytes) and self._lines is not None:
            self._lines += data.count(b"\n")
        return data

    def read(self, size: int = -1) -> bytes:
        return self._call("read", size)

    def readline(self, size: int = -1) -> bytes:
        return self._call("readline", size)

    def seek(self, offset: int, whence: int = 0) -> int:
        self._lines = 0 if (offset, whence) == (0, 0) else None
        return self._call("seek", offset, whence)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> _Decompressed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Unclosed:
    """Standard input's bytes, left open by `close()`."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._stream)

    def close(self) -> None:
        pass

    def __enter__(self) -> _Unclosed:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def open_text(path: str | Path, mode: str = "rt") -> TextIO:
    """Open a UTF-8 text file to read, or (`mode="wt"`) to write, compressed by its suffix.

    Lines end at `\\n`. Each read line is decoded alone, so an error names its line.
    """
    if "r" not in mode:
        opener = COMPRESSIONS.get(Path(path).suffix, open)
        return opener(path, mode, encoding="utf-8", newline="\n")  # never a BOM
    return cast(TextIO, _TextLines(path, open_binary(path)))  # the reading side of a TextIO


class _TextLines:
    """`io.TextIOWrapper(..., newline="\\n")` that names the line that is not UTF-8."""

    def __init__(self, path: str | Path, raw: IO[bytes]) -> None:
        self.name = str(path)
        self._raw = raw
        self._line = 0  # lines read so far
        self._limit = max_line_bytes()

    def readline(self) -> str:
        data = read_line(self._raw, self.name, self._line + 1, self._limit)
        if not data:
            return ""
        self._line += 1
        text = decode_line(data, self.name, self._line)
        if self._line == 1 and text.startswith(BYTE_ORDER_MARK):
            text = text[len(BYTE_ORDER_MARK) :]
        return text

    def read(self) -> str:
        return "".join(iter(self.readline, ""))

    def __iter__(self) -> Iterator[str]:
        return iter(self.readline, "")

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> _TextLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_WIDE_BYTE_ORDER_MARKS = (  # UTF-32's first: its little-endian mark starts with UTF-16's
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def decode_line(data: bytes, name: str, line: int) -> str:
    """One line's bytes as UTF-8 text. `name` and `line` (from 1) are for the message.

    Raises:
        ElmoError: for UTF-16 or UTF-32 text (with or without a byte-order mark) or other
            bytes that are not UTF-8. It gives the `iconv` command that converts the file.
    """
    wide = next((kind for mark, kind in _WIDE_BYTE_ORDER_MARKS if line == 1 and data.startswith(mark)), None)
    if wide is not None:
        what = f"is {wide} text (it starts with a {wide} byte-order mark), not UTF-8"
        raise ElmoError(f"{name} {what}. Convert it to UTF-8 first: {_iconv(wide, name)}.")
    utf16 = _utf16_without_mark(data, line)
    if utf16 is not None:
        raise ElmoError(
            f"{name} is not UTF-8 text (line {line} has a NUL byte in every other byte: it looks like UTF-16 "
            f"without a byte-order mark). Convert it to UTF-8 first: {_iconv(utf16, name)}."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ElmoError(
            f"{name} is not UTF-8 text (line {line}: {err.reason}). Convert it to UTF-8 from the encoding it was "
            f"written in first, e.g. for Windows text: {_iconv('CP1252', name)} (file -i guesses the encoding)."
        ) from None


def _utf16_without_mark(data: bytes, line: int) -> str | None:
    """The UTF-16 variant line 1 looks like (NUL in every other byte), else None.

    Only line 1 is judged: a stray NUL later (a damaged archive) is not UTF-16.
    """
    if line != 1 or b"\x00" not in data or len(data) < 2:
        return None
    even, odd = data[::2].count(0) / len(data[::2]), data[1::2].count(0) / len(data[1::2])
    if max(even, odd) < 0.7 or min(even, odd) > 0.3:
        return None
    return "UTF-16LE" if odd > even else "UTF-16BE"


def _iconv(encoding: str, name: str) -> str:
    path = Path(name)
    if is_stream(name) or path.suffix in COMPRESSIONS:
        return f"iconv -f {encoding} -t UTF-8 in.txt > out.txt"  # the user's own file names
    converted = path.with_name(f"{path.stem}.utf8{path.suffix}")
    return f"iconv -f {encoding} -t UTF-8 {shlex.quote(name)} > {shlex.quote(str(converted))}"


def iter_lines(path: str | Path) -> Iterator[str]:
    """The lines of a text file, without their line endings (LF or CRLF).

    Raises:
        ElmoError: at the first line that is not UTF-8.
    """
    with open_text(path) as f:
        for line in f:
            yield strip_line_end(line)


def read_text(path: str | Path, what: str = "input file") -> str:
    """The whole text of a file, BOM dropped and CRLF endings read as LF.

    Raises:
        ElmoError: if the file is missing, a folder, unreadable, or not UTF-8.
    """
    path = check_input_file(path, what)
    try:
        with open_text(path) as f:
            text = f.read()
    except ElmoError as err:
        raise ElmoError(f"{what} {err}") from None
    return text.replace("\r\n", "\n")


def iter_conll_rows(lines: Iterable[str], name: str | Path) -> Iterator[list[str]]:
    """The columns of each line of a CoNLL file: a token and its labels. A blank line gives `[]`.

    Token lines need the same number of columns, at least two, so prose is refused.

    Raises:
        ElmoError: at the first token line with one column, or another count than the first.
    """
    first: tuple[int, int] | None = None  # (line number, columns) of the first token line
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if fields and not fields[0].startswith("-DOCSTART-"):
            if first is None:
                first = (number, len(fields))
            if len(fields) < 2 or len(fields) != first[1]:
                found = "no label column" if len(fields) < 2 else f"{len(fields)} columns, line {first[0]} {first[1]}"
                raise ElmoError(
                    f"{name} is not a CoNLL file: line {number} ({line.strip()[:60]!r}) has {found}. Expected "
                    "one token per line, its label columns after it (as many on every line), a blank line "
                    "between sentences."
                )
        yield fields


def read_json(path: str | Path, what: str = "JSON file", error: type[ElmoError] = ElmoError) -> Any:
    """The value in a UTF-8 JSON file. `what` names it in the message.

    Raises:
        ElmoError: (`error`) for a missing or unreadable file, or text not UTF-8 or not JSON.
    """
    try:
        text = read_text(path, what)
    except ElmoError as err:
        raise error(str(err)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{what} {path} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}).") from None


def strip_line_end(line: str) -> str:
    """`line` without its LF or CRLF ending. A lone `\\r` inside it stays."""
    if line.endswith("\n"):
        line = line[:-1]
    if line.endswith("\r"):
        line = line[:-1]
    return line


def same_file(a: str | Path, b: str | Path) -> bool:
    """True if both paths exist and are one file (any spelling, symlinks, hard links).

    `-` is the file behind standard input: `elmo embed - data.txt < data.txt` is caught.
    """
    try:
        first, second = _stat_of(a), _stat_of(b)
    except (OSError, ValueError, AttributeError):  # no such file; no standard input (a daemon, pytest)
        return False
    return os.path.samestat(first, second)


def _stat_of(path: str | Path) -> os.stat_result:
    return os.fstat(sys.stdin.fileno()) if str(path) == STDIN else os.stat(path)


def _inside(path: str | Path, folder: str | Path, anywhere: bool) -> bool:
    if str(path) == STDIN or not Path(folder).is_dir():
        return False
    try:
        resolved = Path(path).resolve()
    except OSError:
        return False
    parents = resolved.parents if anywhere else [resolved.parent]
    return any(same_file(parent, folder) for parent in parents)


def check_output_spares_inputs(
    outputs: Iterable[tuple[str, str | Path]],
    inputs: Iterable[tuple[str, str | Path | None]],
    *,
    folders: Iterable[tuple[str, str | Path, Sequence[str] | None]] = (),
) -> None:
    """Refuse, before any work, a command whose output would destroy one of its inputs.

    Refused: an output that is an input (`same_file`), an input with a name the command
    writes in a folder, and an input anywhere in a folder the command deletes.

    Args:
        outputs: `(name, path)` of each file the command writes.
        inputs: `(name, path)` of each file it reads. None is skipped.
        folders: `(name, folder, patterns)`: the `fnmatch` patterns the command writes in
            `folder`, or None for a folder it deletes at the end.

    Raises:
        ElmoError: naming the output, the input and the fix.
    """
    present = [(name, path) for name, path in inputs if path is not None]
    folders = list(folders)
    for out_name, out in [*outputs, *((name, folder) for name, folder, _ in folders)]:
        for in_name, path in present:
            if same_file(out, path):
                raise ElmoError(
                    f"{out_name} {out} is {in_name} {path} (the same file): writing it would destroy the input. "
                    f"Give another {out_name}."
                )
    for out_name, folder, patterns in folders:
        for in_name, path in present:
            if patterns is None and _inside(path, folder, anywhere=True):
                raise ElmoError(
                    f"{in_name} {path} is inside {out_name} {folder}, which this command deletes at the end: "
                    f"it would destroy the input. Move the input, or give another {out_name.split()[0]}."
                )
            name = Path(path).name
            written = patterns is not None and any(fnmatch.fnmatch(name, p) for p in patterns)
            if written and _inside(path, folder, anywhere=False):
                raise ElmoError(
                    f"{in_name} {path} is in {out_name} {folder}, where this command writes {name!r}: "
                    f"it would destroy the input. Give another {out_name}, or move the input."
                )


def check_output_is_new(
    name: str, path: str | Path, fix: str, *, patterns: Sequence[str] | None = None, what: str = "files"
) -> None:
    """Refuse, before any work, an output that holds an earlier run's work.

    Args:
        name: How the message names the output (`--out`).
        path: The output file, or with `patterns` the folder.
        fix: The way out, one sentence.
        patterns: The `fnmatch` patterns the command writes in the folder.
        what: What the matching files make up ("a training run").

    Raises:
        ElmoError: if the file exists, or the folder holds a matching file.
    """
    path = Path(path)
    if patterns is None:
        if os.path.lexists(path):
            raise ElmoError(f"{name} {path} already exists, and this command would overwrite it. {fix}")
        return
    if not path.is_dir():
        return
    found = sorted(p.name for p in path.iterdir() if any(fnmatch.fnmatch(p.name, pattern) for pattern in patterns))
    if found:
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        raise ElmoError(f"{name} {path} already holds {what} ({shown}), which this command would overwrite. {fix}")
