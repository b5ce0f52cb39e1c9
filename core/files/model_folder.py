"""The model folder (config.json, model.safetensors, tokenizer_config.json), read and written
without transformers. The layout is in docs/reference/model-folder.md.

`load_elmo` loads the model a user named: a model folder, a bilm-tf options + hdf5 pair,
or the default model.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple, cast

import torch

from .._version import __version__
from ..model.characters import (
    BEGINNING_OF_SENTENCE_CHARACTER,
    BEGINNING_OF_WORD_CHARACTER,
    CHAR_ID_OFFSET,
    END_OF_SENTENCE_CHARACTER,
    END_OF_WORD_CHARACTER,
    PADDING_CHARACTER,
)
from ..model.elmo import Elmo, ScalarMix
from ..model.errors import ElmoError, OptionsError, SettingError, WeightFileError
from ..model.options import BiLMOptions
from ..runtime.memory import release_when_collected
from ..runtime.parts import serving_parts
from ..runtime.quantization import is_quantized
from .atomic_files import atomic_write
from .options_file import read_options
from .safetensors_files import WEIGHTS_NAME, WeightFiles, unreadable_error, weight_files
from .text_files import read_json
from .weights import check_bilm_tf_file, count_non_finite, load_bilm_tf, non_finite_error

__all__ = ["default_model_dir", "load_elmo", "load_model_folder", "save_model_folder"]

CONFIG_NAME = "config.json"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
MODEL_TYPE = "elmo"
MODEL_FOLDER_FILES = ("*config.json", "special_tokens_map.json", "*.safetensors", "*.safetensors.index.json", "*.py")
"""Names a model folder write may replace (ours and `save_pretrained`'s). Inputs with these names are refused."""

DEFAULT_MODEL_DIR = Path(__file__).resolve().parents[1] / "default_model"  # elmo_core/default_model

ELMO_SETTINGS: dict[str, Any] = {
    name: parameter.default
    for name, parameter in inspect.signature(Elmo.__init__).parameters.items()
    if name not in ("self", "options", "requires_grad") and parameter.kind is not parameter.KEYWORD_ONLY
}
"""The `Elmo` settings stored in config.json, with defaults from `Elmo.__init__`. Not stored:
`requires_grad` (a loaded biLM starts frozen) and the keyword-only parts (chosen at load)."""


def tokenizer_settings(options: BiLMOptions) -> dict[str, Any]:
    """The character-id settings of tokenizer_config.json."""
    return {
        "max_characters_per_token": options.char_cnn.max_characters_per_token,
        "char_id_offset": CHAR_ID_OFFSET,
        "beginning_of_sentence_character": BEGINNING_OF_SENTENCE_CHARACTER,
        "end_of_sentence_character": END_OF_SENTENCE_CHARACTER,
        "beginning_of_word_character": BEGINNING_OF_WORD_CHARACTER,
        "end_of_word_character": END_OF_WORD_CHARACTER,
        "padding_character": PADDING_CHARACTER,
    }


def default_model_dir() -> Path:
    """The default model folder that ships with the package.

    Raises:
        WeightFileError: if this installation has no default model.
    """
    if not (DEFAULT_MODEL_DIR / CONFIG_NAME).is_file():
        raise WeightFileError(
            f"no default model is installed (looked in {DEFAULT_MODEL_DIR}); this version does not "
            "ship one yet. Name a model: a model folder, or options.json with the hdf5 weights "
            "(elmo embed --model DIR, or --options FILE --weights FILE)."
        )
    return DEFAULT_MODEL_DIR


PathArg = str | os.PathLike | None


class ModelSource(NamedTuple):
    """The model a user named: a `folder`, or a bilm-tf `options`/`weights` pair. `is_default`: nothing was named."""

    folder: Path | None
    options: Path | None
    weights: Path | None
    is_default: bool = False

    def describe(self) -> str:
        """A phrase for logs."""
        if self.folder is None:
            return f"{self.options} + {self.weights}"
        return f"the default model ({self.folder})" if self.is_default else f"the model folder {self.folder}"


def resolve_model_source(
    path: PathArg = None,
    options: PathArg = None,
    weights: PathArg = None,
    *,
    names: tuple[str, str, str] = ("path", "options", "weights"),
) -> ModelSource:
    """Which model the arguments of `load_elmo` name: a folder, an options/weights pair, or the default.

    Args:
        path, options, weights: As `load_elmo`.
        names: The three arguments as the caller's users spell them, for errors.

    Raises:
        ElmoError: if a folder and a pair are both given, or only half of a pair.
        WeightFileError: if nothing is given and no default model is installed.
    """
    given = [value is not None and value != "" for value in (path, options, weights)]
    if given[0] and (given[1] or given[2]):
        raise ElmoError(
            f"give either a model folder ({names[0]}) or bilm-tf's options.json and hdf5 weights "
            f"({names[1]} and {names[2]}), not both; got {_shown(names, path, options, weights)}. "
            f"Drop {names[0]}, or drop {names[1]} and {names[2]}."
        )
    if given[1] != given[2]:
        raise ElmoError(
            f"{names[1]} and {names[2]} go together: bilm-tf's options.json and its hdf5 weights; got "
            f"{_shown(names[1:], options, weights)}. Give both, or a model folder with {names[0]}."
        )
    if given[0]:
        assert path is not None  # given[0]
        return ModelSource(Path(path), None, None)
    if given[1]:
        assert options is not None and weights is not None  # given[1] and given[2]
        return ModelSource(None, Path(options), Path(weights))
    return ModelSource(default_model_dir(), None, None, is_default=True)


def _shown(names: Iterable[str], *values: PathArg) -> str:
    return ", ".join(
        f"{name} = " + ("(not given)" if value is None or value == "" else repr(os.fspath(value)))
        for name, value in zip(names, values)
    )


def load_elmo(
    path: str | os.PathLike | None = None,
    options: str | os.PathLike | None = None,
    weights: str | os.PathLike | None = None,
    *,
    map_location: str | torch.device = "cpu",
    **settings: Any,
) -> Elmo:
    """Load the `Elmo` the arguments name: a model folder, a bilm-tf pair, or the default model.

    None and "" both mean "not given" (spaCy configs use "").

    Args:
        path: A model folder. Give it alone.
        options: bilm-tf's options.json. Goes with `weights`.
        weights: bilm-tf's hdf5 weights. Goes with `options`.
        map_location: Device for the loaded model.
        **settings: `Elmo` settings (e.g. `dropout=0.0`). They replace a folder's stored ones.

    Raises:
        ElmoError: if a folder and a pair are both given, or only half of a pair.
        WeightFileError / OptionsError: for missing or broken files, or no default model.
        TypeError: for an unknown setting.
    """
    return load_model_source(resolve_model_source(path, options, weights), map_location=map_location, **settings)


def load_model_source(source: ModelSource, *, map_location: str | torch.device = "cpu", **settings: Any) -> Elmo:
    """`load_elmo` of a resolved source."""
    if source.folder is not None:
        return load_model_folder(source.folder, map_location=map_location, **settings)
    _check_settings(settings)
    assert source.options is not None and source.weights is not None  # no folder: a pair
    bilm_options = read_options(source.options)
    check_bilm_tf_file(bilm_options, source.weights, str(source.options))  # before anything is allocated
    elmo = _with_runtime(bilm_options, settings, source.options)
    load_bilm_tf(elmo, source.weights)
    return elmo.to(map_location)


def _elmo_settings(model: Elmo) -> dict[str, Any]:
    mixes = list(cast(Iterable[ScalarMix], model.scalar_mixes))
    fixed = bool(mixes) and not mixes[0].scalar_weights.requires_grad
    return {
        "num_output_representations": len(mixes),
        "dropout": model.dropout,
        "do_layer_norm": bool(mixes and mixes[0].do_layer_norm),
        "layer_norm_scope": mixes[0].layer_norm_scope if mixes else ELMO_SETTINGS["layer_norm_scope"],
        "keep_sentence_boundaries": model.bilm.keep_sentence_boundaries,
        "stateful": model.bilm.stateful,
        "scalar_mix_parameters": mixes[0].scalar_weights.detach().tolist() if fixed else None,
    }


def save_model_folder(model: Elmo, path: str | Path, *, extra_config: dict[str, Any] | None = None) -> None:
    """Write `model` as a model folder, replacing its files atomically.

    Args:
        model: The `Elmo` to save.
        path: The folder, created if needed.
        extra_config: More keys for config.json.

    Raises:
        ValueError: for an int8-quantised model (save the float32 model it came from).
    """
    from safetensors.torch import save_file

    if is_quantized(model):
        raise ValueError(
            "cannot save an int8-quantised model: its packed int8 weights are not the "
            "model's parameters. Save the float32 model and quantise after loading "
            "(quantize_int8(load_model_folder(path)))."
        )
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file; a model folder is a directory. Give a new or existing folder path.")
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": MODEL_TYPE,
        **model.options.to_dict(),
        **_elmo_settings(model),
        "elmo_bilm_version": __version__,  # which version wrote the folder (hf_elmo names it on a mismatch)
    }
    if extra_config:
        config.update(extra_config)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    atomic_write(folder / WEIGHTS_NAME, lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    atomic_write(
        folder / CONFIG_NAME, lambda tmp: Path(tmp).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    )
    tokenizer_path = folder / TOKENIZER_CONFIG_NAME
    if not tokenizer_path.exists():
        text = json.dumps(tokenizer_settings(model.options), indent=2) + "\n"
        atomic_write(tokenizer_path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def read_model_config(path: str | Path) -> tuple[BiLMOptions, dict[str, Any]]:
    """The options and the `Elmo` settings stored in a model folder's config.json.

    Raises:
        WeightFileError: if config.json is missing, not JSON, or not of `model_type` "elmo".
        OptionsError: if its options are invalid.
    """
    folder = Path(path)
    config_path = folder / CONFIG_NAME
    if not folder.is_dir():
        raise WeightFileError(f"model folder {folder} does not exist or is not a folder.")
    if not config_path.is_file():
        raise WeightFileError(
            f"{folder} is not an ELMo model folder: it has no {CONFIG_NAME}. A model folder holds "
            f"{CONFIG_NAME}, {WEIGHTS_NAME} and {TOKENIZER_CONFIG_NAME}; for original bilm-tf files "
            "pass options.json and the hdf5 weights instead."
        )
    config = read_json(config_path, "model config", error=WeightFileError)
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        found = config.get("model_type") if isinstance(config, dict) else type(config).__name__
        raise WeightFileError(f"{config_path} has model_type {found!r}; an ELMo model folder has model_type 'elmo'.")
    try:
        # Only the two bilm-tf sections: config.json's other keys are the Elmo settings
        # and the Hugging Face bookkeeping, not options (bilm-tf's training `dropout`
        # would otherwise collide with the Elmo `dropout`).
        options = BiLMOptions.from_dict({k: v for k, v in config.items() if k in ("lstm", "char_cnn")})
    except OptionsError as err:
        raise OptionsError(f"{config_path}: {err}") from None
    settings = {key: config.get(key, default) for key, default in ELMO_SETTINGS.items()}
    return options, settings


def load_model_folder(
    path: str | Path, map_location: str | torch.device = "cpu", *, variant: str | None = None, **overrides: Any
) -> Elmo:
    """Build an `Elmo` from a model folder and load its weights (any `save_pretrained` layout).

    Args:
        path: The folder.
        map_location: Device for the loaded model.
        variant: Read `model.<variant>.safetensors` (or its shards). None reads the plain
            weights, or the folder's only variant.
        **overrides: `Elmo` settings that replace the stored ones (e.g. `dropout=0.0`), or
            the biLM's parts (`recurrence`, `token_cache_words`). A scalar mix missing
            from the file starts at w = 0, gamma = 1.

    Raises:
        WeightFileError: for a missing or corrupt file, a missing or mis-shaped tensor,
            or weights that are not finite.
        OptionsError: for invalid options or Elmo settings in config.json.
    """
    options, stored = read_model_config(path)
    _check_settings(overrides)
    settings = {**stored, **overrides}
    weights = weight_files(path, variant)
    _check_sizes(options, stored, settings, weights, Path(path) / CONFIG_NAME)  # before anything is allocated
    model = _with_runtime(options, settings, Path(path) / CONFIG_NAME)
    _read_weights(model, weights)
    return model.to(map_location)


def _check_settings(settings: dict[str, Any]) -> None:
    unknown = set(settings) - set(ELMO_SETTINGS) - {"requires_grad", *RUNTIME_SETTINGS}
    if unknown:
        raise TypeError(
            f"unknown Elmo settings {sorted(unknown)}; valid: {sorted(ELMO_SETTINGS)}, requires_grad, "
            "recurrence and token_cache_words."
        )


RUNTIME_SETTINGS = ("recurrence", "token_cache_words")
"""Load settings that choose the biLM's parts (`serving_parts`). Not stored."""


_READ_BLOCK_BYTES = 4 * 2**20

NON_FINITE_FIX = "The file is damaged or came from a diverged training run; save or download the model again."
"""The fix `non_finite_error` names for a saved model."""


def _read_weights(model: Elmo, weights: WeightFiles) -> None:
    """Copy the safetensors weights into `model`'s tensors, checking each is finite.

    A mapping keeps the pages it read resident until closed, so each block of
    `_READ_BLOCK_BYTES` gets a fresh one: a weight is held once, plus one block.
    """
    from safetensors import safe_open

    file_keys = _base_model_keys(weights.shapes)  # model key -> key in the file
    _check_state({k: weights.shapes[f] for k, f in file_keys.items()}, model, weights.source)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if name not in file_keys:
                continue  # a scalar mix the file does not have: keeps its initial value
            key = file_keys[name]
            weights_path = weights.files[key]
            rows = tensor.shape[0] if tensor.dim() else 0
            row_bytes = tensor[0].numel() * tensor.element_size() if rows else 0
            step = max(1, _READ_BLOCK_BYTES // max(row_bytes, 1))
            try:
                if rows <= step:  # small, or a scalar: in one piece
                    with safe_open(str(weights_path), framework="pt", device="cpu") as f:
                        tensor.copy_(f.get_tensor(key))
                else:  # in blocks of rows, so the mapping never holds more than one block
                    for start in range(0, rows, step):
                        with safe_open(str(weights_path), framework="pt", device="cpu") as f:
                            tensor[start : start + step].copy_(f.get_slice(key)[start : start + step])
            except Exception as err:
                raise unreadable_error(weights_path, err) from err
            bad = count_non_finite(tensor, step)  # in blocks: isfinite of a whole tensor is as large
            if bad:
                raise non_finite_error(weights_path, f"tensor '{key}'", bad, NON_FINITE_FIX)


def check_model_folder(path: str | Path, variant: str | None = None, *, sizes_only: bool = False) -> None:
    """Raise the error `load_model_folder` would raise, reading only config.json and headers.

    Args:
        path: The model folder.
        variant: As `load_model_folder`.
        sizes_only: A tensor the weights lack is no error (transformers initialises it).

    Raises:
        WeightFileError / OptionsError: as `load_model_folder`.
    """
    options, settings = read_model_config(path)
    _check_sizes(options, settings, settings, weight_files(path, variant), Path(path) / CONFIG_NAME, sizes_only)


def _check_sizes(
    options: BiLMOptions,
    stored: dict[str, Any],
    settings: dict[str, Any],
    weights: WeightFiles,
    config_path: Path,
    sizes_only: bool = False,
) -> None:
    """Raise unless config.json's sizes match the weights' headers. Builds on the meta device.

    `stored` are config.json's settings, `settings` the ones to build with.
    """
    shapes = {k: weights.shapes[f] for k, f in _base_model_keys(weights.shapes).items()}
    counts = [
        ("lstm.n_layers", options.lstm.n_layers, "bilm.forward_layers.layers."),
        ("char_cnn.n_highway", options.char_cnn.n_highway, "bilm.char_cnn.highway.layers."),
        ("char_cnn.filters", len(options.char_cnn.filters), "bilm.char_cnn.convolutions."),
        ("num_output_representations", stored["num_output_representations"], "scalar_mixes."),
    ]
    for key, declared, prefix in counts:
        held = {name[len(prefix) :].split(".")[0] for name in shapes if name.startswith(prefix)}
        # None held: the weights lack the part (a mix the caller adds; missing keys for transformers).
        absent_is_fine = sizes_only or prefix == "scalar_mixes."
        if isinstance(declared, int) and declared > len(held) and (held or not absent_is_fine):
            raise WeightFileError(
                f"{config_path} declares {key} = {declared}, but {weights.source} holds {len(held)} "
                f"(tensors '{prefix}*'). The options in {CONFIG_NAME} do not match these weights: use the "
                f"{CONFIG_NAME} saved with them."
            )
    settings = {k: v for k, v in settings.items() if k != "token_cache_words"}
    with torch.device("meta"):
        model = _build_elmo(options, settings, config_path)
    _check_state(shapes, model, weights.source, sizes_only)


def _with_runtime(options: BiLMOptions, settings: dict[str, Any], config_path: Path) -> Elmo:
    settings = dict(settings)
    runtime = {key: settings.pop(key) for key in RUNTIME_SETTINGS if key in settings}
    try:
        parts = serving_parts(**runtime)
    except SettingError:
        raise  # names the setting, so that a face names it as its user typed it
    except ValueError as err:
        raise OptionsError(f"{' and '.join(runtime)} cannot be used ({err}).") from err
    elmo = _build_elmo(options, {**settings, **parts}, config_path)
    release_when_collected(elmo.bilm)  # a dropped model's heap goes back to the OS
    return elmo


def _build_elmo(options: BiLMOptions, settings: dict[str, Any], config_path: Path) -> Elmo:
    try:
        return Elmo(options, **settings)
    except (TypeError, ValueError) as err:
        raise OptionsError(
            f"{config_path}: its Elmo settings cannot be used ({err}). Valid settings and defaults: "
            f"{ELMO_SETTINGS}; fix the value in {CONFIG_NAME} or pass it to load_model_folder as an override."
        ) from err


def _base_model_keys(keys: Iterable[str]) -> dict[str, str]:
    """The `Elmo`'s tensor names -> the file's: a task model's `<prefix>.bilm.*` loses its prefix."""
    keys = list(keys)
    prefixes = {
        "".join(f"{part}." for part in parts[: parts.index("bilm")])
        for parts in (key.split(".") for key in keys)
        if "bilm" in parts
    }
    if len(prefixes) != 1 or prefixes == {""}:
        return {key: key for key in keys}  # an Elmo's own tensors (or not: _check_state names what is missing)
    (prefix,) = prefixes
    return {key[len(prefix) :]: key for key in keys if key.startswith(prefix)}


def _check_state(shapes: dict[str, tuple[int, ...]], model: Elmo, weights_path: Path, missing_ok: bool = False) -> None:
    for name, tensor in model.state_dict().items():
        if name not in shapes:
            if missing_ok or name.startswith("scalar_mixes."):
                continue
            raise WeightFileError(
                f"{weights_path} has no tensor '{name}' (expected shape {tuple(tensor.shape)}). The file "
                f"does not belong to this {CONFIG_NAME}, or is not an ELMo model; save the folder again."
            )
        if shapes[name] != tuple(tensor.shape):
            raise WeightFileError(
                f"{weights_path}: tensor '{name}' has shape {shapes[name]}, but {CONFIG_NAME} implies "
                f"{tuple(tensor.shape)}. The options in {CONFIG_NAME} do not match these weights: use the "
                f"{CONFIG_NAME} saved with them."
            )
