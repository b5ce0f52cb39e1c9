"""The columnar output: one row per input line, as Arrow tables and Parquet files.

Every columnar writer builds its rows with `lines_table`, so they share one schema
(docs/reference/columnar-output.md). pyarrow is imported only when used.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..model.errors import ElmoError, missing_extra

STORE_DTYPES = {"float32": np.float32, "float16": np.float16}
"""The dtypes the vectors can be stored in: float16 halves the bytes (about 3 significant digits)."""

ROW_GROUP_BYTES = 32 << 20
"""Bytes of vectors per Parquet row group: a streaming reader holds about one row group at a time."""

_VALUES = "vectors.list.element.list.element.list.element"
COMPRESSED = {
    "compression": "zstd",
    "compression_level": 1,
    "use_byte_stream_split": [_VALUES],  # floats' bytes grouped by position compress better
    "use_dictionary": ["tokens"],
    "write_statistics": ["line"],
}
"""How a file that is kept is written: floats barely compress, so the fastest zstd."""
PLAIN = {"compression": "none", "use_dictionary": ["tokens"], "write_statistics": ["line"]}
"""How a piece that is read once more is written: no compression to undo."""


def import_pyarrow(what: str = "the columnar (Parquet) output") -> Any:
    """pyarrow, or an ImportError naming the extra that installs it."""
    try:
        import pyarrow
    except ImportError as err:
        raise missing_extra(err, "pyarrow", "parquet", what) from err
    return pyarrow


def check_store_dtype(store_dtype: str) -> np.dtype:
    """The numpy dtype for a store dtype's name, or a ValueError naming the choices."""
    if store_dtype not in STORE_DTYPES:
        raise ValueError(f"store_dtype must be one of {', '.join(STORE_DTYPES)}; got {store_dtype!r}.")
    return np.dtype(STORE_DTYPES[store_dtype])


def output_schema(dim: int, store_dtype: str = "float32") -> Any:
    """The Arrow schema of the output: `line`, `tokens`, `offsets`, `vectors` [layers][tokens][dim]."""
    pa = import_pyarrow()
    value = pa.float16() if store_dtype == "float16" else pa.float32()
    return pa.schema(
        [
            pa.field("line", pa.int64()),
            pa.field("tokens", pa.list_(pa.string()), nullable=False),
            pa.field("offsets", pa.list_(pa.list_(pa.int64(), 2))),
            pa.field("vectors", pa.list_(pa.list_(pa.list_(value, dim))), nullable=False),
        ]
    )


def lines_table(
    lines: Sequence[int | None],
    tokens: Sequence[Sequence[str]],
    offsets: Sequence[Sequence[tuple[int, int]] | None],
    vectors: Sequence[np.ndarray],
    dim: int,
    store_dtype: str = "float32",
) -> Any:
    """Rows of the output schema as a `pyarrow.Table`.

    Args:
        lines: Each row's 0-based line number, or None.
        tokens: Each row's tokens.
        offsets: Each row's `(start, end)` character offsets, or None.
        vectors: Each row's vectors.
        dim: The vectors' last dimension.
        store_dtype: "float32" or "float16".

    Shape:
        vectors: one `[layers, tokens, dim]` array per row.
    """
    pa = import_pyarrow()
    schema = output_schema(dim, store_dtype)
    dtype = check_store_dtype(store_dtype)
    layer_counts = np.array([v.shape[0] for v in vectors], dtype=np.int64)
    none = np.zeros(0, np.int64)
    token_counts = np.concatenate([np.full(v.shape[0], v.shape[1], dtype=np.int64) for v in vectors] or [none])
    flat = np.concatenate([v.astype(dtype, copy=False).reshape(-1) for v in vectors] or [np.zeros(0, dtype)])
    per_token = pa.FixedSizeListArray.from_arrays(pa.array(flat), dim)  # [sum of tokens * layers, dim]
    per_layer = pa.ListArray.from_arrays(_starts(token_counts), per_token)  # [sum of layers][tokens][dim]
    per_row = pa.ListArray.from_arrays(_starts(layer_counts), per_layer)  # [rows][layers][tokens][dim]
    columns = [
        pa.array(lines, type=pa.int64()),
        pa.array([list(t) for t in tokens], type=pa.list_(pa.string())),
        pa.array([None if o is None else [list(p) for p in o] for o in offsets], type=schema.field("offsets").type),
        per_row,
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _starts(counts: np.ndarray) -> Any:
    import pyarrow as pa

    return pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))


JOB_KEY = b"elmo_embed_job"
"""The key of the file's metadata under which `elmo embed` records its job (JSON)."""


def read_job_record(path: str | Path) -> str:
    """The job record (JSON text) of an `elmo embed` Parquet OUTPUT. KeyError when it has none."""
    import_pyarrow()
    import pyarrow.parquet as pq

    return (pq.read_schema(str(path)).metadata or {})[JOB_KEY].decode()


class ParquetLinesWriter:
    """Writes rows of the output schema to one Parquet file, in row groups of about `ROW_GROUP_BYTES`.

    `compressed=False` is for a piece that is read once more.
    """

    def __init__(
        self, path: str | Path, dim: int, store_dtype: str = "float32", compressed: bool = True, job: str | None = None
    ) -> None:
        pa = import_pyarrow()
        import pyarrow.parquet as pq

        self.dim = dim
        self.store_dtype = store_dtype
        self._itemsize = check_store_dtype(store_dtype).itemsize
        self._rows: list[tuple[int | None, Sequence[str], Any, np.ndarray]] = []
        self._bytes = 0
        options = COMPRESSED if compressed else PLAIN
        schema = output_schema(dim, store_dtype)
        if job is not None:  # the job that wrote the file, read back by read_job_record
            schema = schema.with_metadata({**(schema.metadata or {}), JOB_KEY: job})
        self._writer = pq.ParquetWriter(str(path), schema, **options)
        self._pa = pa

    def write(self, line: int | None, tokens: Sequence[str], offsets: Any, vectors: np.ndarray) -> None:
        self._rows.append((line, tokens, offsets, vectors))
        self._bytes += vectors.size * self._itemsize
        if self._bytes >= ROW_GROUP_BYTES:
            self.flush()

    def write_table(self, table: Any) -> None:
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))

    def flush(self) -> None:
        if self._rows:
            lines, tokens, offsets, vectors = zip(*self._rows)
            self.write_table(lines_table(lines, tokens, offsets, vectors, self.dim, self.store_dtype))
        self._rows, self._bytes = [], 0

    def close(self) -> None:
        self.flush()
        self._writer.close()

    def __enter__(self) -> ParquetLinesWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._writer.close()


def copy_in_line_order(sources: Sequence[Path], writer: ParquetLinesWriter) -> None:
    """Append the rows of Parquet files to `writer`, sorted by `line` within each file, a row group at a time."""
    import pyarrow.parquet as pq

    for source in sources:
        table = pq.read_table(source, memory_map=True)
        if table.schema != writer._writer.schema:
            raise ElmoError(f"{source} does not hold rows of this output's schema; delete it and run again.")
        order = np.argsort(table.column("line").to_numpy(), kind="stable")
        vectors = table.column("vectors")
        step = max(1, table.num_rows * ROW_GROUP_BYTES // max(_vector_bytes(vectors, writer), 1))
        for start in range(0, table.num_rows, step):
            writer.write_table(table.take(order[start : start + step]))


def _vector_bytes(vectors: Any, writer: ParquetLinesWriter) -> int:
    import pyarrow.compute as pc

    values = pc.list_flatten(pc.list_flatten(vectors))
    return len(values) * writer.dim * writer._itemsize
