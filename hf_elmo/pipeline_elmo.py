"""The "elmo-feature-extraction" pipeline: each string's own token vectors, batched by a token budget.

`import hf_elmo` registers it, so `transformers.pipeline("elmo-feature-extraction", model=...)`
builds it. transformers' own "feature-extraction" keeps the padding of each batch in its results.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers import AutoModel, FeatureExtractionPipeline
from transformers.pipelines import PIPELINE_REGISTRY

from elmo_core import WeightFileError, release_free_memory
from elmo_core.face_api import DEFAULT_BATCH_TOKENS, check_int, resolve_model_source, window_batches

__all__ = ["TASK", "ElmoFeatureExtractionPipeline", "FeatureList", "register_pipeline"]

TASK = "elmo-feature-extraction"


class FeatureList(list):
    """One result as nested lists, `[1][tokens][2 * projection_dim]`, that keeps its shape.

    An empty string gives `[[]]`, which numpy alone reads as `(1, 0)`. This list tells numpy
    its `shape` and float32. Otherwise it is the plain list transformers returns.

    Attributes:
        shape: `(1, tokens, 2 * projection_dim)`.
    """

    def __init__(self, vectors: torch.Tensor) -> None:
        super().__init__(vectors.tolist())
        self.shape = tuple(vectors.shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.array(list(self), dtype=dtype or np.float32).reshape(self.shape)


class ElmoFeatureExtractionPipeline(FeatureExtractionPipeline):
    """`FeatureExtractionPipeline` whose results hold each input's own tokens only.

    Build it with `transformers.pipeline("elmo-feature-extraction", model=...)`. A list of
    strings is sorted by length and cut into batches of at most `batch_tokens` padded
    positions, as `embed_sentences` does. Results come back in input order.

    Args:
        batch_tokens: Padded positions per batch (default 4096). Raise it on a GPU.
        **kwargs: As `FeatureExtractionPipeline` (`batch_size` caps the strings per batch).

    Raises:
        ValueError: if `batch_tokens` is not a positive integer.
    """

    def __init__(self, *args: Any, batch_tokens: int = DEFAULT_BATCH_TOKENS, **kwargs: Any) -> None:
        self.batch_tokens = check_int("batch_tokens", batch_tokens, meaning="padded positions per batch")
        super().__init__(*args, **kwargs)

    # mypy's [override]: these are the signatures FeatureExtractionPipeline itself overrides with.
    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """The ELMo vectors of each input.

        Args:
            inputs: A string, or a list (or tuple) of strings.
            **kwargs: As `FeatureExtractionPipeline`: `return_tensors=True` gives tensors.

        Returns:
            One `[1, tokens, 2 * projection_dim]` result per string (nested lists that know
            their numpy shape, or a tensor), in input order.
        """
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        if isinstance(inputs, list) and not inputs:
            return []  # transformers' own check reads inputs[0]
        if not (isinstance(inputs, list) and len(inputs) > 1 and all(isinstance(t, str) for t in inputs)):
            return super().__call__(inputs, *args, **kwargs)
        assert self.tokenizer is not None  # a feature-extraction pipeline has one
        lengths = [len(self.tokenizer.tokenize(text)) for text in inputs]
        max_batch_size = kwargs.pop("batch_size", None) or getattr(self, "_batch_size", None)
        results: list[Any] = [None] * len(inputs)
        for batch in window_batches(self.batch_tokens, max_batch_size)(lengths):  # the core's batching rule
            outputs = super().__call__([inputs[i] for i in batch], *args, batch_size=len(batch), **kwargs)
            for i, output in zip(batch, outputs):
                results[i] = output
        return results

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        outputs = self.model(**model_inputs)
        result = {"last_hidden_state": outputs.last_hidden_state, "attention_mask": model_inputs["attention_mask"]}
        del outputs
        release_free_memory()  # each batch has new shapes: hand the freed heap back
        return result

    def postprocess(self, model_outputs: dict[str, Any], return_tensors: bool = False) -> Any:  # type: ignore[override]
        vectors = model_outputs["last_hidden_state"]  # [1, padded tokens, dim]
        num_tokens = int(model_outputs["attention_mask"].sum())
        if vectors.shape[1] == model_outputs["attention_mask"].shape[1] + 2:  # keep_sentence_boundaries
            num_tokens += 2
        vectors = vectors[:, :num_tokens]
        return vectors if return_tensors else FeatureList(vectors)


def register_pipeline() -> None:
    """Register the "elmo-feature-extraction" task, whose default model is the one elmo-bilm ships."""
    try:
        default: dict[str, Any] | None = {"model": (str(resolve_model_source().folder), None)}
    except WeightFileError:
        default = None
    PIPELINE_REGISTRY.register_pipeline(
        TASK, pipeline_class=ElmoFeatureExtractionPipeline, pt_model=AutoModel, default=default, type="text"
    )
