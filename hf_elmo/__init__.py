"""hf_elmo: ELMo as a Hugging Face transformers model.

Importing this package registers the classes with the Auto classes (`AutoConfig` for
`model_type: "elmo"`, `AutoModel`, `AutoModelForTokenClassification`, `AutoTokenizer`)
and for `save_pretrained`'s code copying, so a saved folder also loads with
`trust_remote_code=True` where hf_elmo was never imported, or is not installed at all
(see `elmo_core_bridge`).

    import hf_elmo
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained("path/to/model")          # a model folder
    tokenizer = AutoTokenizer.from_pretrained("path/to/model")
    batch = tokenizer(["The river bank.", "Hello!"], padding=True, return_tensors="pt")
    vectors = model(**batch).last_hidden_state                  # [2, 4, 1024]

Original bilm-tf files convert with `elmo convert OPTIONS WEIGHTS OUT_DIR` (see
`convert_bilm_tf_to_hf`).
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification, AutoTokenizer

from .configuration_elmo import ElmoConfig
from .modeling_elmo import ElmoForTokenClassification, ElmoModel, ElmoModelOutput, ElmoPreTrainedModel
from .pipeline_elmo import ElmoFeatureExtractionPipeline, feature_extraction_pipeline
from .tokenization_elmo import ElmoBatchEncoding, ElmoTokenizer

__all__ = [
    "ElmoBatchEncoding",
    "ElmoConfig",
    "ElmoFeatureExtractionPipeline",
    "ElmoForTokenClassification",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoTokenizer",
    "feature_extraction_pipeline",
]

AutoConfig.register(ElmoConfig.model_type, ElmoConfig, exist_ok=True)
AutoModel.register(ElmoConfig, ElmoModel, exist_ok=True)
AutoModelForTokenClassification.register(ElmoConfig, ElmoForTokenClassification, exist_ok=True)
AutoTokenizer.register(ElmoConfig, tokenizer_class=ElmoTokenizer, exist_ok=True)

# save_pretrained then writes `auto_map` and copies the code files (peer report R25).
ElmoConfig.register_for_auto_class()
ElmoModel.register_for_auto_class("AutoModel")
ElmoForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
ElmoTokenizer.register_for_auto_class("AutoTokenizer")
