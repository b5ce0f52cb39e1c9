"""biLM hyperparameters, with the key names of bilm-tf's `options.json`.

Keys are never renamed. Other keys are kept in `extra`, so a file survives a round trip.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .checks import check_int
from .errors import OptionsError

__all__ = ["PUBLISHED_OPTIONS", "BiLMOptions"]

MAX_CHARACTERS_PER_TOKEN = 1024
"""The most character slots a token may have: no weight's shape depends on it, so an
options file cannot be checked against its weights for it (the published models use 50)."""

_ACTIVATIONS = ("relu", "tanh")


@dataclass(frozen=True)
class CharCNNOptions:
    """The context-independent token encoder (docs/bilm_tf.md §3).

    Attributes:
        embedding_dim: Size of each character embedding (`embedding.dim`).
        filters: `(width, count)` per convolution bank, in file order.
        n_highway: Highway layers (0: none).
        n_characters: 262 with the padding id 0. bilm-tf's training files say 261, read as 262.
        max_characters_per_token: Slots per token with the word markers.
        activation: "relu" or "tanh", after max-pooling each bank.
    """

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
        """Total filters F, the char CNN's output width."""
        return sum(count for _, count in self.filters)


@dataclass(frozen=True)
class LSTMOptions:
    """The two LSTM stacks (docs/bilm_tf.md §4, §5).

    Attributes:
        dim: Memory cell size D.
        projection_dim: Size P of each direction's output. ELMo vectors are 2P wide.
        n_layers: LSTM layers per direction.
        cell_clip: Clip the cell to [-cell_clip, cell_clip] each step. 0 or None: no clip.
        proj_clip: Clip the projected output likewise.
        use_skip_connections: Residual around every layer but the first.
    """

    dim: int = 4096
    projection_dim: int = 512
    n_layers: int = 2
    cell_clip: float | None = 3.0
    proj_clip: float | None = 3.0
    use_skip_connections: bool = True


@dataclass(frozen=True)
class BiLMOptions:
    """All hyperparameters of a biLM, as in bilm-tf's `options.json`.

    The defaults are the original model (`elmo_2x4096_512_2048cnn_2xhighway`). Read a
    file with `read_options(path)`. Frozen: derive a variant with `replace`.
    """

    char_cnn: CharCNNOptions = field(default_factory=CharCNNOptions)
    lstm: LSTMOptions = field(default_factory=LSTMOptions)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check every option. Raises `OptionsError` naming the key, the value and a fix."""
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

    # ------------------------------------------------------------------ derived sizes
    @property
    def output_dim(self) -> int:
        """Width of every biLM layer and of the ELMo vectors: `2 * projection_dim`."""
        return 2 * self.lstm.projection_dim

    @property
    def n_outputs(self) -> int:
        """`n_layers + 1`: layer 0, then each LSTM layer."""
        return self.lstm.n_layers + 1

    # ------------------------------------------------------------------ (de)serialisation
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BiLMOptions:
        """Read a parsed `options.json` (or a model folder's `config.json`).

        Raises:
            OptionsError: for a missing key or a value of the wrong type.
        """
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
        """The bilm-tf `options.json` object, with the extra keys kept."""
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
        """Serialise as bilm-tf `options.json`, and write it to `path` when given."""
        text = json.dumps(self.to_dict(include_extra=include_extra), indent=2) + "\n"
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    def replace(self, **changes: Any) -> BiLMOptions:
        """A copy with `char_cnn`/`lstm`/`extra` replaced (see `dataclasses.replace`)."""
        return replace(self, **changes)


def _clip(value: Any) -> float | None:
    # bilm-tf and AllenNLP both treat a clip of 0/None as "no clip".
    if value is None or value == 0:
        return None
    return value


def _published(dim: int, projection_dim: int, n_highway: int) -> BiLMOptions:
    return BiLMOptions(
        char_cnn=CharCNNOptions(n_highway=n_highway),
        lstm=LSTMOptions(dim=dim, projection_dim=projection_dim),
    )


PUBLISHED_OPTIONS: dict[str, BiLMOptions] = {
    # docs/bilm_tf.md §10. Parameter counts 93,600,848 / 93,600,848 / 28,027,728 / 13,593,296.
    "original": _published(4096, 512, 2),
    "original_5.5B": _published(4096, 512, 2),
    "medium": _published(2048, 256, 1),
    "small": _published(1024, 128, 1),
}
"""Options of the four published AllenNLP/bilm-tf models, by short name."""
