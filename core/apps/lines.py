"""Lines of text in, rows of the columnar output out: the one batch path under every engine.

`elmo embed`, the Ray Data class and the Spark function all call `embed_lines`, which runs
`iter_embeddings` and adds each line's tokens and character offsets. `LineEmbedder` loads a
model once and turns batches of lines into Arrow tables (`elmo_core.files.parquet_files`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..files.parquet_files import check_store_dtype, lines_table
from ..files.tokenizers import token_offsets
from ..model.errors import ElmoError
from ..runtime.embedding import DEFAULT_BATCH_TOKENS, EmbedSettings, check_layers, iter_embeddings
from ..runtime.windows import OnWindow

if TYPE_CHECKING:
    from ..model.elmo import Elmo

__all__ = ["EmbeddedLine", "LineEmbedder", "embed_lines"]

PRECISIONS = {"fp32": None, "int8": None, "bf16": torch.bfloat16, "fp16": torch.float16}
"""`--precision` choices: the autocast dtype of each (int8 runs float32 on int8 LSTMs)."""


@dataclass(frozen=True)
class EmbeddedLine:
    """One line's row. `offsets` is None for pre-split tokens.

    Shape:
        vectors: `[layers, tokens, dim]` in the store dtype (layers = 1 unless layers="all").
    """

    index: int
    tokens: list[str]
    offsets: list[tuple[int, int]] | None
    vectors: np.ndarray


def embed_lines(
    model: Elmo,
    texts: Sequence[str | None] | None = None,
    *,
    tokens: Sequence[Sequence[str] | None] | None = None,
    settings: EmbedSettings | None = None,
    tokenize: Callable[[str], list[str]] | None = None,
    store_dtype: str = "float32",
    on_window: OnWindow | None = None,
) -> Iterator[EmbeddedLine]:
    """Yield every line's row, batch by batch (not in input order).

    Give raw `texts` (split by `tokenize`, default `str.split()`), pre-split `tokens` (no
    offsets), or both (offsets of the tokens in each text). A None or blank line has no tokens.

    Raises:
        ValueError: for neither `texts` nor `tokens`, a bad store dtype or setting.
        ElmoError: for tokens that are not in their line, naming the line.
    """
    dtype = check_store_dtype(store_dtype)
    if texts is None and tokens is None:
        raise ValueError("give texts (raw lines), tokens (pre-split lines) or both.")
    if tokens is not None:
        sentences = [[str(t) for t in words] if words is not None else [] for words in tokens]
    else:
        sentences = [_split(text, tokenize) for text in texts or []]
    if texts is not None:
        offsets: list[Any] = [_offsets(text or "", words, k) for k, (text, words) in enumerate(zip(texts, sentences))]
    else:
        offsets = [None] * len(sentences)
    layers = (settings or EmbedSettings()).layers
    for i, vectors in iter_embeddings(model, sentences, settings, on_window=on_window):
        if layers != "all":
            vectors = vectors[None]  # [1, tokens, dim]
        yield EmbeddedLine(i, sentences[i], offsets[i], vectors.astype(dtype, copy=False))


def _split(text: str | None, tokenize: Callable[[str], list[str]] | None) -> list[str]:
    if text is None or not text.strip():
        return []
    return text.split() if tokenize is None else list(tokenize(text))


def _offsets(text: str, words: list[str], index: int) -> list[tuple[int, int]]:
    try:
        return token_offsets(text, words)
    except ValueError as err:
        raise ElmoError(f"line {index} of the batch: {err}") from None


class LineEmbedder:
    """A model loaded once, turning batches of lines into tables. The engines hold one per worker.

    Args:
        model: A model folder, or None for `options`/`weights` or the default model.
        options: bilm-tf's options.json (with `weights`).
        weights: bilm-tf's weights hdf5 (with `options`).
        layers: As `EmbedSettings.layers`.
        store_dtype: "float32" or "float16".
        batch_tokens: Padded positions per biLM batch.
        precision: "fp32", "int8" (CPU), "bf16" or "fp16", as `elmo embed --precision`.
        device: "cpu", "cuda" or "cuda:N".
        tokenize: Split raw lines with spaCy's English rules instead of whitespace.
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
    ) -> None:
        from ..files.model_folder import load_elmo
        from ..files.tokenizers import get_tokenizer
        from ..runtime.quantization import quantize_int8

        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}.")
        check_store_dtype(store_dtype)
        self.settings = EmbedSettings(layers=layers, batch_tokens=batch_tokens, autocast_dtype=PRECISIONS[precision])
        elmo = load_elmo(model, options, weights, map_location=device, dropout=0.0)
        check_layers(layers, elmo.n_outputs, len(elmo.scalar_mixes))
        self.model = quantize_int8(elmo) if precision == "int8" else elmo
        self.store_dtype = store_dtype
        self.tokenize = get_tokenizer() if tokenize else None

    @property
    def dim(self) -> int:
        return self.model.output_dim

    def table(
        self,
        texts: Sequence[str | bytes | None] | None = None,
        *,
        tokens: Sequence[Sequence[str] | None] | None = None,
        lines: Sequence[int | None] | None = None,
    ) -> Any:
        """The rows of a batch, in its order, as a `pyarrow.Table` of the output schema.

        Args:
            texts: Raw lines. Bytes are decoded as UTF-8.
            tokens: Pre-split lines (instead of `texts`).
            lines: Each row's line number (default: None for every row).
        """
        rows = self.rows(texts, tokens=tokens, lines=lines)
        n = len(rows)
        return lines_table(
            list(lines) if lines is not None else [None] * n,
            [r.tokens for r in rows],
            [r.offsets for r in rows],
            [r.vectors for r in rows],
            self.dim,
            self.store_dtype,
        )

    def rows(
        self,
        texts: Sequence[str | bytes | None] | None = None,
        *,
        tokens: Sequence[Sequence[str] | None] | None = None,
        lines: Sequence[int | None] | None = None,
    ) -> list[EmbeddedLine]:
        """The rows of a batch, in its order. Args: as `table`."""
        if texts is not None:
            texts = [_decoded(text, k, lines) for k, text in enumerate(texts)]
        found = embed_lines(
            self.model,
            texts,  # type: ignore[arg-type]
            tokens=tokens,
            settings=self.settings,
            tokenize=self.tokenize,
            store_dtype=self.store_dtype,
        )
        return sorted(found, key=lambda row: row.index)


def _decoded(text: str | bytes | None, index: int, lines: Sequence[int | None] | None) -> str | None:
    if not isinstance(text, bytes):
        return text
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError as err:
        known = lines is not None and lines[index] is not None
        where = f"line {lines[index]}" if known else f"row {index} of the batch"  # type: ignore[index]
        raise ElmoError(
            f"{where} is not UTF-8 ({err.reason} at byte {err.start}); convert the text to UTF-8 "
            "(iconv -f LATIN1 -t UTF-8) and run again."
        ) from None
