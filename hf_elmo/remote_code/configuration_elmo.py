# Generated from hf_elmo/configuration_elmo.py by `python -m hf_elmo.remote_code.generate`. Do not edit: edit that file.
"""ElmoConfig: bilm-tf's options plus the ELMo output settings, as a transformers config."""

from __future__ import annotations

import os
from typing import Any

try:  # transformers 5 spelling
    from transformers import PreTrainedConfig
except ImportError:  # pragma: no cover - transformers 4 spelling
    from transformers import PretrainedConfig as PreTrainedConfig

from .elmo_reference import BiLMOptions, ELMO_BILM_VERSION, ELMO_SETTINGS
from .elmo_reference_runtime import check_window_settings, DEFAULT_WINDOW_TOKENS, note_which_code_runs, save_atomically

__all__ = ["ElmoConfig"]

CLASSIFIER_POOLINGS = ("mean", "max", "first")


class ElmoConfig(PreTrainedConfig):
    model_type = "elmo"

    def __init__(
        self,
        lstm: dict[str, Any] | None = None,
        char_cnn: dict[str, Any] | None = None,
        num_output_representations: int = ELMO_SETTINGS["num_output_representations"],
        dropout: float = ELMO_SETTINGS["dropout"],
        do_layer_norm: bool = ELMO_SETTINGS["do_layer_norm"],
        layer_norm_scope: str = ELMO_SETTINGS["layer_norm_scope"],
        keep_sentence_boundaries: bool = ELMO_SETTINGS["keep_sentence_boundaries"],
        stateful: bool = ELMO_SETTINGS["stateful"],
        scalar_mix_parameters: list[float] | None = ELMO_SETTINGS["scalar_mix_parameters"],
        window_tokens: int | None = DEFAULT_WINDOW_TOKENS,
        window_context: int | None = None,
        classifier_pooling: str = "mean",
        pad_token_id: int | None = 0,
        **kwargs: Any,
    ) -> None:
        defaults = BiLMOptions().to_dict()
        options = BiLMOptions.from_dict(
            {
                "lstm": defaults["lstm"] if lstm is None else lstm,
                "char_cnn": defaults["char_cnn"] if char_cnn is None else char_cnn,
            }
        )
        # Plain dicts with bilm-tf's keys, validated (261 characters read as 262).
        self.lstm = options.to_dict()["lstm"]
        self.char_cnn = options.to_dict()["char_cnn"]
        self.num_output_representations = num_output_representations
        self.dropout = dropout
        self.do_layer_norm = do_layer_norm
        self.layer_norm_scope = layer_norm_scope
        self.keep_sentence_boundaries = keep_sentence_boundaries
        self.stateful = stateful
        self.scalar_mix_parameters = None if scalar_mix_parameters is None else list(scalar_mix_parameters)
        check_window_settings(window_tokens, window_context)  # 0 = None: read every row whole
        self.window_tokens = window_tokens
        self.window_context = window_context
        if classifier_pooling not in CLASSIFIER_POOLINGS:
            raise ValueError(f"classifier_pooling must be one of {CLASSIFIER_POOLINGS}; got {classifier_pooling!r}.")
        self.classifier_pooling = classifier_pooling
        self.pad_token_id = pad_token_id
        super().__init__(**kwargs)

    @classmethod
    def get_config_dict(
        cls, pretrained_model_name_or_path: Any, **kwargs: Any
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        found = config_dict.get("model_type", cls.model_type)
        if found != cls.model_type:
            raise ValueError(
                f"the config.json of {pretrained_model_name_or_path} has model_type {found!r}; ElmoConfig "
                f"reads model_type {cls.model_type!r} only. This folder holds another kind of model: load it "
                "with AutoModel, or point to an ELMo model folder."
            )
        return config_dict, kwargs

    @classmethod
    def from_options(cls, options: BiLMOptions, **kwargs: Any) -> ElmoConfig:
        data = options.to_dict()
        return cls(lstm=data["lstm"], char_cnn=data["char_cnn"], **kwargs)

    def to_options(self) -> BiLMOptions:
        return BiLMOptions.from_dict({"lstm": self.lstm, "char_cnn": self.char_cnn})

    def elmo_settings(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in ELMO_SETTINGS}

    @property
    def output_dim(self) -> int:
        return 2 * self.lstm["projection_dim"]

    @property
    def hidden_size(self) -> int:
        return self.output_dim

    @property
    def num_hidden_layers(self) -> int:
        return self.lstm["n_layers"]

    def save_pretrained(self, save_directory: str | os.PathLike, push_to_hub: bool = False, **kwargs: Any) -> None:
        self.elmo_bilm_version = ELMO_BILM_VERSION  # which code wrote the folder (see note_which_code_runs)
        code = ("configuration_elmo.py",) if self._auto_class is not None else ()
        save_atomically(super().save_pretrained, save_directory, *code)(
            save_directory, push_to_hub=push_to_hub, **kwargs
        )

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> Any:
        loaded = super().from_dict(config_dict, **kwargs)
        note_which_code_runs(kwargs.get("name_or_path"))
        return loaded
