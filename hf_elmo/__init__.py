"""hf_elmo: ELMo as a Hugging Face transformers model.

`import hf_elmo` registers the classes with the Auto classes and the "elmo-feature-extraction"
pipeline. A saved folder carries its own code, so it also loads with `trust_remote_code=True`
where elmo-bilm is not installed (`hf_elmo.remote_code`).

    import hf_elmo
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained("path/to/model")          # a model folder
    tokenizer = AutoTokenizer.from_pretrained("path/to/model")
    batch = tokenizer(["The river bank.", "Hello!"], padding=True, return_tensors="pt")
    vectors = model(**batch).last_hidden_state                  # [2, 4, 1024]

`elmo convert OPTIONS WEIGHTS OUT_DIR` converts bilm-tf's files (`convert_bilm_tf_to_hf`).
"""

from __future__ import annotations

from elmo_core.face_api import missing_extra

try:
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )
except ImportError as err:  # not installed: say which extra installs it
    raise missing_extra(err, "transformers", "hf", "hf_elmo") from err

from .configuration_elmo import ElmoConfig
from .encoding_elmo import ElmoBatchEncoding
from .modeling_elmo import (
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoModelOutput,
    ElmoPreTrainedModel,
)
from .modeling_elmo_lm import ElmoLMHeadModel
from .pipeline_elmo import ElmoFeatureExtractionPipeline, register_pipeline
from .tokenization_elmo import ElmoTokenizer

__all__ = [
    "ElmoBatchEncoding",
    "ElmoConfig",
    "ElmoFeatureExtractionPipeline",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoLMHeadModel",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoTokenizer",
]

AutoConfig.register(ElmoConfig.model_type, ElmoConfig, exist_ok=True)
AutoModel.register(ElmoConfig, ElmoModel, exist_ok=True)
AutoModelForTokenClassification.register(ElmoConfig, ElmoForTokenClassification, exist_ok=True)
AutoModelForSequenceClassification.register(ElmoConfig, ElmoForSequenceClassification, exist_ok=True)
AutoTokenizer.register(ElmoConfig, tokenizer_class=ElmoTokenizer, exist_ok=True)

# save_pretrained then writes `auto_map` and the generated code files (hf_elmo.remote_code).
ElmoConfig.register_for_auto_class()
ElmoModel.register_for_auto_class("AutoModel")
ElmoForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
ElmoForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
ElmoTokenizer.register_for_auto_class("AutoTokenizer")
register_pipeline()  # transformers.pipeline("elmo-feature-extraction", model=...)
