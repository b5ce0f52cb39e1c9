"""A model folder's safetensors files: one file, or shards listed by an index, and their `variant=` names.

The layouts are transformers' `save_pretrained`. Only headers are read here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from ..model.errors import WeightFileError
from .text_files import read_json

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"


class WeightFiles(NamedTuple):
    """Where a model folder's tensors are.

    Attributes:
        source: The weights file, or the index of the shards (named in errors).
        files: Tensor name -> the safetensors file that holds it.
        shapes: Tensor name -> shape, from the file headers.
    """

    source: Path
    files: dict[str, Path]
    shapes: dict[str, tuple[int, ...]]


_VARIANT_FILE = re.compile(r"model\.(?P<variant>[^.]+)\.safetensors")
_VARIANT_INDEX = re.compile(r"model\.safetensors\.index\.(?P<variant>[^.]+)\.json")
_SHARD = re.compile(r".*-\d{5}-of-\d{5}")


def weight_files(path: str | Path, variant: str | None = None) -> WeightFiles:
    """Find a model folder's weights and read their headers, in transformers' order.

    `model.safetensors` first, else the shards of `model.safetensors.index.json`.

    Args:
        path: The model folder.
        variant: Read `model.<variant>.safetensors` and its index. None: `folder_variant`.

    Returns:
        `WeightFiles`: every tensor's file and shape, over all shards.

    Raises:
        WeightFileError: for no weights, a damaged index, a missing shard or tensor, or an
            unreadable file.
    """
    folder = Path(path)
    present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if variant is None:
        variant = folder_variant(folder)
    single, index = _variant_name(WEIGHTS_NAME, variant), _variant_name(WEIGHTS_INDEX_NAME, variant)
    if single in present:
        shapes = _header(folder / single)
        return WeightFiles(folder / single, dict.fromkeys(shapes, folder / single), shapes)
    if index in present:
        return _sharded(folder / index, present)
    raise WeightFileError(
        f"model folder {path} has no {single} (the weights), only {present}. Copy the whole folder again, "
        f"or re-create it with save_model_folder / save_pretrained / elmo convert (sharded weights are "
        f"read through {index}, which it lacks too)."
    )


def folder_variant(path: str | Path) -> str | None:
    """The folder's only variant (`"fp16"`) when it holds no plain weights, else None.

    Raises:
        WeightFileError: if the folder holds no plain weights but several variants.
    """
    folder = Path(path)
    present = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    if WEIGHTS_NAME in present or WEIGHTS_INDEX_NAME in present:
        return None
    variants = sorted(
        {
            match["variant"]
            for name in present
            for match in (_VARIANT_FILE.fullmatch(name), _VARIANT_INDEX.fullmatch(name))
            if match and not _SHARD.fullmatch(match["variant"])
        }
    )
    if len(variants) > 1:
        raise WeightFileError(
            f"model folder {folder} holds no {WEIGHTS_NAME} but weights of {len(variants)} variants "
            f"({', '.join(variants)}); say which to read: load_model_folder(path, variant={variants[0]!r}) "
            f"or from_pretrained(path, variant={variants[0]!r}), or keep one variant in the folder."
        )
    return variants[0] if variants else None


def _variant_name(name: str, variant: str | None) -> str:
    """transformers' `_add_variant`: the variant goes before the last suffix (`model.fp16.safetensors`)."""
    if variant is None:
        return name
    stem, suffix = name.rsplit(".", 1)
    return f"{stem}.{variant}.{suffix}"


def _sharded(index_path: Path, present: list[str]) -> WeightFiles:
    index = read_json(index_path, "safetensors index", error=WeightFileError)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
        raise WeightFileError(
            f"{index_path} has no weight_map (tensor name -> shard file); it is damaged. Save the folder again."
        )
    missing = sorted(set(weight_map.values()) - set(present))
    if missing:
        raise WeightFileError(
            f"{index_path} names {len(missing)} shard file(s) the folder does not hold: {missing}. The copy "
            "is incomplete (an interrupted download or copy): copy the whole folder again."
        )
    folder = index_path.parent
    files = {name: folder / shard for name, shard in weight_map.items()}
    shapes: dict[str, tuple[int, ...]] = {}
    for shard in sorted(set(weight_map.values())):
        held = _header(folder / shard)
        for name in (n for n, f in weight_map.items() if f == shard):
            if name not in held:
                raise WeightFileError(
                    f"{index_path} puts tensor '{name}' in {shard}, which does not hold it. The shards do not "
                    "belong to this index: copy the whole folder again."
                )
            shapes[name] = held[name]
    return WeightFiles(index_path, files, shapes)


def _header(weights_path: Path) -> dict[str, tuple[int, ...]]:
    from safetensors import safe_open

    try:
        with safe_open(str(weights_path), framework="pt", device="cpu") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as err:  # SafetensorError, OSError, ValueError, ...: all mean "unreadable"
        raise unreadable_error(weights_path, err) from err


def unreadable_error(weights_path: Path, err: Exception) -> WeightFileError:
    return WeightFileError(
        f"{weights_path} is not a readable safetensors file ({type(err).__name__}: {err}). It is "
        "probably truncated or corrupted (an interrupted copy or download); copy or save it again."
    )
