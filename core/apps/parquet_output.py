"""`elmo embed`'s Parquet writer: a piece per file, merged in line order into one OUTPUT.parquet.

Same interface as `elmo_core.apps.hdf5_output`. The rows are those of every engine.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..files.parquet_files import ParquetLinesWriter, copy_in_line_order
from .lines import EmbeddedLine

__all__ = ["ParquetOutput"]


class ParquetOutput:
    """Pieces and the merged OUTPUT as Parquet files of the output schema.

    Args:
        dim: The vectors' last dimension.
        store_dtype: "float32" or "float16".
    """

    piece_suffix = ".parquet"

    def __init__(self, dim: int, store_dtype: str = "float32") -> None:
        self.dim = dim
        self.store_dtype = store_dtype

    @contextlib.contextmanager
    def piece(self, path: Path, piece: object) -> Iterator[Callable[[int, EmbeddedLine], None]]:
        """Yields `write(line, row)`. The rows of a piece may come in any order."""
        with ParquetLinesWriter(path, self.dim, self.store_dtype, compressed=False) as out:
            yield lambda line, row: out.write(line, row.tokens, row.offsets, row.vectors)

    def merge(self, path: Path, pieces: Sequence[Path], job: dict[str, Any]) -> None:
        with ParquetLinesWriter(path, self.dim, self.store_dtype, job=json.dumps(job)) as out:
            copy_in_line_order(pieces, out)
