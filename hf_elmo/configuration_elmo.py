"""ElmoConfig: bilm-tf's options plus the ELMo output settings, as a transformers config.

`config.json` keeps bilm-tf's `options.json` keys (`lstm`, `char_cnn`) verbatim, so elmo_core
reads the same folder.
"""

from __future__ import annotations

import os
from typing import Any

try:  # transformers 5 spelling
    from transformers import PreTrainedConfig
except ImportError:  # pragma: no cover - transformers 4 spelling
    from transformers import PretrainedConfig as PreTrainedConfig

from elmo_core import BiLMOptions
from elmo_core.face_api import DEFAULT_WINDOW_TOKENS, ELMO_SETTINGS, check_window_settings
from hf_elmo.remote_code import (  # absolute: a saved folder reads these from its reference files
    ELMO_BILM_VERSION,
    note_which_code_runs,
    save_atomically,
)

__all__ = ["ElmoConfig"]

CLASSIFIER_POOLINGS = ("mean", "max", "first")
"""The ways `ElmoForSequenceClassification` pools a text's token vectors."""


class ElmoConfig(PreTrainedConfig):
    """Configuration of `ElmoModel` and its task models.

    `ElmoConfig.from_options(read_options("options.json"))` builds it from bilm-tf options.
    `to_options()` gives them back.

    Args:
        lstm: bilm-tf's `lstm` options. Default: the original model (4096 / 512 / 2 layers).
        char_cnn: bilm-tf's `char_cnn` options. Default: the published models' char CNN.
        num_output_representations: Independent scalar mixes over one biLM run. The first is
            `last_hidden_state`, all are `representations`. 1 for most tasks.
        dropout: Dropout on each scalar mix while training (AllenNLP's 0.5, 0 disables it).
        do_layer_norm: Normalise each layer before mixing (off, as the authors recommend).
        layer_norm_scope: Who shares the layer-norm statistics: "sentence" (default) or
            "batch" (bilm-tf's, only to reproduce the original).
        keep_sentence_boundaries: Also return the `<S>`/`</S>` positions (tokens + 2).
        stateful: Carry LSTM states from one call to the next, as the original did.
        scalar_mix_parameters: Fixed mix weights, one per layer (`n_layers + 1`). Then the
            mixes do not train.
        window_tokens: A longer row is read in overlapping windows, as every face reads it.
            Default 1024. None or 0 reads every row whole. A stateful model always reads whole.
        window_context: Context tokens each side of a window (default `window_tokens // 8`).
        classifier_pooling: How `ElmoForSequenceClassification` pools a text: "mean" over its
            tokens (default), "max" per feature, or "first" token.
        pad_token_id: The tokenizer's padding id (0), for generic code such as `Trainer`.
        **kwargs: Any key transformers writes or accepts (`num_labels`, `id2label`, ...).

    Raises:
        OptionsError: if `lstm`/`char_cnn` are not valid bilm-tf options.
        ValueError: for a bad `window_tokens`, `window_context` or `classifier_pooling`.
    """

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
        """As transformers', but a config of another `model_type` is an error, not a warning.

        Raises:
            ValueError: if the config.json's `model_type` is not "elmo".
        """
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
        """A config for `options`. `kwargs` are the Elmo settings and transformers keys."""
        data = options.to_dict()
        return cls(lstm=data["lstm"], char_cnn=data["char_cnn"], **kwargs)

    def to_options(self) -> BiLMOptions:
        """The biLM options (`elmo_core.BiLMOptions`) this config describes."""
        return BiLMOptions.from_dict({"lstm": self.lstm, "char_cnn": self.char_cnn})

    def elmo_settings(self) -> dict[str, Any]:
        """The `elmo_core.Elmo` constructor settings stored in this config."""
        return {key: getattr(self, key) for key in ELMO_SETTINGS}

    @property
    def output_dim(self) -> int:
        """Width of every layer and of the ELMo vectors: `2 * projection_dim`."""
        return 2 * self.lstm["projection_dim"]

    @property
    def hidden_size(self) -> int:
        """The width generic transformers code reads: `output_dim` (`2 * projection_dim`)."""
        return self.output_dim

    @property
    def num_hidden_layers(self) -> int:
        """The biLM's LSTM layers (`lstm.n_layers`). `hidden_states` has one more, layer 0."""
        return self.lstm["n_layers"]

    def save_pretrained(self, save_directory: str | os.PathLike, push_to_hub: bool = False, **kwargs: Any) -> None:
        """As transformers', with the code files a folder needs without elmo-bilm (`hf_elmo.remote_code`).

        config.json records the `elmo_bilm_version` that saved it.
        """
        self.elmo_bilm_version = ELMO_BILM_VERSION  # which code wrote the folder (see note_which_code_runs)
        code = ("configuration_elmo.py",) if self._auto_class is not None else ()
        save_atomically(super().save_pretrained, save_directory, *code)(
            save_directory, push_to_hub=push_to_hub, **kwargs
        )

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs: Any) -> Any:
        """As transformers', and a folder saved by other code is named once (`note_which_code_runs`)."""
        loaded = super().from_dict(config_dict, **kwargs)
        note_which_code_runs(kwargs.get("name_or_path"))
        return loaded
