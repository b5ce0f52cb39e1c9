# This file was generated from hf_elmo/configuration_elmo.py and the elmo_core
# definitions it uses (elmo_core/checks.py, elmo_core/errors.py,
# elmo_core/text_files.py, elmo_core/options.py, elmo_core/windows.py,
# elmo_core/model_folder.py), so that a saved model folder needs no elmo-bilm. Do not
# edit it: edit those files and run
#     python -m hf_elmo.remote_code.generate
"""ElmoConfig: bilm-tf's options plus the ELMo output settings, as a transformers config.

`config.json` is the model folder format of `elmo_core.model_folder`: bilm-tf's
`options.json` keys verbatim (`lstm`, `char_cnn`), `model_type: "elmo"`, the `Elmo`
settings, and the keys transformers adds itself (`architectures`, `auto_map`,
`transformers_version`, ...), which the core ignores.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import math
import os
import stat
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, IO, TextIO

try:  # transformers 5 spelling
    from transformers import PreTrainedConfig
except ImportError:  # pragma: no cover - transformers 4 spelling
    from transformers import PretrainedConfig as PreTrainedConfig


# ---- elmo_core/checks.py ------------------------------------------------------

def check_int(
    name: str,
    value: object,
    *,
    minimum: int = 1,
    none_ok: bool = False,
    meaning: str = "",
    hint: str = "",
    error: type[Exception] = ValueError,
) -> None:
    """Raise `error` unless `value` is an `int` (not a `bool`) of at least `minimum`.

    Args:
        name: The argument's name as the caller knows it (`"max_tokens"`, `"--piece-tokens"`).
        value: What arrived.
        minimum: The smallest allowed value: 1 reads "a positive integer", 0 "a non-negative
            integer", anything else "an integer >= minimum".
        none_ok: Also accept None (the message then says "or None").
        meaning: What the number counts or what a special value does, in parentheses after
            the expectation, e.g. "0 = no cache".
        hint: A sentence appended to the message, e.g. how to fix it.
        error: The exception class to raise (`ValueError` unless a caller's own error
            class, such as `OptionsError`, is what its users catch).

    Raises:
        error: e.g. `ValueError("max_tokens must be a positive integer; got 0.")`.
    """
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        expected = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")
        if meaning:
            expected += f" ({meaning})"
        if none_ok:
            expected += " or None"
        raise error(f"{name} must be {expected}; got {value!r}." + (f" {hint}" if hint else ""))


# ---- elmo_core/errors.py ------------------------------------------------------

class ElmoError(ValueError):
    """Base class of the errors raised by `elmo_core`."""


class OptionsError(ElmoError):
    """The biLM options are inconsistent, incomplete or of the wrong type."""


# ---- elmo_core/text_files.py --------------------------------------------------

BYTE_ORDER_MARK = "\ufeff"
"""What a leading byte-order mark decodes to; for readers that decode lines themselves."""

STDIN = "-"
"""Standard input, as Unix tools spell it. `pathlib` reads `./-` as `-` too, so here `-`
always means standard input (name a file called `-` by its absolute path)."""

COMPRESSIONS: dict[str, Callable[..., IO[Any]]] = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}
"""File name suffix -> opener: the compressed files every reader decompresses on the fly."""


def is_stream(path: str | Path) -> bool:
    """True for standard input (`-`) and for anything that is not a regular file: a pipe,
    `/dev/stdin` on a pipe, a process substitution (`<(...)`). A stream can be read once,
    from the start, and not resumed."""
    if str(path) == STDIN:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def check_input_file(path: str | Path, what: str = "input file", *, streams: str | None = None) -> Path:
    """`path` as a Path, after checking that it names a readable file.

    Args:
        path: The path a user gave; `-` is standard input.
        what: How the message names it ("INPUT", "CoNLL file", "--vocab", ...).
        streams: None to accept a stream (standard input, a pipe: see `is_stream`), or
            why this reader cannot take one (it is refused with that reason).

    Raises:
        ElmoError: if it does not exist, is a folder, cannot be read, or is a stream
            where `streams` says why not (one line, naming the path and what to give instead).
    """
    path = Path(path)
    if is_stream(path):
        if streams is not None:
            raise ElmoError(f"{what} {path} is a stream (standard input or a pipe), but {streams}; give a file.")
        return path
    if path.is_dir():
        raise ElmoError(f"{what} {path} is a folder; give the path of a file.")
    if not path.exists():
        raise ElmoError(f"{what} {path} does not exist.")
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise ElmoError(f"{what} {path} cannot be read ({err.strerror or err}).") from None
    return path


def open_binary(path: str | Path) -> IO[bytes]:
    """A file's bytes, decompressed when its name ends in a suffix of `COMPRESSIONS`;
    standard input for `-` (closing it leaves standard input open).

    Every reader of users' text goes through this (`open_text` decodes it), so every
    command reads the same files.
    """
    if str(path) == STDIN:
        return _Unclosed(sys.stdin.buffer)
    opener = COMPRESSIONS.get(Path(path).suffix)
    if opener is None:
        return open(path, "rb")  # noqa: SIM115
    return _Decompressed(path, opener(path, "rb"))  # type: ignore[return-value]


DECOMPRESSION_ERRORS = (EOFError, lzma.LZMAError, zlib.error, OSError)
"""What gzip, lzma and bz2 raise for a cut-short or damaged file (gzip.BadGzipFile and bz2's
"Invalid data stream" are OSErrors; a stream that ends early is an EOFError)."""


class _Decompressed:
    """A compressed file's decompressed bytes, where a cut-short or damaged file is one
    ElmoError naming the file and the line (an EOFError would reach click as "Aborted!")."""

    def __init__(self, path: str | Path, raw: IO[bytes]) -> None:
        self.name = str(path)
        self._raw = raw
        self._lines: int | None = 0  # newlines read so far (None after a seek into the middle)

    def _call(self, method: str, *args: Any) -> Any:
        try:
            data = getattr(self._raw, method)(*args)
        except DECOMPRESSION_ERRORS as err:
            where = f"after line {self._lines}: " if self._lines is not None else ""
            raise ElmoError(
                f"{self.name} is a damaged or cut-short {Path(self.name).suffix} file ({where}{err}); copy or "
                "download it again, or test it with its tool (xz -t, gzip -t, bzip2 -t)."
            ) from None
        if isinstance(data, bytes) and self._lines is not None:
            self._lines += data.count(b"\n")
        return data

    def read(self, size: int = -1) -> bytes:
        return self._call("read", size)

    def readline(self, size: int = -1) -> bytes:
        return self._call("readline", size)

    def seek(self, offset: int, whence: int = 0) -> int:
        self._lines = 0 if (offset, whence) == (0, 0) else None
        return self._call("seek", offset, whence)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> _Decompressed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Unclosed:
    """Standard input's binary stream, which `close()` (and `with`) leave open."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._stream)

    def close(self) -> None:
        pass

    def __enter__(self) -> _Unclosed:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def open_text(path: str | Path, mode: str = "rt") -> TextIO:
    """Open a UTF-8 text file (see the module rules) to read, or (`mode="wt"`) to write:
    compressed by its suffix (`COMPRESSIONS`), `-` for standard input.

    Lines end only at `\\n`; `iter_lines` also drops the `\\r` of a CRLF ending. Read
    lines are decoded one by one, so that bytes which are not UTF-8 raise an ElmoError
    naming the file and the line.
    """
    if "r" not in mode:
        opener = COMPRESSIONS.get(Path(path).suffix, open)
        return opener(path, mode, encoding="utf-8", newline="\n")  # type: ignore[return-value]  # never a BOM
    return _TextLines(path, open_binary(path))  # type: ignore[return-value]


class _TextLines:
    """A text file read line by line, like `io.TextIOWrapper(..., newline="\\n")`, that says
    where it is not UTF-8: `ElmoError("{path} is not UTF-8 text (line N: reason).")`."""

    def __init__(self, path: str | Path, raw: IO[bytes]) -> None:
        self.name = str(path)
        self._raw = raw
        self._line = 0  # lines read so far

    def readline(self) -> str:
        data = self._raw.readline()
        if not data:
            return ""
        self._line += 1
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ElmoError(f"{self.name} is not UTF-8 text (line {self._line}: {err.reason}).") from None
        if self._line == 1 and text.startswith(BYTE_ORDER_MARK):
            text = text[len(BYTE_ORDER_MARK) :]
        return text

    def read(self) -> str:
        return "".join(iter(self.readline, ""))

    def __iter__(self) -> Iterator[str]:
        return iter(self.readline, "")

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> _TextLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_text(path: str | Path, what: str = "input file") -> str:
    """The whole text of a file, BOM dropped and CRLF endings read as LF.

    Raises:
        ElmoError: if the file is missing, a folder, unreadable, or not UTF-8 (names
            the line of the first bad byte).
    """
    path = check_input_file(path, what)
    try:
        with open_text(path) as f:
            text = f.read()
    except ElmoError as err:
        raise ElmoError(f"{what} {err}") from None
    return text.replace("\r\n", "\n")


def read_json(path: str | Path, what: str = "JSON file", error: type[ElmoError] = ElmoError) -> Any:
    """The value in a JSON file (UTF-8, read by `read_text`), as `json.loads` gives it.

    The one reader of the project's JSON files (options.json, a model folder's config.json).

    Args:
        path: The file.
        what: How the message names it ("options file", "model config").
        error: The ElmoError subclass to raise (OptionsError, WeightFileError).

    Raises:
        ElmoError: (`error`) one line naming the file: missing, a folder, unreadable,
            not UTF-8 (and the line), or not JSON (the line, the column and what the
            parser expected there).
    """
    try:
        text = read_text(path, what)
    except ElmoError as err:
        raise error(str(err)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{what} {path} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}).") from None


# ---- elmo_core/options.py -----------------------------------------------------

_ACTIVATIONS = ("relu", "tanh")


@dataclass(frozen=True)
class CharCNNOptions:
    """The context-independent token encoder (docs/bilm_tf.md §3).

    Attributes:
        embedding_dim: Size of each character embedding (`embedding.dim`; 16 in every
            published model, 4 in the AllenNLP fixture).
        filters: `(width, count)` per convolution bank, in file order. The published
            models use widths 1..7 with 2048 filters in total.
        n_highway: Number of highway layers (2 for the original model, 1 for small
            and medium). 0 is allowed and means none.
        n_characters: Size of the character vocabulary including the padding id 0:
            262 at inference. bilm-tf's training files say 261 (it had no padding id);
            that value is accepted and read as 262.
        max_characters_per_token: Character slots per token, including the
            begin/end-of-word markers (50; so at most 48 UTF-8 bytes of a word are seen).
        activation: `"relu"` (all published models) or `"tanh"`, applied after
            max-pooling each bank.
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
        """Total number of convolution filters F (the char CNN's output width)."""
        return sum(count for _, count in self.filters)


@dataclass(frozen=True)
class LSTMOptions:
    """The two LSTM stacks (docs/bilm_tf.md §4 and §5).

    Attributes:
        dim: Memory cell size D (4096 original, 2048 medium, 1024 small).
        projection_dim: Size P of each direction's projected output; ELMo vectors have
            `2 * projection_dim` values.
        n_layers: LSTM layers per direction (2 in every published model).
        cell_clip: The memory cell is clipped to [-cell_clip, cell_clip] at every step
            (3). 0 or None disables the clip.
        proj_clip: The projected output is clipped likewise (3). 0 or None disables it.
        use_skip_connections: Residual connection around every layer but the first.
            Required by AllenNLP; bilm-tf also supports models without it.
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

    The defaults are the original model (`elmo_2x4096_512_2048cnn_2xhighway`).
    Construct from a file with `BiLMOptions.from_json(path)`; a constructor never reads
    files. Instances are frozen; use `dataclasses.replace` to derive a variant.
    """

    char_cnn: CharCNNOptions = field(default_factory=CharCNNOptions)
    lstm: LSTMOptions = field(default_factory=LSTMOptions)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check every option; raise `OptionsError` naming the key, the value and a fix."""
        cc, lstm = self.char_cnn, self.lstm
        check_int("char_cnn.embedding.dim", cc.embedding_dim, error=OptionsError)
        check_int("char_cnn.max_characters_per_token", cc.max_characters_per_token, error=OptionsError)
        if cc.max_characters_per_token < 3:
            raise OptionsError(
                "char_cnn.max_characters_per_token must be at least 3 (begin-of-word, one "
                f"byte, end-of-word); got {cc.max_characters_per_token}. The published models use 50."
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
    def num_layers(self) -> int:
        """Number of output layers a model returns: `n_layers + 1` (layer 0 = token layer, then each LSTM layer).

        Everywhere in elmo-bilm, `num_layers` means this count of output layers; the
        number of LSTM layers is the option `n_layers`, and of highway layers `n_highway`.
        """
        return self.lstm.n_layers + 1

    # ------------------------------------------------------------------ (de)serialisation
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BiLMOptions:
        """Read a parsed bilm-tf `options.json` (or a model folder's `config.json`).

        Raises:
            OptionsError: if a required key is missing or has the wrong type.
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

    @classmethod
    def from_json(cls, path: str | Path) -> BiLMOptions:
        """Read a bilm-tf `options.json` file.

        Raises:
            OptionsError: if the file is missing, not UTF-8 or not JSON (names the file, and
                the line and column: `elmo_core.text_files.read_json`), or lacks a required key.
        """
        path = Path(path)
        data = read_json(path, "options file", error=OptionsError)
        try:
            return cls.from_dict(data)
        except OptionsError as err:
            raise OptionsError(f"{path}: {err}") from None

    def to_dict(self, *, include_extra: bool = True) -> dict[str, Any]:
        """The bilm-tf `options.json` object (plus preserved extra keys)."""
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
        """Serialise as bilm-tf `options.json`; also write it to `path` when given."""
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


# ---- elmo_core/windows.py -----------------------------------------------------

DEFAULT_WINDOW_TOKENS = 1024
"""Longest sequence read in one pass. Long enough for any real sentence and for a
600-token paragraph; a 100,000-token document becomes about 130 windows."""


def default_context(window_tokens: int) -> int:
    """Context tokens on each side of a window when none is given: `window_tokens // 8`."""
    return window_tokens // 8


def _check_window(window_tokens: object, context: object) -> int:
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
    """Check the window settings up front; return `window_tokens`, with 0 read as None.

    None, or 0 (as on the command line and in spaCy configs), reads every sequence
    whole, however long.

    Raises:
        ValueError: if `window_tokens` is not a positive integer, 0 or None, or
            `window_context` is negative or at least half of `window_tokens`.
    """
    if window_tokens == 0 and not isinstance(window_tokens, bool):
        return None
    if window_tokens is not None:
        _check_window(window_tokens, window_context)
    return window_tokens


# ---- elmo_core/model_folder.py ------------------------------------------------

ELMO_SETTINGS: dict[str, Any] = {
    "num_output_representations": 1,
    "dropout": 0.5,
    "do_layer_norm": False,
    "layer_norm_scope": "sentence",
    "keep_sentence_boundaries": False,
    "stateful": False,
    "scalar_mix_parameters": None,
}
"""The `Elmo` constructor settings stored in config.json, with their defaults."""


# ---- hf_elmo/configuration_elmo.py --------------------------------------------

__all__ = ["ElmoConfig"]


class ElmoConfig(PreTrainedConfig):
    """Configuration of `ElmoModel` and `ElmoForTokenClassification`.

    Build it from bilm-tf options with `ElmoConfig.from_options(BiLMOptions.from_json(
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
            exactly as the core (`Elmo.embed`, `elmo embed`) and the spaCy component read a
            long sentence (`elmo_core.windows`), so every face gives the same vectors at
            any length and memory stays bounded. Default `DEFAULT_WINDOW_TOKENS` (1024),
            the core's; None or 0 reads every row whole. Rows no longer than this are never
            cut. A stateful model always reads whole (windows would break its carried state).
        window_context: Context tokens on each side of a window's kept tokens (default
            None = `window_tokens // 8`, the core's). Leave unset.
        **kwargs: Any key transformers writes or accepts (`architectures`, `num_labels`,
            `id2label`, ...) and any unknown key, kept as an attribute.

    Raises:
        OptionsError: if `lstm`/`char_cnn` are not valid bilm-tf options.
        ValueError: for a bad `window_tokens` / `window_context`.
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

    @property
    def num_layers(self) -> int:
        """Number of output layers (entries of `hidden_states`): `n_layers + 1`; layer 0 = char CNN."""
        return self.lstm["n_layers"] + 1
