"""Ray Data: a callable class for `Dataset.map_batches` that loads the model once per actor.

    ds = ray.data.read_text("corpus.txt")
    ds = ds.map_batches(ElmoEmbedder, fn_constructor_kwargs={"layers": "top"}, concurrency=2, num_cpus=1)
    ds.write_parquet("vectors/")

Its rows are those of `elmo embed OUTPUT.parquet` (docs/reference/columnar-output.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...files.parquet_files import import_pyarrow
from ...runtime.embedding import DEFAULT_BATCH_TOKENS
from ...runtime.threads import set_thread_policy
from ..lines import LineEmbedder

__all__ = ["ElmoEmbedder"]


class ElmoEmbedder:
    """Maps a batch with a `text` (raw lines) or `tokens` (pre-split lines) column to the output's columns.

    An optional `line` column is kept as the rows' line numbers. Each actor runs its forwards
    with as many threads as the CPUs Ray gave it (`num_cpus`).

    Args:
        model: A model folder, or None for `options`/`weights` or the default model.
        options: bilm-tf's options.json (with `weights`: the published files).
        weights: bilm-tf's weights hdf5.
        layers: "all", "top", "average", "mix" or a layer index.
        store_dtype: "float32" or "float16".
        batch_tokens: Padded positions per biLM batch.
        precision: "fp32", "int8" (CPU), "bf16" or "fp16".
        device: "cpu", or "cuda" with `num_gpus=1` per actor.
        tokenize: Split raw lines with spaCy's English rules instead of whitespace.
        threads: Threads per forward in a Ray worker (default: the actor's `num_cpus`).
            Outside a Ray worker the thread policy is left as it is.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        options: str | Path | None = None,
        weights: str | Path | None = None,
        layers: str | int = "all",
        store_dtype: str = "float32",
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
        precision: str = "fp32",
        device: str = "cpu",
        tokenize: bool = False,
        threads: int | None = None,
    ) -> None:
        assigned = _assigned_cpus()
        self.threads = threads if threads is not None else assigned
        if self.threads is not None and assigned is not None:  # in a Ray worker: its process runs this model alone
            set_thread_policy(self.threads)
        self.embedder = LineEmbedder(
            model,
            options=options,
            weights=weights,
            layers=layers,
            store_dtype=store_dtype,
            batch_tokens=batch_tokens,
            precision=precision,
            device=device,
            tokenize=tokenize,
        )

    def __call__(self, batch: Any) -> Any:
        """The batch's rows as a `pyarrow.Table`, which Ray takes whatever the `batch_format`."""
        columns = _columns(batch)
        lines = _list(columns["line"]) if "line" in columns else None
        if "text" in columns:
            return self.embedder.table(_list(columns["text"]), lines=lines)
        if "tokens" in columns:
            tokens = [_list(t) if t is not None else None for t in _list(columns["tokens"])]
            return self.embedder.table(tokens=tokens, lines=lines)
        raise ValueError(
            f"ElmoEmbedder needs a 'text' column (raw lines, as ray.data.read_text gives them) or a 'tokens' "
            f"column (pre-split lines); the batch has {sorted(columns)}. Rename yours with Dataset.rename_columns."
        )


def _assigned_cpus() -> int | None:
    try:
        import ray
    except ImportError:
        return None
    if not ray.is_initialized() or ray.get_runtime_context().worker.mode != ray.WORKER_MODE:
        return None  # not in a Ray worker (the driver asks for none)
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    return max(1, round(cpus)) if cpus else None


def _columns(batch: Any) -> Mapping[str, Any]:
    pa = import_pyarrow("ElmoEmbedder")
    if isinstance(batch, pa.Table):
        return {name: batch.column(name) for name in batch.column_names}
    if hasattr(batch, "to_dict") and hasattr(batch, "columns"):  # a pandas DataFrame
        return {name: batch[name] for name in batch.columns}
    return batch


def _list(values: Any) -> list[Any]:
    if hasattr(values, "to_pylist"):  # pyarrow
        return values.to_pylist()
    return list(values.tolist() if hasattr(values, "tolist") else values)  # numpy, pandas
