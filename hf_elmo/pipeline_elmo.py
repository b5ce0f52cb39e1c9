"""Feature extraction on raw text, in batches, without padding in the results.

transformers' own `pipeline("feature-extraction", model=..., tokenizer=...)` works with
ELMo as it is: raw strings in, one `[1, tokens, 2 * projection_dim]` list per string
out. With `batch_size > 1` it pads every string of a batch to the batch's longest, and
its results keep those padded positions (zero vectors for ELMo). The pipeline here
returns each string's own tokens only, whatever the batch size, and
`feature_extraction_pipeline()` picks the default model when none is named.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import FeatureExtractionPipeline, pipeline

from .elmo_core_bridge import default_model_dir

__all__ = ["ElmoFeatureExtractionPipeline", "feature_extraction_pipeline"]


class ElmoFeatureExtractionPipeline(FeatureExtractionPipeline):
    """`FeatureExtractionPipeline` whose results hold the real tokens only.

    Each result is the ELMo vectors (the model's `last_hidden_state`) of one input,
    `[1, tokens, 2 * projection_dim]` (a nested list, or a tensor with
    `return_tensors=True`), where `tokens` is that input's own token count: padding
    added to batch it with others is removed, so the result does not depend on
    `batch_size` (beyond float rounding).
    """

    def _forward(self, model_inputs: dict[str, Any]) -> dict[str, Any]:
        outputs = self.model(**model_inputs)
        # Keep the mask with the vectors so that postprocess can cut each row's padding.
        return {"last_hidden_state": outputs.last_hidden_state, "attention_mask": model_inputs["attention_mask"]}

    def postprocess(self, model_outputs: dict[str, Any], return_tensors: bool = False) -> Any:
        vectors = model_outputs["last_hidden_state"]  # [1, padded tokens, dim]
        mask = model_outputs["attention_mask"]  # [1, padded tokens]
        num_tokens = int(mask.sum())
        if vectors.shape[1] == mask.shape[1] + 2:  # keep_sentence_boundaries: <S> ... </S>
            num_tokens += 2
        vectors = vectors[:, :num_tokens]
        return vectors if return_tensors else vectors.tolist()


def feature_extraction_pipeline(
    model: Any = None, tokenizer: Any = None, **kwargs: Any
) -> ElmoFeatureExtractionPipeline:
    """An `ElmoFeatureExtractionPipeline` for `model` (default: the package's default model).

    Args:
        model: An `ElmoModel`, or a model folder (path) or Hub id. None = the default
            model folder that ships with elmo-bilm (`elmo_core.model_folder`).
        tokenizer: An `ElmoTokenizer` or a folder holding one. Default: the model's folder.
        **kwargs: Passed to `transformers.pipeline` (`device`, `batch_size`, ...).

    Raises:
        WeightFileError: if no model is named and no default model is installed.
    """
    if model is None:
        model = str(default_model_dir())
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if tokenizer is None and isinstance(model, str):
        tokenizer = model
    return pipeline(
        "feature-extraction", model=model, tokenizer=tokenizer, pipeline_class=ElmoFeatureExtractionPipeline, **kwargs
    )
