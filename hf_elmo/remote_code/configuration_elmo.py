# Generated from hf_elmo/configuration_elmo.py and the code of the 6 elmo_core modules named in
# its sections, so that a saved model folder needs no elmo-bilm. Do not edit: edit those, then run
#     python -m hf_elmo.remote_code.generate
"""ElmoConfig: bilm-tf's options plus the ELMo output settings, as a transformers config.

`config.json` is the model folder format of `elmo_core.files.model_folder`: bilm-tf's
`options.json` keys verbatim (`lstm`, `char_cnn`), `model_type: "elmo"`, the `Elmo`
settings, and the keys transformers adds itself (`architectures`, `auto_map`,
`transformers_version`, ...), which the core ignores.
"""

from __future__ import annotations

import json
import math
import operator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

try:  # transformers 5 spelling
    from transformers import PreTrainedConfig
except ImportError:  # pragma: no cover - transformers 4 spelling
    from transformers import PretrainedConfig as PreTrainedConfig


# ---- elmo_core/model/characters.py --------------------------------------------

BEGINNING_OF_SENTENCE_CHARACTER = 256
END_OF_SENTENCE_CHARACTER = 257
BEGINNING_OF_WORD_CHARACTER = 258
END_OF_WORD_CHARACTER = 259
PADDING_CHARACTER = 260
CHAR_ID_OFFSET = 1  # every id is shifted by one so that 0 = padded position

BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


def _marker_word(character: int, max_characters_per_token: int) -> tuple[int, ...]:
    ids = [PADDING_CHARACTER] * max_characters_per_token
    ids[0] = BEGINNING_OF_WORD_CHARACTER
    ids[1] = character
    ids[2] = END_OF_WORD_CHARACTER
    return tuple(i + CHAR_ID_OFFSET for i in ids)


def word_to_char_ids(word: str, max_characters_per_token: int = 50) -> tuple[int, ...]:
    if not isinstance(word, str):
        raise TypeError(
            f"tokens must be str; got {type(word).__name__} {word!r}. Pass each sentence as a list of token strings."
        )
    if word == BOS_TOKEN:
        return _marker_word(BEGINNING_OF_SENTENCE_CHARACTER, max_characters_per_token)
    if word == EOS_TOKEN:
        return _marker_word(END_OF_SENTENCE_CHARACTER, max_characters_per_token)
    max_bytes = max_characters_per_token - 2
    data = word[:max_bytes].encode("utf-8", "ignore")[:max_bytes]
    ids = [PADDING_CHARACTER] * max_characters_per_token
    ids[0] = BEGINNING_OF_WORD_CHARACTER
    ids[1 : len(data) + 1] = data
    ids[len(data) + 1] = END_OF_WORD_CHARACTER
    return tuple(i + CHAR_ID_OFFSET for i in ids)


# ---- elmo_core/model/errors.py ------------------------------------------------

class ElmoError(ValueError):
    pass


class OptionsError(ElmoError):
    pass


# ---- elmo_core/model/checks.py ------------------------------------------------

def check_int(
    name: str,
    value: object,
    *,
    minimum: int = 1,
    none_ok: bool = False,
    meaning: str = "",
    hint: str = "",
    error: type[Exception] = ValueError,
) -> int | None:
    if value is None and none_ok:
        return None
    number = _as_int(value)
    if number is None or number < minimum:
        expected = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")
        if meaning:
            expected += f" ({meaning})"
        if none_ok:
            expected += f", or leave {name} out" if name.startswith("--") else " or None"
        raise error(f"{name} must be {expected}; got {value!r}." + (f" {hint}" if hint else ""))
    return number


def _as_int(value: object) -> int | None:
    if isinstance(value, bool) or getattr(value, "ndim", 0) != 0 or getattr(value, "dtype", None) == torch.bool:
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]  # int, numpy integers, 0-d integer tensors
    except TypeError:
        return None


# ---- elmo_core/model/options.py -----------------------------------------------

MAX_CHARACTERS_PER_TOKEN = 1024

_ACTIVATIONS = ("relu", "tanh")


@dataclass(frozen=True)
class CharCNNOptions:
    embedding_dim: int = 16
    filters: tuple[tuple[int, int], ...] = (
        (1, 32),
        (2, 32),
        (3, 64),
        (4, 128),
        (5, 256),
        (6, 512),
        (7, 1024),
    )
    n_highway: int = 2
    n_characters: int = 262
    max_characters_per_token: int = 50
    activation: str = "relu"
    @property
    def n_filters(self) -> int:
        return sum(count for _, count in self.filters)


@dataclass(frozen=True)
class LSTMOptions:
    dim: int = 4096
    projection_dim: int = 512
    n_layers: int = 2
    cell_clip: float | None = 3.0
    proj_clip: float | None = 3.0
    use_skip_connections: bool = True


@dataclass(frozen=True)
class BiLMOptions:
    char_cnn: CharCNNOptions = field(default_factory=CharCNNOptions)
    lstm: LSTMOptions = field(default_factory=LSTMOptions)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    def __post_init__(self) -> None:
        self.validate()
    def validate(self) -> None:
        cc, lstm = self.char_cnn, self.lstm
        check_int("char_cnn.embedding.dim", cc.embedding_dim, error=OptionsError)
        check_int("char_cnn.max_characters_per_token", cc.max_characters_per_token, error=OptionsError)
        if not 3 <= cc.max_characters_per_token <= MAX_CHARACTERS_PER_TOKEN:
            raise OptionsError(
                f"char_cnn.max_characters_per_token must be 3 to {MAX_CHARACTERS_PER_TOKEN} (begin-of-word, "
                f"bytes, end-of-word); got {cc.max_characters_per_token}. The published models use 50."
            )
        if cc.n_characters != 262:
            raise OptionsError(
                f"char_cnn.n_characters must be 262 (256 bytes, 5 markers, padding id 0); got "
                f"{cc.n_characters!r}. bilm-tf training files say 261; from_dict() reads that as 262."
            )
        check_int("char_cnn.n_highway", cc.n_highway, minimum=0, error=OptionsError)
        if cc.activation not in _ACTIVATIONS:
            raise OptionsError(f"char_cnn.activation must be one of {_ACTIVATIONS}; got {cc.activation!r}.")
        if not cc.filters:
            raise OptionsError("char_cnn.filters must list at least one [width, count] bank; got [].")
        for k, bank in enumerate(cc.filters):
            if len(bank) != 2:
                raise OptionsError(f"char_cnn.filters[{k}] must be [width, count]; got {list(bank)!r}.")
            width, count = bank
            check_int(f"char_cnn.filters[{k}] width", width, error=OptionsError)
            check_int(f"char_cnn.filters[{k}] count", count, error=OptionsError)
            if width > cc.max_characters_per_token:
                raise OptionsError(
                    f"char_cnn.filters[{k}] is {width} characters wide, wider than "
                    f"max_characters_per_token={cc.max_characters_per_token}."
                )
        check_int("lstm.dim", lstm.dim, error=OptionsError)
        check_int("lstm.projection_dim", lstm.projection_dim, error=OptionsError)
        check_int("lstm.n_layers", lstm.n_layers, error=OptionsError)
        for name, value in (("lstm.cell_clip", lstm.cell_clip), ("lstm.proj_clip", lstm.proj_clip)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or not math.isfinite(value)
            ):
                raise OptionsError(f"{name} must be a finite number >= 0 or null; got {value!r}.")
        if not isinstance(lstm.use_skip_connections, bool):
            raise OptionsError(f"lstm.use_skip_connections must be true or false; got {lstm.use_skip_connections!r}.")
    @property
    def output_dim(self) -> int:
        return 2 * self.lstm.projection_dim
    @property
    def n_outputs(self) -> int:
        return self.lstm.n_layers + 1
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BiLMOptions:
        if not isinstance(data, dict):
            raise OptionsError(f"options must be a JSON object; got {type(data).__name__}.")
        for section in ("lstm", "char_cnn"):
            if not isinstance(data.get(section), dict):
                raise OptionsError(
                    f"options must have a '{section}' object, as bilm-tf's options.json does; "
                    f"found keys {sorted(data)}."
                )
        cc, lstm = dict(data["char_cnn"]), dict(data["lstm"])
        try:
            embedding = cc.pop("embedding")
            n_characters = cc.pop("n_characters")
            char_cnn = CharCNNOptions(
                embedding_dim=embedding["dim"],
                filters=tuple(tuple(bank) for bank in cc.pop("filters")),
                n_highway=cc.pop("n_highway"),
                n_characters=262 if n_characters == 261 else n_characters,
                max_characters_per_token=cc.pop("max_characters_per_token"),
                activation=cc.pop("activation"),
            )
            lstm_options = LSTMOptions(
                dim=lstm.pop("dim"),
                projection_dim=lstm.pop("projection_dim"),
                n_layers=lstm.pop("n_layers"),
                cell_clip=_clip(lstm.pop("cell_clip", None)),
                proj_clip=_clip(lstm.pop("proj_clip", None)),
                use_skip_connections=lstm.pop("use_skip_connections", False),
            )
        except KeyError as err:
            raise OptionsError(
                f"options are missing the key {err.args[0]!r}; bilm-tf's options.json has "
                "lstm.{dim, projection_dim, n_layers, cell_clip, proj_clip, use_skip_connections} and "
                "char_cnn.{embedding.dim, filters, n_highway, n_characters, max_characters_per_token, activation}."
            ) from None
        except TypeError as err:
            raise OptionsError(f"options have a value of the wrong type: {err}") from None
        extra = {k: v for k, v in data.items() if k not in ("lstm", "char_cnn")}
        if cc:
            extra["char_cnn"] = cc
        if lstm:
            extra["lstm"] = lstm
        return cls(char_cnn=char_cnn, lstm=lstm_options, extra=extra)
    def to_dict(self, *, include_extra: bool = True) -> dict[str, Any]:
        cc, lstm = self.char_cnn, self.lstm
        out: dict[str, Any] = {
            "lstm": {
                "use_skip_connections": lstm.use_skip_connections,
                "projection_dim": lstm.projection_dim,
                "cell_clip": lstm.cell_clip,
                "proj_clip": lstm.proj_clip,
                "dim": lstm.dim,
                "n_layers": lstm.n_layers,
            },
            "char_cnn": {
                "activation": cc.activation,
                "filters": [list(bank) for bank in cc.filters],
                "n_highway": cc.n_highway,
                "embedding": {"dim": cc.embedding_dim},
                "n_characters": cc.n_characters,
                "max_characters_per_token": cc.max_characters_per_token,
            },
        }
        if include_extra:
            for key, value in self.extra.items():
                if key in out:
                    out[key] = {**value, **out[key]}
                else:
                    out[key] = value
        return out
    def to_json(self, path: str | Path | None = None, *, include_extra: bool = True) -> str:
        text = json.dumps(self.to_dict(include_extra=include_extra), indent=2) + "\n"
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text
    def replace(self, **changes: Any) -> BiLMOptions:
        return replace(self, **changes)


def _clip(value: Any) -> float | None:
    if value is None or value == 0:
        return None
    return value


# ---- elmo_core/files/model_folder.py ------------------------------------------

ELMO_SETTINGS: dict[str, Any] = {
    "num_output_representations": 1,
    "dropout": 0.5,
    "do_layer_norm": False,
    "keep_sentence_boundaries": False,
    "stateful": False,
    "scalar_mix_parameters": None,
    "layer_norm_scope": "sentence",
}


# ---- elmo_core/runtime/windows.py ---------------------------------------------

DEFAULT_WINDOW_TOKENS = 1024


def default_context(window_tokens: int) -> int:
    return window_tokens // 8


def _check_window(window_tokens: int, context: int | None) -> int:
    check_int(
        "window_tokens",
        window_tokens,
        meaning="None reads every sequence whole",
        hint=f"{DEFAULT_WINDOW_TOKENS} is a good value.",
    )
    if context is None:
        return default_context(window_tokens)
    check_int("window_context", context, minimum=0)
    if 2 * context >= window_tokens:
        raise ValueError(
            f"window_context ({context}) must be less than half of window_tokens ({window_tokens}): "
            "each window keeps window_tokens - 2 * window_context tokens. Lower the context or "
            "raise window_tokens."
        )
    return context


def check_window_settings(window_tokens: int | None, window_context: int | None) -> int | None:
    if window_tokens == 0 and not isinstance(window_tokens, bool):
        return None
    if window_tokens is None:
        return None
    _check_window(window_tokens, window_context)
    return check_int("window_tokens", window_tokens)  # checked: the int it holds (a numpy integer's)


# ---- hf_elmo/configuration_elmo.py --------------------------------------------

__all__ = ["ElmoConfig"]

CLASSIFIER_POOLINGS = ("mean", "max", "first")
"""The ways `ElmoForSequenceClassification` pools a text's token vectors."""


class ElmoConfig(PreTrainedConfig):
    """Configuration of `ElmoModel` and its task models.

    Build it from bilm-tf options with `ElmoConfig.from_options(read_options(
    "options.json"))`; `to_options()` gives them back. These two are the only bridge
    between the config and `elmo_core.BiLMOptions`.

    Args:
        lstm: bilm-tf's `lstm` options (`dim`, `projection_dim`, `n_layers`,
            `cell_clip`, `proj_clip`, `use_skip_connections`). Default: the original
            model (4096 / 512 / 2 layers).
        char_cnn: bilm-tf's `char_cnn` options (`embedding.dim`, `filters`,
            `n_highway`, `n_characters`, `max_characters_per_token`, `activation`).
            Default: the published models' char CNN.
        num_output_representations: Number of independent scalar mixes over one biLM
            run. `last_hidden_state` is the first; with more than one, the model also
            returns all of them as `representations`. 1 for most tasks.
        dropout: Dropout on each scalar mix while training (AllenNLP's 0.5; 0 disables
            it). Never applied in `eval()` mode, which `from_pretrained` sets.
        do_layer_norm: Normalise each layer before mixing (off, as the authors recommend).
        layer_norm_scope: Whose tokens share the layer-norm statistics: "sentence"
            (default; a sentence's vectors do not depend on its batch mates) or "batch"
            (bilm-tf's whole-batch statistics, only to reproduce the original).
        keep_sentence_boundaries: Also return the `<S>`/`</S>` positions (tokens + 2).
        stateful: Carry LSTM states from one call to the next, as the original did. Off
            by default: a sentence's vectors then depend on nothing but the sentence.
        scalar_mix_parameters: Fixed mix weights w, one per layer (`n_layers + 1`). When
            given, the mixes are not trainable.
        window_tokens: A row longer than this many tokens is read in overlapping windows,
            exactly as the core (`embed_sentences`, `elmo embed`) and the spaCy component read a
            long sentence (`elmo_core.runtime.windows`), so every face gives the same vectors at
            any length and memory stays bounded. Default 1024, the core's. None or 0
            reads every row whole. Rows no longer than this are never
            cut. A stateful model always reads whole (windows would break its carried state).
        window_context: Context tokens on each side of a window's kept tokens (default
            None = `window_tokens // 8`, the core's). Leave unset.
        classifier_pooling: How `ElmoForSequenceClassification` pools a text's token
            vectors into one: "mean" over the real tokens (default), "max" (per
            feature), or "first" (the first token's vector).
        pad_token_id: The tokenizer's padding id (0, `ElmoTokenizer`'s), for generic code
            such as `Trainer`.
        **kwargs: Any key transformers writes or accepts (`architectures`, `num_labels`,
            `id2label`, ...) and any unknown key, kept as an attribute.

    Raises:
        OptionsError: if `lstm`/`char_cnn` are not valid bilm-tf options.
        ValueError: for a bad `window_tokens` / `window_context` / `classifier_pooling`.
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
        # Stored as plain dicts with bilm-tf's keys (validated, 261 read as 262).
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
            ValueError: if the config.json found has a `model_type` other than "elmo".
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
        """A config for `options`; `kwargs` are the Elmo settings and transformers keys."""
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
        """The biLM's LSTM layers (`lstm.n_layers`); `hidden_states` has one more (layer 0)."""
        return self.lstm["n_layers"]
