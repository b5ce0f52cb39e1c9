"""The input of `elmo embed`, cut into pieces: runs of whole lines of about `piece_tokens` tokens.

A piece is the unit of work, of resuming and of sharing among torchrun processes
(docs/guides/big-corpora.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..files.text_files import (
    BYTE_ORDER_MARK,
    decode_line,
    max_line_bytes,
    open_binary,
    read_line,
    strip_line_end,
)
from ..model.checks import check_int
from ..model.errors import ElmoError

DEFAULT_PIECE_TOKENS = 50_000
"""Tokens per piece: what an interrupted job redoes at most (per process), and the unit processes share."""

PIECE_BYTES = 64 << 20
"""A piece of several lines also ends before this many bytes, so memory stays bounded."""


@dataclass(frozen=True)
class Piece:
    """Lines `[first_line, end_line)` of the input, bytes `[byte_start, byte_end)`.

    `cost` is tokens + 1 per line, so blank lines count too when ranks are balanced.
    """

    index: int
    first_line: int
    end_line: int
    byte_start: int
    byte_end: int
    cost: int

    @property
    def tokens(self) -> int:
        return self.cost - (self.end_line - self.first_line)


def plan_pieces(
    path: str | Path, piece_tokens: int = DEFAULT_PIECE_TOKENS, name: str | None = None
) -> tuple[list[Piece], int, int, str]:
    """Read the input once: check it is UTF-8, count tokens, cut it into pieces.

    Lines and tokens are those of `elmo_core.files.text_files` and `str.split()`. `name` is
    how errors name the input (default: `path`).

    Returns:
        `(pieces, lines, tokens, sha256 of the file)`.

    Raises:
        ElmoError: if the file does not exist, is not UTF-8 or holds a line over
            `ELMO_MAX_LINE_BYTES` (names the line).
    """
    piece_tokens = check_int("piece_tokens", piece_tokens)
    path = Path(path)
    digest = hashlib.sha256()
    pieces: list[Piece] = []
    line = tokens = offset = 0
    first_line = byte_start = cost = 0
    try:
        handle = open_binary(path)
    except FileNotFoundError:
        raise ElmoError(f"input file {path} does not exist.") from None
    with handle:
        limit = max_line_bytes()
        while raw := read_line(handle, name or str(path), line + 1, limit):  # bounded: ELMO_MAX_LINE_BYTES
            digest.update(raw)
            text = decode_line(raw, name or str(path), line + 1)
            n = len(_split_line(text, line).split())
            if line > first_line and (cost + n + 1 > piece_tokens or offset + len(raw) - byte_start > PIECE_BYTES):
                pieces.append(Piece(len(pieces), first_line, line, byte_start, offset, cost))
                first_line, byte_start, cost = line, offset, 0
            cost += n + 1
            tokens += n
            offset += len(raw)
            line += 1
    if line > first_line:
        pieces.append(Piece(len(pieces), first_line, line, byte_start, offset, cost))
    return pieces, line, tokens, digest.hexdigest()


def _split_line(text: str, line: int) -> str:
    if line == 0 and text.startswith(BYTE_ORDER_MARK):
        text = text[len(BYTE_ORDER_MARK) :]
    return strip_line_end(text)


class PieceReader:
    """The input, open once for a rank's pieces, read as byte ranges of the decompressed text.

    The pieces come in order, so a compressed file is decompressed once.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = open_binary(path)

    def read(self, piece: Piece) -> list[str]:
        self.handle.seek(piece.byte_start)
        return _piece_lines(self.path, piece, self.handle.read(piece.byte_end - piece.byte_start))

    def close(self) -> None:
        self.handle.close()


def _piece_lines(path: Path, piece: Piece, data: bytes) -> list[str]:
    lines = data.decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the piece's last line
    if len(lines) != piece.end_line - piece.first_line:
        raise ElmoError(
            f"{path} changed while it was being embedded (lines {piece.first_line}..{piece.end_line - 1} "
            "are no longer where they were). Embed a file that nothing writes to."
        )
    return [_split_line(text, piece.first_line + k) for k, text in enumerate(lines)]


def assign_pieces(pieces: Sequence[Piece], world_size: int) -> list[list[Piece]]:
    """Largest piece first, each to the rank with the smallest total so far (ties: lower rank)."""
    loads = [0] * world_size
    shares: list[list[Piece]] = [[] for _ in range(world_size)]
    for piece in sorted(pieces, key=lambda p: (-p.cost, p.index)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shares[rank].append(piece)
        loads[rank] += piece.cost
    return [sorted(share, key=lambda p: p.index) for share in shares]
