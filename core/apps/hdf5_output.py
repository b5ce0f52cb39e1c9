"""`elmo embed`'s hdf5 writer: a piece per file, merged in line order into one OUTPUT.

One dataset per line, named by its 0-based number: `[layers, tokens, dim]` for layers="all",
else `[tokens, dim]`. Its attribute "tokens" holds the line's tokens. File attributes "layers"
and "dim" record the settings. `elmo_core.apps.parquet_output` has the same interface.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..files.hdf5_files import import_h5py, open_hdf5
from .lines import EmbeddedLine
from .pieces import Piece

NUL_REPLACEMENT = "\ufffd"  # HDF5 strings end at U+0000; a token's U+0000 is stored as U+FFFD


class Hdf5Output:
    """Pieces and the merged OUTPUT as hdf5 files."""

    def __init__(self, layers: str, dim: int, store_dtype: str = "float32") -> None:
        self.h5py = import_h5py("embed_file (its output is hdf5)")
        self.layers = layers
        self.dim = dim
        self.store_dtype = store_dtype

    @contextlib.contextmanager
    def piece(self, path: Path, piece: Piece) -> Iterator[Callable[[int, EmbeddedLine], None]]:
        # v108: attributes over 64 kB (long lines' tokens)
        with open_hdf5(path, "w", libver="v108") as out:
            out.attrs["first_line"] = piece.first_line
            out.attrs["end_line"] = piece.end_line

            def write(line: int, row: EmbeddedLine) -> None:
                vectors = row.vectors if self.layers == "all" else row.vectors[0]  # [tokens, dim] for one layer
                dataset = out.create_dataset(str(line), data=vectors)
                dataset.attrs.create("tokens", _storable(row.tokens), dtype=self.h5py.string_dtype())

            yield write

    def merge(self, path: Path, pieces: Sequence[Path], job: dict[str, Any]) -> None:
        with open_hdf5(path, "w", libver="v108") as out:
            out.attrs["layers"] = job["settings"]["layers"]
            out.attrs["dim"] = job["settings"]["dim"]
            out.attrs["job"] = json.dumps(job)  # recognises the same job later (embed_job.finished_job)
            for piece_path in pieces:
                with open_hdf5(piece_path, "r") as source:
                    for line in range(int(source.attrs["first_line"]), int(source.attrs["end_line"])):
                        source.copy(source[str(line)], out, name=str(line))


def _storable(tokens: Sequence[str]) -> list[str]:
    return [t.replace("\x00", NUL_REPLACEMENT) if "\x00" in t else t for t in tokens]
