"""Feature extraction on raw text, in batches, without padding in the results.

transformers' own `pipeline("feature-extraction", model=..., tokenizer=...)` works with
ELMo as it is: raw strings in, one `[1, tokens, 2 * projection_dim]` list per string
out. With `batch_size > 1` it pads every string of a batch to the batch's longest, and
its results keep those padded positions (zero vectors for ELMo). The pipeline here
returns each string's own tokens only, whatever the batch size, and
`feature_extraction_pipeline()` picks the default model when none is named.

It also batches as the core does: a list of strings is sorted by token count and cut
into batches of at most `batch_tokens` padded positions (and at most `batch_size`
strings, when given), so that short strings are not padded to long ones and no batch
outgrows the budget, however many strings one call gets. Results come back in input
order.
"""

from __future__ import annotations

import os
from typing import Any, cast

import numpy as np
import torch
from transformers import FeatureExtractionPipeline, pipeline

from elmo_core import release_free_memory
from elmo_core.face_api import DEFAULT_BATCH_TOKENS, check_int, resolve_model_source, window_batches

__all__ = ["ElmoFeatureExtractionPipeline", "FeatureList", "feature_extraction_pipeline"]


class FeatureList(list):
    """One result as nested lists, `[1][tokens][2 * projection_dim]`, that keeps its shape.

    Nested lists lose the width of an input with no tokens (an empty string gives
    `[[]]`, which numpy reads as shape `(1, 0)`): this list says its `shape`, and numpy
    reads it with that shape and the model's float32 (`np.asarray(result).shape ==
    (1, 0, 256)` for the default model). Otherwise it is the plain list transformers'
    pipeline returns (equal to it, JSON-serialisable, picklable). For a tensor, call the
    pipeline with `return_tensors=True`; `torch.tensor(result)` reads lists, not shapes.

    Attributes:
        shape: `(1, tokens, 2 * projection_dim)`.
    """

    def __init__(self, vectors: torch.Tensor) -> None:
        super().__init__(vectors.tolist())
        self.shape = tuple(vectors.shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return np.array(list(self), dtype=dtype or np.float32).reshape(self.shape)


class ElmoFeatureExtractionPipeline(FeatureExtractionPipeline):
    """`FeatureExtractionPipeline` whose results hold the real tokens only.

    Each result is the ELMo vectors (the model's `last_hidden_state`) of one input,
    `[1, tokens, 2 * projection_dim]` (a nested list that keeps that shape for numpy even
    for 0 tokens, or a tensor with `return_tensors=True`), where `tokens`
    is that input's own token count: padding added to batch it with others is removed, so
    the result does not depend on `batch_size` (beyond float rounding).

    Attributes:
        batch_tokens: Budget of padded positions per batch for a list of strings
            (default 4096, the core's). Lengths are
            counted with the tokenizer before batching, so each string is tokenised
            twice; the second time is what the model reads.
    """

    batch_tokens: int = DEFAULT_BATCH_TOKENS

    # The three overrides below ignore mypy's [override]: their signatures are those FeatureExtractionPipeline
    # itself overrides with (its stub says `__call__(*args)`, but forwards to Pipeline.__call__(inputs, ...)),
    # not the abstract base's.
    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Feature extraction; a list of strings is batched by length and token budget.

        Args:
            inputs: A string, or a list (or tuple) of strings; other inputs go to
                transformers as they are.
            **kwargs: As `FeatureExtractionPipeline`; `batch_size` (here, or when the
                pipeline was made) caps the strings per batch (default: no cap; the
                token budget decides).

        Returns:
            One result per input string, in input order (see the class docstring): an
            empty list for an empty list.
        """
        if isinstance(inputs, tuple):
            inputs = list(inputs)
        if isinstance(inputs, list) and not inputs:
            return []  # as n texts give n results (transformers' own check reads inputs[0])
        if not (isinstance(inputs, list) and len(inputs) > 1 and all(isinstance(t, str) for t in inputs)):
            return super().__call__(inputs, *args, **kwargs)
        assert self.tokenizer is not None  # a feature-extraction pipeline has one
        lengths = [len(self.tokenizer.tokenize(text)) for text in inputs]
        # batch_size given to this call, else the one given when the pipeline was made.
        max_batch_size = kwargs.pop("batch_size", None) or getattr(self, "_batch_size", None)
        results: list[Any] = [None] * len(inputs)
        for batch in window_batches(self.batch_tokens, max_batch_size)(lengths):  # the core's rule, chunks included
            outputs = super().__call__([inputs[i] for i in batch], *args, batch_size=len(batch), **kwargs)
            for i, output in zip(batch, outputs):
                results[i] = output
        return results

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
        outputs = self.model(**model_inputs)
        result = {"last_hidden_state": outputs.last_hidden_state, "attention_mask": model_inputs["attention_mask"]}
        del outputs  # the other layers: freed before the trim below
        # Every batch has new shapes: hand the freed heap back, or the resident size
        # creeps up over a long stream (elmo_core.runtime.memory).
        release_free_memory()
        # Keep the mask with the vectors so that postprocess can cut each row's padding.
        return result

    def postprocess(self, model_outputs: dict[str, Any], return_tensors: bool = False) -> Any:  # type: ignore[override]
        vectors = model_outputs["last_hidden_state"]  # [1, padded tokens, dim]
        mask = model_outputs["attention_mask"]  # [1, padded tokens]
        num_tokens = int(mask.sum())
        if vectors.shape[1] == mask.shape[1] + 2:  # keep_sentence_boundaries: <S> ... </S>
            num_tokens += 2
        vectors = vectors[:, :num_tokens]
        return vectors if return_tensors else FeatureList(vectors)


def feature_extraction_pipeline(
    model: Any = None, tokenizer: Any = None, *, batch_tokens: int = DEFAULT_BATCH_TOKENS, **kwargs: Any
) -> ElmoFeatureExtractionPipeline:
    """An `ElmoFeatureExtractionPipeline` for `model` (default: the package's default model).

    Args:
        model: An `ElmoModel`, or a model folder (path) or Hub id. None = the default
            model folder that ships with elmo-bilm.
        tokenizer: An `ElmoTokenizer` or a folder holding one. Default: the model's folder.
        batch_tokens: Budget of padded positions per batch (see the class docstring).
        **kwargs: Passed to `transformers.pipeline` (`device`, `batch_size`, ...).

    Raises:
        WeightFileError: if no model is named and no default model is installed.
        ValueError: if `batch_tokens` is not a positive integer.
    """
    batch_tokens = check_int("batch_tokens", batch_tokens, meaning="padded positions per batch")
    if model is None:
        model = str(resolve_model_source().folder)  # the default model (the core decides which)
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if tokenizer is None and isinstance(model, str):
        tokenizer = model
    extractor = pipeline(  # typed by the task alone; `pipeline_class` makes it this class
        "feature-extraction", model=model, tokenizer=tokenizer, pipeline_class=ElmoFeatureExtractionPipeline, **kwargs
    )
    extractor = cast(ElmoFeatureExtractionPipeline, extractor)
    extractor.batch_tokens = batch_tokens
    return extractor
