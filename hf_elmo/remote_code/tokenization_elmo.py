# This file was generated from hf_elmo/tokenization_elmo.py and the elmo_core
# definitions it uses (elmo_core/characters.py, elmo_core/checks.py,
# elmo_core/errors.py, elmo_core/text_files.py, elmo_core/options.py,
# elmo_core/model_folder.py, elmo_core/plugins.py, elmo_core/tokenizers.py), so that a
# saved model folder needs no elmo-bilm. Do not edit it: edit those files and run
#     python -m hf_elmo.remote_code.generate
"""ElmoTokenizer: text or token lists to ELMo's character ids. No vocabulary file.

ELMo reads characters, not a word vocabulary: each token becomes 50 ids (the UTF-8
bytes + 1 between begin/end-of-word markers; see `elmo_core.characters`), so there is
nothing to save but the character settings, which go into `tokenizer_config.json`.

    "The river bank."  --spaCy English rules-->  ["The", "river", "bank", "."]
                       --characters-->           char_ids  [1, 4, 50]   (what the biLM reads)
                       --one id per token-->     input_ids [1, 4]       (pad 0, word 1, added 2..)
                                                 attention_mask [1, 4], offset_mapping [1, 4, 2]

`input_ids` hold one id per token, as transformers' generic code (pipelines, collators,
Trainer) expects: the pad token (0) for padding, the unknown token (1) for every word,
because ELMo has no word vocabulary and builds every word from its characters, and their
own ids (2, 3, ...) for tokens added with `add_tokens`, which are never split. The model
reads `char_ids`; `ElmoModel` also accepts the char ids themselves as `input_ids`.

Raw text is split with the rules the pretraining data was tokenised with
(`elmo_core.tokenizers.get_tokenizer("spacy-en")`: spaCy's English tokenizer, loaded
on first use; a saved folder uses spaCy directly where elmo-bilm is not installed);
pass `is_split_into_words=True` to give token lists yourself. The biLM adds
`<S>`/`</S>` itself, so no special tokens are added. Padding is always on the right,
with all-zero rows.
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, IO, TextIO

import torch
from transformers import BatchEncoding, PreTrainedTokenizer
from transformers.tokenization_utils_base import PaddingStrategy, TruncationStrategy
from transformers.utils import to_py_obj


# ---- elmo_core/characters.py --------------------------------------------------

# Raw ids, before the +1 offset (bilm-tf's UnicodeCharsVocabulary numbering).
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
    """Character ids of one token, offset included.

    Args:
        word: Any string, including the empty string (-> begin/end-of-word only).
        max_characters_per_token: Slots per token; at most `max - 2` UTF-8 bytes are kept.

    Returns:
        A tuple of `max_characters_per_token` ints in `[1, 261]`.

    Raises:
        TypeError: if `word` is not a `str`.
    """
    if not isinstance(word, str):
        raise TypeError(
            f"tokens must be str; got {type(word).__name__} {word!r}. Pass each sentence as a list of token strings."
        )
    if word == BOS_TOKEN:
        return _marker_word(BEGINNING_OF_SENTENCE_CHARACTER, max_characters_per_token)
    if word == EOS_TOKEN:
        return _marker_word(END_OF_SENTENCE_CHARACTER, max_characters_per_token)
    max_bytes = max_characters_per_token - 2
    # A character is at most 4 UTF-8 bytes, so cutting the string first bounds the work
    # for very long tokens without changing which bytes are kept. Lone surrogates cannot
    # be encoded and are dropped, as in the originals.
    data = word[:max_bytes].encode("utf-8", "ignore")[:max_bytes]
    ids = [PADDING_CHARACTER] * max_characters_per_token
    ids[0] = BEGINNING_OF_WORD_CHARACTER
    ids[1 : len(data) + 1] = data
    ids[len(data) + 1] = END_OF_WORD_CHARACTER
    return tuple(i + CHAR_ID_OFFSET for i in ids)


def check_sentences(sentences: object) -> None:
    """Raise a clear `TypeError` unless `sentences` is a sequence of token-string sequences."""
    if isinstance(sentences, (str, bytes)) or not isinstance(sentences, Sequence):
        raise TypeError(
            "sentences must be a list of sentences, each a list of token strings, e.g. "
            f"[['Hello', 'world', '.']]; got {type(sentences).__name__}."
        )
    for k, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)) or not isinstance(sentence, Sequence):
            raise TypeError(
                f"sentence {k} must be a list of token strings; got {type(sentence).__name__} "
                f"{str(sentence)[:60]!r}. Split raw text into tokens first (e.g. text.split())."
            )
        for token in sentence:
            if not isinstance(token, str):
                raise TypeError(f"sentence {k} holds a {type(token).__name__} ({token!r}); every token must be a str.")


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


# ---- elmo_core/model_folder.py ------------------------------------------------

def tokenizer_settings(options: BiLMOptions) -> dict[str, Any]:
    """The character-id settings a tokenizer needs (written to tokenizer_config.json)."""
    return {
        "max_characters_per_token": options.char_cnn.max_characters_per_token,
        "char_id_offset": CHAR_ID_OFFSET,
        "beginning_of_sentence_character": BEGINNING_OF_SENTENCE_CHARACTER,
        "end_of_sentence_character": END_OF_SENTENCE_CHARACTER,
        "beginning_of_word_character": BEGINNING_OF_WORD_CHARACTER,
        "end_of_word_character": END_OF_WORD_CHARACTER,
        "padding_character": PADDING_CHARACTER,
    }


# ---- elmo_core/plugins.py -----------------------------------------------------

def load_plugin(group: str, name: str, install_hint: str) -> Any:
    """Load the object registered as `name` in `group`.

    Raises:
        ElmoError: if nothing of that name is installed, or it needs a missing package;
            the message lists what is installed and says how to install the rest.
    """
    found = {ep.name: ep for ep in entry_points(group=group)}
    if name not in found:
        raise ElmoError(
            f"no {group} plug-in named {name!r} is installed (found: {sorted(found) or 'none'}). {install_hint}"
        )
    try:
        return found[name].load()
    except ImportError as err:
        raise ElmoError(
            f"the {group} plug-in {name!r} needs a package that is not installed ({err}). {install_hint}"
        ) from None


# ---- elmo_core/tokenizers.py --------------------------------------------------

TOKENIZER_ENTRY_POINTS = "elmo_core.tokenizers"
DEFAULT_TOKENIZER = "spacy-en"


def get_tokenizer(name: str = DEFAULT_TOKENIZER) -> Callable[[str], list]:
    """Build the tokenizer registered under `name`.

    Each entry point is a zero-argument factory returning the tokenizer function.

    Raises:
        ElmoError: if no tokenizer of that name is installed (says what is and how to
            install spaCy).
    """
    factory = load_plugin(
        TOKENIZER_ENTRY_POINTS, name, "Raw-text tokenisation needs spaCy: pip install 'elmo-bilm[spacy]'."
    )
    return factory()


def spacy_token_texts(tokens: Iterable[Any]) -> list[str]:
    """ELMo's tokens from spaCy tokens: their texts, whitespace tokens dropped.

    spaCy keeps runs of extra spaces (and newlines) as tokens; the biLM has no use for
    them. `tokens` is a spaCy `Doc` or any iterable of objects with `.text` and
    `.is_space` (duck-typed: the core never imports spaCy).
    """
    return [token.text for token in tokens if not token.is_space]


def token_offsets(text: str, tokens: Sequence[str]) -> list[tuple[int, int]]:
    """Character span `(start, end)` of each token in `text`, so `text[start:end] == token`.

    Tokens are looked up left to right, each after the end of the previous one (spaCy's
    tokens are exact substrings of the text, in order).

    Raises:
        ValueError: if a token is not found in order in `text` (a tokenizer that
            changes the text, e.g. one that normalises characters, has no offsets).
    """
    offsets, position = [], 0
    for token in tokens:
        start = text.find(token, position)
        if start < 0:
            raise ValueError(
                f"token {token!r} is not in the text after position {position}, so it has no character "
                "offsets; the raw-text tokenizer changed the text. Use a tokenizer whose tokens are "
                "substrings of the text (spaCy's are), or pass is_split_into_words=True."
            )
        offsets.append((start, start + len(token)))
        position = start + len(token)
    return offsets


# ---- hf_elmo/tokenization_elmo.py ---------------------------------------------

__all__ = ["ElmoBatchEncoding", "ElmoTokenizer"]

# The character-id constants the core's `word_to_char_ids` uses; a saved tokenizer must agree.
_CORE_CHARACTERS = {
    "char_id_offset": CHAR_ID_OFFSET,
    "beginning_of_sentence_character": BEGINNING_OF_SENTENCE_CHARACTER,
    "end_of_sentence_character": END_OF_SENTENCE_CHARACTER,
    "beginning_of_word_character": BEGINNING_OF_WORD_CHARACTER,
    "end_of_word_character": END_OF_WORD_CHARACTER,
    "padding_character": PADDING_CHARACTER,
}


class ElmoBatchEncoding(BatchEncoding):
    """A `BatchEncoding` that knows which word each position holds.

    transformers' own `word_ids()` needs the Rust encodings of a fast tokenizer. Here
    every position is one word, so the alignment is kept as plain lists: `word_ids(i)`
    gives `[0, 1, ..., n - 1, None, ...]` (None for padding) and `tokens(i)` the token
    strings (the pad token for padding), as for a fast tokenizer. The other alignment
    helpers (`token_to_chars`, ...) are not available.
    """

    def __init__(
        self,
        data: dict[str, Any] | None = None,
        tensor_type: str | None = None,
        prepend_batch_axis: bool = False,
        *,
        word_ids: list[list[int | None]] | None = None,
        tokens: list[list[str]] | None = None,
    ) -> None:
        super().__init__(data, tensor_type=tensor_type, prepend_batch_axis=prepend_batch_axis)
        self._word_ids = word_ids
        self._tokens = tokens

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """The word index of every position of sequence `batch_index`, None for padding."""
        if self._word_ids is None:
            return super().word_ids(batch_index)
        return list(self._word_ids[batch_index])

    def tokens(self, batch_index: int = 0) -> list[str]:
        """The token string at every position of sequence `batch_index`."""
        if self._tokens is None:
            return super().tokens(batch_index)
        return list(self._tokens[batch_index])

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "word_ids": self._word_ids, "tokens": self._tokens}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._word_ids = state.get("word_ids")
        self._tokens = state.get("tokens")


PAD_ID = 0
UNK_ID = 1


class _WholeWords:
    """Stands where a fast tokenizer keeps its Rust backend (`tokenizer._tokenizer`), for
    the one thing transformers' token-classification pipeline reads there: whether the
    tokenizer knows word boundaries (`model.continuing_subword_prefix`). Without it the
    pipeline guesses subwords from spaces and warns that it does; ELMo's tokens are whole
    words, so there is nothing to guess (the pipeline then finds no subwords)."""

    class model:  # noqa: N801  (the attribute name the pipeline reads)
        continuing_subword_prefix = "##"


def _load_text_tokenizer(name: str) -> Callable[[str], list[str]]:
    """The raw-text tokenizer `name` (an `elmo_core.tokenizers` plug-in).

    In a saved folder loaded where elmo-bilm is not installed, no plug-in exists; the
    default rules ("spacy-en": spaCy's English tokenizer, whitespace tokens dropped by
    the core's `spacy_token_texts`) are then built from spaCy directly, when spaCy is
    importable, so raw text gives the same tokens as in a full install.
    """
    try:
        return get_tokenizer(name)
    except ElmoError:
        if name != DEFAULT_TOKENIZER:
            raise
    try:
        import spacy
    except ImportError:
        raise ElmoError(
            "raw-text tokenisation needs spaCy (the pretraining data's English rules): pip install spacy, "
            "or pass token lists with is_split_into_words=True."
        ) from None
    tokenizer = spacy.blank("en").tokenizer
    return lambda text: spacy_token_texts(tokenizer(text))


class ElmoTokenizer(PreTrainedTokenizer):
    """Character ids for ELMo, from raw text or from token lists.

    Outputs (see the module docstring): `input_ids` (one id per token), `char_ids`
    (what the biLM reads), `attention_mask`, and on request `offset_mapping` (each
    token's `(start, end)` in the text; for `is_split_into_words`, within its word, as
    transformers' fast tokenizers give), `special_tokens_mask` and `length`. The
    encoding's `word_ids()` and `tokens()` work as a fast tokenizer's: every token is a
    word. `is_fast` is True for that reason: transformers' token-classification pipeline
    asks a "fast" tokenizer for offsets and word alignment, which this one gives exactly.

    Added tokens (`add_tokens`, `add_special_tokens`) are kept whole in raw text and get
    their own ids (`len(tokenizer)`, `get_added_vocab()` and `convert_ids_to_tokens`
    agree); the model reads them by their characters like any word, so nothing in the
    model needs resizing.

    Args:
        max_characters_per_token: Id slots per token (the model's
            `char_cnn.max_characters_per_token`; 50 for every published model).
        char_id_offset, beginning_of_sentence_character, end_of_sentence_character,
        beginning_of_word_character, end_of_word_character, padding_character: The
            character-id scheme, saved so that a folder documents itself. They must
            equal elmo_core's (the only scheme the models were trained with).
        text_tokenizer: Name of the raw-text tokenizer (an `elmo_core.tokenizers`
            entry point); "spacy-en" = the pretraining data's rules.
        pad_token: Name of the padding token; its id is 0 (an all-zero row).
        unk_token: Name of the id every word gets (1): ELMo has no word vocabulary.
        **kwargs: transformers' tokenizer arguments (`model_max_length`, ...).

    Raises:
        ValueError: for a character scheme other than elmo_core's, or left padding.
    """

    vocab_files_names: dict[str, str] = {}
    model_input_names = ["input_ids", "char_ids", "attention_mask"]
    padding_side = "right"
    _tokenizer = _WholeWords()

    def __init__(
        self,
        max_characters_per_token: int = 50,
        char_id_offset: int = CHAR_ID_OFFSET,
        beginning_of_sentence_character: int = BEGINNING_OF_SENTENCE_CHARACTER,
        end_of_sentence_character: int = END_OF_SENTENCE_CHARACTER,
        beginning_of_word_character: int = BEGINNING_OF_WORD_CHARACTER,
        end_of_word_character: int = END_OF_WORD_CHARACTER,
        padding_character: int = PADDING_CHARACTER,
        text_tokenizer: str = DEFAULT_TOKENIZER,
        pad_token: str = "<pad>",
        unk_token: str = "<unk>",
        **kwargs: Any,
    ) -> None:
        given = {
            "char_id_offset": char_id_offset,
            "beginning_of_sentence_character": beginning_of_sentence_character,
            "end_of_sentence_character": end_of_sentence_character,
            "beginning_of_word_character": beginning_of_word_character,
            "end_of_word_character": end_of_word_character,
            "padding_character": padding_character,
        }
        if given != _CORE_CHARACTERS:
            differ = {k: v for k, v in given.items() if v != _CORE_CHARACTERS[k]}
            raise ValueError(
                f"ElmoTokenizer uses bilm-tf's character ids {_CORE_CHARACTERS}; got {differ}. "
                "A tokenizer_config.json with other values was not written for an ELMo model."
            )
        if not isinstance(max_characters_per_token, int) or max_characters_per_token < 3:
            raise ValueError(f"max_characters_per_token must be an integer >= 3; got {max_characters_per_token!r}.")
        if kwargs.get("padding_side", "right") != "right":
            raise ValueError("ElmoTokenizer pads on the right only: the biLM reads each row from position 0.")
        self.max_characters_per_token = max_characters_per_token
        for key, value in given.items():
            setattr(self, key, value)
        self.text_tokenizer = text_tokenizer
        self._base_vocab = {str(pad_token): PAD_ID, str(unk_token): UNK_ID}
        self._split_text: Callable[[str], list[str]] | None = None  # loaded on first raw-text call
        super().__init__(
            pad_token=pad_token,
            unk_token=unk_token,
            max_characters_per_token=max_characters_per_token,
            text_tokenizer=text_tokenizer,
            **given,
            **kwargs,
        )

    @classmethod
    def from_options(cls, options: BiLMOptions, **kwargs: Any) -> ElmoTokenizer:
        """The tokenizer for a model with these biLM options."""
        return cls(**tokenizer_settings(options), **kwargs)

    @property
    def is_fast(self) -> bool:
        """True: offsets and word ids are available, as from transformers' fast tokenizers."""
        return True

    # ------------------------------------------------------------------ vocabulary
    @property
    def vocab_size(self) -> int:
        """2: there is no word vocabulary, only the pad (0) and unknown (1) tokens."""
        return len(self._base_vocab)

    def get_vocab(self) -> dict[str, int]:
        """The pad and unknown tokens, and the added tokens."""
        return {**self._base_vocab, **self._added_tokens_encoder}

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        return ()  # nothing to save: the settings are in tokenizer_config.json

    # ------------------------------------------------------------------ text -> tokens -> ids
    def tokenize(self, text: str, **kwargs: Any) -> list[str]:
        """Split raw text into tokens with the pretraining data's rules (spaCy English).

        Added tokens are never split.

        Raises:
            ElmoError: if the tokenizer (spaCy) is not installed; says how to install it.
        """
        return self._split_with_offsets(text)[0]

    def _split_with_offsets(self, text: str) -> tuple[list[str], list[tuple[int, int]]]:
        """Tokens of raw text and their `(start, end)` character spans in it."""
        if self._split_text is None:
            self._split_text = _load_text_tokenizer(self.text_tokenizer)
        tokens: list[str] = []
        offsets: list[tuple[int, int]] = []
        position = 0
        pieces = self.tokens_trie.split(text) if self._added_tokens_encoder else [text]
        for piece in pieces:  # the pieces are the text, cut around added tokens
            if piece in self._added_tokens_encoder:
                tokens.append(piece)
                offsets.append((position, position + len(piece)))
            else:
                words = list(self._split_text(piece))
                tokens.extend(words)
                offsets.extend((position + a, position + b) for a, b in token_offsets(piece, words))
            position += len(piece)
        return tokens, offsets

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return self.tokenize(text)

    def _convert_token_to_id(self, token: str) -> int:
        # Added tokens are looked up before this is called; every other word is "unknown".
        return self._base_vocab.get(token, UNK_ID)

    def _convert_id_to_token(self, index: int) -> str:
        for token, token_id in self._base_vocab.items():
            if token_id == index:
                return token
        return str(self.unk_token)

    def _encode_plus(  # type: ignore[override]
        self,
        text: str | Sequence[str] | Sequence[Sequence[str]],
        text_pair: Any = None,
        add_special_tokens: bool = True,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        **kwargs: Any,
    ) -> ElmoBatchEncoding:
        """Encode one text/token list or a batch of them (called by `__call__`).

        `add_special_tokens` has no effect: the biLM adds `<S>`/`</S>` itself.

        Returns:
            `ElmoBatchEncoding` with `input_ids` ([batch, tokens]), `char_ids`
            ([batch, tokens, chars]) and `attention_mask` ([batch, tokens]), plus
            `offset_mapping` ([batch, tokens, 2]), `special_tokens_mask` and `length`
            when asked; nested lists, or tensors with `return_tensors`; without a batch
            axis for a single unbatched input and no `return_tensors`.

        Raises:
            ValueError: for sentence pairs, overflowing tokens, left padding, or
                sentences of different lengths with `return_tensors` and no padding.
            TypeError: for input that is neither text nor token lists.
        """
        self._check_encode_arguments(text_pair, return_overflowing_tokens, padding_side)
        batched, sentences, spans = self._sentences(text, is_split_into_words)
        if truncation_strategy != TruncationStrategy.DO_NOT_TRUNCATE and max_length is not None:
            sentences, spans = self._truncate(sentences, spans, max_length)
        lengths = [len(s) for s in sentences]
        target = _padded_length(lengths, padding_strategy, max_length, pad_to_multiple_of)
        columns, word_ids, tokens = self._padded_columns(sentences, spans, target)
        asked = {
            "attention_mask": return_attention_mask is not False,
            "special_tokens_mask": return_special_tokens_mask,
            "offset_mapping": return_offsets_mapping,
        }
        data: dict[str, Any] = {"input_ids": columns["input_ids"], "char_ids": columns["char_ids"]}
        data.update((key, columns[key]) for key, wanted in asked.items() if wanted)
        if return_length:
            data["length"] = lengths
        if return_tensors is not None:
            data = self._as_tensors(data, return_tensors, self.max_characters_per_token)
        elif not batched:
            data = {key: value[0] for key, value in data.items()}
        return ElmoBatchEncoding(data, word_ids=word_ids, tokens=tokens)

    def _check_encode_arguments(
        self, text_pair: Any, return_overflowing_tokens: bool, padding_side: str | None
    ) -> None:
        """Raise ValueError for what ElmoTokenizer does not do: pairs, overflowing tokens, left padding."""
        if text_pair is not None:
            raise ValueError("ElmoTokenizer encodes single sentences; sentence pairs are not supported.")
        if return_overflowing_tokens:
            raise ValueError(
                "ElmoTokenizer cannot return overflowing tokens: the biLM reads a sentence of any length "
                "whole, so there is no need to cut it into windows."
            )
        if (padding_side or self.padding_side) != "right":
            raise ValueError("ElmoTokenizer pads on the right only: the biLM reads each row from position 0.")

    def _truncate(
        self, sentences: list[list[str]], spans: list[list[tuple[int, int]]], max_length: int
    ) -> tuple[list[list[str]], list[list[tuple[int, int]]]]:
        """Each sentence (and its spans) cut to `max_length` tokens, from `truncation_side`."""
        keep = [
            slice(max(0, len(s) - max_length), None) if self.truncation_side == "left" else slice(0, max_length)
            for s in sentences
        ]
        return [s[k] for s, k in zip(sentences, keep)], [o[k] for o, k in zip(spans, keep)]

    def _padded_columns(
        self, sentences: list[list[str]], spans: list[list[tuple[int, int]]], target: int | None
    ) -> tuple[dict[str, list[Any]], list[list[int | None]], list[list[str]]]:
        """Every column `_encode_plus` may return, each row right-padded to `target` tokens (None:
        not padded), and each row's word ids and tokens (for `ElmoBatchEncoding`)."""
        C = self.max_characters_per_token
        special_ids = set(self.all_special_ids) - {UNK_ID}  # every word is "unknown", none is special
        columns: dict[str, list[Any]] = {
            "input_ids": [],
            "char_ids": [],
            "attention_mask": [],
            "special_tokens_mask": [],
            "offset_mapping": [],
        }
        word_ids, tokens = [], []
        for sentence, offsets in zip(sentences, spans):
            n = len(sentence)
            missing = max(0, (target or n) - n)
            ids = self.convert_tokens_to_ids(sentence) if sentence else []
            columns["input_ids"].append(ids + [PAD_ID] * missing)
            columns["char_ids"].append([list(word_to_char_ids(t, C)) for t in sentence] + [[0] * C] * missing)
            columns["attention_mask"].append([1] * n + [0] * missing)
            columns["special_tokens_mask"].append([int(i in special_ids) for i in ids] + [1] * missing)
            columns["offset_mapping"].append([tuple(o) for o in offsets] + [(0, 0)] * missing)
            word_ids.append(list(range(n)) + [None] * missing)
            tokens.append(list(sentence) + [str(self.pad_token)] * missing)
        return columns, word_ids, tokens

    def _sentences(
        self, text: Any, is_split_into_words: bool
    ) -> tuple[bool, list[list[str]], list[list[tuple[int, int]]]]:
        """(batched?, token lists, their character spans) for any input `__call__` accepts."""
        if isinstance(text, str):
            if is_split_into_words:
                raise TypeError("is_split_into_words=True needs a list of token strings, not one string.")
            tokens, offsets = self._split_with_offsets(text)
            return False, [tokens], [offsets]
        if isinstance(text, (list, tuple)) and all(isinstance(t, str) for t in text) and text:
            if is_split_into_words:
                return False, [list(text)], [_word_spans(text)]
            split = [self._split_with_offsets(t) for t in text]
            return True, [tokens for tokens, _ in split], [offsets for _, offsets in split]
        if isinstance(text, (list, tuple)):
            if not text:
                return True, [], []
            if not is_split_into_words:
                raise TypeError(
                    "got a list of token lists; pass is_split_into_words=True to encode pre-split tokens, "
                    "or give raw strings."
                )
            check_sentences(text)
            return True, [list(s) for s in text], [_word_spans(s) for s in text]
        raise TypeError(
            f"ElmoTokenizer takes a string, a list of strings, or token lists with is_split_into_words=True; "
            f"got {type(text).__name__}."
        )

    @staticmethod
    def _as_tensors(data: dict[str, Any], return_tensors: str, num_chars: int) -> dict[str, Any]:
        if return_tensors not in ("pt", "np"):
            raise ValueError(f"return_tensors must be 'pt' or 'np'; got {return_tensors!r}.")
        widths = {len(row) for row in data["input_ids"]}
        if len(widths) > 1:
            raise ValueError(
                f"the sentences have different lengths ({sorted(widths)} tokens), so they do not fit one "
                "tensor; pass padding=True (pads to the longest) or padding='max_length'."
            )
        batch_size, num_tokens = len(data["input_ids"]), widths.pop() if widths else 0
        trailing = {"char_ids": (num_chars,), "offset_mapping": (2,), "length": None}
        out: dict[str, Any] = {}
        for key, value in data.items():
            tensor = torch.tensor(value, dtype=torch.long)
            if trailing.get(key, ()) is not None:  # also right for 0 tokens
                tensor = tensor.reshape(batch_size, num_tokens, *trailing.get(key, ()))
            out[key] = tensor.numpy() if return_tensors == "np" else tensor
        return out

    # ------------------------------------------------------------------ padding (collators)
    def _pad(  # type: ignore[override]
        self,
        encoded_inputs: dict[str, Any],
        max_length: int | None = None,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
    ) -> dict[str, Any]:
        """Pad one encoded sentence on the right (used by `pad` and the collators).

        Char ids get all-zero rows, `input_ids` the pad id (0), offsets `(0, 0)`. An
        `input_ids` that holds char ids (rows of ids) is padded with all-zero rows.
        """
        if (padding_side or self.padding_side) != "right":
            raise ValueError("ElmoTokenizer pads on the right only: the biLM reads each row from position 0.")
        n = len(encoded_inputs["input_ids"])
        if padding_strategy == PaddingStrategy.LONGEST or max_length is None:
            max_length = n
        if pad_to_multiple_of and max_length % pad_to_multiple_of:
            max_length += pad_to_multiple_of - max_length % pad_to_multiple_of
        if return_attention_mask is not False and "attention_mask" not in encoded_inputs:
            encoded_inputs["attention_mask"] = [1] * n
        missing = max_length - n if padding_strategy != PaddingStrategy.DO_NOT_PAD else 0
        if missing <= 0:
            return encoded_inputs
        pad_row = [0] * self.max_characters_per_token
        rows = encoded_inputs["input_ids"]
        char_rows = len(rows) > 0 and isinstance(to_py_obj(rows[0]), list)
        fills = {
            "input_ids": pad_row if char_rows else PAD_ID,
            "char_ids": pad_row,
            "attention_mask": 0,
            "special_tokens_mask": 1,
            "offset_mapping": (0, 0),
        }
        for key, fill in fills.items():
            if key in encoded_inputs:
                encoded_inputs[key] = list(encoded_inputs[key]) + [fill] * missing
        return encoded_inputs

    # ------------------------------------------------------------------ ids -> text
    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str | list[str]:
        """Text back from character ids (`char_ids`; `input_ids` hold no text): one row ->
        a word, [tokens, chars] -> the words joined by spaces (padding rows skipped),
        [batch, tokens, chars] -> a list.

        Bytes are decoded as UTF-8 with replacement characters, so a word cut at 48
        bytes inside a character decodes without error.
        """
        ids = to_py_obj(token_ids)
        depth, probe = 0, ids
        while isinstance(probe, (list, tuple)):
            depth += 1
            probe = probe[0] if probe else None
        if depth == 1:
            return self._decode_word(ids)
        if depth == 3:
            return [self.decode(sentence) for sentence in ids]
        return " ".join(self._decode_word(row) for row in ids if any(row))

    def _decode_word(self, row: Sequence[int]) -> str:
        raw = [i - CHAR_ID_OFFSET for i in row if i]
        if raw[:1] == [BEGINNING_OF_WORD_CHARACTER] and raw[1:2] == [BEGINNING_OF_SENTENCE_CHARACTER]:
            return "<S>"
        if raw[:1] == [BEGINNING_OF_WORD_CHARACTER] and raw[1:2] == [END_OF_SENTENCE_CHARACTER]:
            return "</S>"
        data = bytes(i for i in raw if 0 <= i < 256)
        return data.decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ saving, pickling

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_split_text"] = None  # a spaCy closure; rebuilt on first use
        return state


def _padded_length(
    lengths: Sequence[int], padding_strategy: PaddingStrategy, max_length: int | None, pad_to_multiple_of: int | None
) -> int | None:
    """The row length padding aims at (None: no padding), rounded up to `pad_to_multiple_of`.

    LONGEST pads to the longest sentence; MAX_LENGTH to `max_length` (the longest without one).
    """
    if padding_strategy == PaddingStrategy.LONGEST:
        target = max(lengths, default=0)
    elif padding_strategy == PaddingStrategy.MAX_LENGTH:
        target = max_length if max_length is not None else max(lengths, default=0)
    else:
        return None
    if pad_to_multiple_of and target % pad_to_multiple_of:
        target += pad_to_multiple_of - target % pad_to_multiple_of
    return target


def _word_spans(words: Sequence[str]) -> list[tuple[int, int]]:
    """Offsets of pre-split words: each within itself, as transformers' fast tokenizers give."""
    return [(0, len(word)) for word in words]
