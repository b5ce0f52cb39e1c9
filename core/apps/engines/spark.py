"""Spark: the batch function behind `pyspark.ml.functions.predict_batch_udf`.

    embed = elmo_udf(layers="top")
    df = df.withColumn("elmo", embed("line", "text"))

The struct's fields are the columns of `elmo embed OUTPUT.parquet`
(docs/reference/columnar-output.md), with float32 vectors: Spark has no float16 type.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...model.errors import missing_extra
from ...runtime.embedding import DEFAULT_BATCH_TOKENS
from ...runtime.threads import set_thread_policy
from ..lines import EmbeddedLine, LineEmbedder

__all__ = ["elmo_udf", "make_predict_fn", "spark_schema"]


def spark_schema() -> Any:
    """The UDF's return type: a struct of `line`, `tokens`, `offsets` and `vectors` `[layers][tokens][dim]`."""
    T = _import_spark_types()
    return T.StructType(
        [
            T.StructField("line", T.LongType()),
            T.StructField("tokens", T.ArrayType(T.StringType())),
            T.StructField("offsets", T.ArrayType(T.ArrayType(T.LongType()))),
            T.StructField("vectors", T.ArrayType(T.ArrayType(T.ArrayType(T.FloatType())))),
        ]
    )


def make_predict_fn(
    model: str | Path | None = None,
    *,
    options: str | Path | None = None,
    weights: str | Path | None = None,
    layers: str | int = "all",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    precision: str = "fp32",
    device: str = "cpu",
    tokenize: bool = False,
) -> Callable[[np.ndarray, np.ndarray], list[dict[str, Any]]]:
    """Load the model once per Spark Python worker and return `predict(lines, texts)`.

    `predict` maps numpy arrays of line numbers and raw lines to one dict per line, as
    `predict_batch_udf` expects. Forwards use the task's CPUs (`spark.task.cpus`) as threads.
    Arguments: as `elmo_udf`.
    """
    cpus = _task_cpus()
    if cpus is not None:
        set_thread_policy(cpus)
    embedder = LineEmbedder(
        model,
        options=options,
        weights=weights,
        layers=layers,
        batch_tokens=batch_tokens,
        precision=precision,
        device=device,
        tokenize=tokenize,
    )

    def predict(lines: np.ndarray, texts: np.ndarray) -> list[dict[str, Any]]:
        numbers = [_line_number(line, k) for k, line in enumerate(lines.tolist())]
        rows = embedder.rows(texts.tolist(), lines=numbers)
        return [_spark_row(number, row) for number, row in zip(numbers, rows)]

    return predict


def _line_number(line: Any, index: int) -> int:
    if line is None:
        raise ValueError(
            f"row {index} of the batch has no line number (null); give every row one, e.g. "
            "df.withColumn('line', F.monotonically_increasing_id())."
        )
    return int(line)


def _spark_row(line: int, row: EmbeddedLine) -> dict[str, Any]:
    # predict_batch_udf takes each array as a 1-D numpy array (of arrays, for nested ones).
    offsets = np.empty(len(row.tokens), dtype=object)
    offsets[:] = [list(pair) for pair in row.offsets or []]
    vectors = np.empty(row.vectors.shape[0], dtype=object)
    vectors[:] = [list(layer) for layer in row.vectors]  # each [tokens] of [dim] float32 arrays
    return {
        "line": np.int64(line),
        "tokens": np.array(row.tokens, dtype=object),
        "offsets": offsets,
        "vectors": vectors,
    }


def elmo_udf(
    model: str | Path | None = None,
    *,
    options: str | Path | None = None,
    weights: str | Path | None = None,
    layers: str | int = "all",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    precision: str = "fp32",
    device: str = "cpu",
    tokenize: bool = False,
    batch_size: int = 256,
) -> Any:
    """A Spark UDF of two columns (line number, raw line) returning the output's columns as a struct.

    Args:
        model: A model folder, or None for `options`/`weights` or the default model.
        options: bilm-tf's options.json (with `weights`: the published files).
        weights: bilm-tf's weights hdf5.
        layers: "all", "top", "average", "mix" or a layer index.
        batch_tokens: Padded positions per biLM batch.
        precision: "fp32", "int8" (CPU), "bf16" or "fp16".
        device: "cpu", or "cuda" on executors with a GPU.
        tokenize: Split raw lines with spaCy's English rules instead of whitespace.
        batch_size: Lines per call of the predict function. The biLM batches by tokens within it.

    Returns:
        `predict_batch_udf(...)`: call it on the line-number and text columns.
    """
    try:
        from pyspark.ml.functions import predict_batch_udf
    except ImportError as err:
        raise missing_extra(err, "pyspark", "spark", "elmo_udf") from err

    def make() -> Any:  # once per Spark Python worker
        return make_predict_fn(
            model,
            options=options,
            weights=weights,
            layers=layers,
            batch_tokens=batch_tokens,
            precision=precision,
            device=device,
            tokenize=tokenize,
        )

    return predict_batch_udf(make, return_type=spark_schema(), batch_size=batch_size)


def _task_cpus() -> int | None:
    try:
        from pyspark import TaskContext
    except ImportError:
        return None
    context = TaskContext.get()
    return context.cpus() if context is not None else None


def _import_spark_types() -> Any:
    try:
        from pyspark.sql import types
    except ImportError as err:
        raise missing_extra(err, "pyspark", "spark", "elmo_udf") from err
    return types
