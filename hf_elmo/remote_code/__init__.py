"""The code files a saved model folder carries, and what the installed hf_elmo does instead of them.

A folder saved by `save_pretrained` holds `configuration_elmo.py`, `modeling_elmo.py` and
`tokenization_elmo.py`, hf_elmo's modules copied whole by `generate.py`, and the hand-written
plain model they import (`elmo_reference.py`, `elmo_reference_runtime.py`). So it loads with
`trust_remote_code=True` where elmo-bilm is not installed. In a process that imported hf_elmo,
the installed classes run instead (transformers' rule: a registered class takes precedence over
a folder's `auto_map`). The helpers here are theirs. The folder's reference files stand in
for them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from elmo_core import __version__ as ELMO_BILM_VERSION
from elmo_core.face_api import atomic_folder, check_model_folder, folder_variant

from .elmo_reference_runtime import read_as_the_core_reads as _sizes_checked  # a folder's plain check

__all__ = [
    "ELMO_BILM_VERSION",
    "GENERATED_DIR",
    "GENERATED_FILES",
    "note_which_code_runs",
    "read_as_the_core_reads",
    "save_atomically",
    "save_generated_code",
]

logger = logging.getLogger("hf_elmo")

GENERATED_DIR = Path(__file__).resolve().parent
"""Where the committed generated files live (this package)."""

_REFERENCE_FILES = ("elmo_reference.py", "elmo_reference_runtime.py")
GENERATED_FILES = (
    "configuration_elmo.py",
    "modeling_elmo.py",
    "tokenization_elmo.py",
    "encoding_elmo.py",
    *_REFERENCE_FILES,
)
"""The code files a saved folder can hold."""


def save_generated_code(folder: str | os.PathLike, *names: str) -> list[Path]:
    """Copy generated code files, and the reference files they import, into a model folder.

    They replace the hf_elmo modules transformers copied there, which import elmo_core.

    Args:
        folder: The model folder.
        *names: File names from `GENERATED_FILES`.

    Returns:
        The paths written.

    Raises:
        ValueError: for a name that is not a generated file.
    """
    written = []
    for name in dict.fromkeys([*names, *_REFERENCE_FILES]):
        if name not in GENERATED_FILES:
            raise ValueError(f"{name!r} is not a generated code file; choose from {GENERATED_FILES}.")
        target = Path(folder) / name
        shutil.copyfile(GENERATED_DIR / name, target)
        written.append(target)
    return written


_SHARD = re.compile(r"(?P<stem>.+)-\d{5}-of-\d{5}\.safetensors")


def save_atomically(save: Callable[..., Any], folder: str | os.PathLike, *code: str) -> Callable[..., Any]:
    """`save` (a transformers `save_pretrained`), writing every file through the core's atomic writer.

    transformers writes in place, so a save into a folder of links (the Hub cache) would change
    the files they point to. Each file is written whole, then renamed into place (`atomic_folder`).
    `code` names the generated code files to add. Shards of an earlier save are deleted, as
    transformers does.

    Returns:
        A function of `save`'s arguments (the folder first), returning what `save` returns.
    """

    def saved(target: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("push_to_hub"):
            kwargs.setdefault("repo_id", Path(target).name)  # transformers names the repo after the folder
        with atomic_folder(target) as staging:
            result = save(staging, *args, **kwargs)
            if code and kwargs.get("is_main_process", True):
                save_generated_code(staging, *code)
            written = {p.name for p in staging.iterdir()}
        for old in Path(target).iterdir():
            match = _SHARD.fullmatch(old.name)
            if (
                match
                and old.name not in written
                and any(n.startswith(match["stem"]) and n.endswith(".safetensors") for n in written)
            ):
                old.unlink()
        if isinstance(result, tuple):  # a tokenizer's saved files
            return tuple(os.path.join(target, os.path.relpath(f, staging)) for f in result)
        return result

    return saved


_TOLD: set[tuple[str, tuple[str, ...], str | None]] = set()  # folders already told about
_TOLD_LOCK = threading.Lock()


def note_which_code_runs(folder: object) -> bool:
    """Log, once per folder, that the installed hf_elmo runs a folder saved by other code.

    Other code: config.json records another `elmo_bilm_version`, or a code file differs from
    this installation's. A Hub id, or a folder saved by this version, is silent.

    Args:
        folder: What `from_pretrained` was given.

    Returns:
        True if this call logged the warning.
    """
    if not isinstance(folder, (str, os.PathLike)) or not os.path.isdir(folder):
        return False
    path = Path(folder).resolve()
    differing = tuple(
        name
        for name in GENERATED_FILES
        if (path / name).is_file() and (path / name).read_bytes() != (GENERATED_DIR / name).read_bytes()
    )
    try:
        recorded = json.loads((path / "config.json").read_text(encoding="utf-8")).get("elmo_bilm_version")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if not differing and recorded in (None, ELMO_BILM_VERSION):
        return False
    key = (str(path), differing, recorded)
    with _TOLD_LOCK:
        if key in _TOLD:
            return False
        _TOLD.add(key)
    saved_by = f"elmo-bilm {recorded}" if recorded else "another version of elmo-bilm (none recorded)"
    files = f"; its {', '.join(differing)} differ from this installation's" if differing else ""
    logger.warning(
        f"{path} was saved by {saved_by}{files}. It runs with the installed elmo-bilm {ELMO_BILM_VERSION} "
        "(hf_elmo), not with the folder's own code: importing hf_elmo registered its classes, and "
        "transformers gives a registered class precedence over a folder's auto_map, even with "
        "trust_remote_code=True. The folder format is the same, so the vectors are too unless the two "
        "versions compute them differently. To run the folder's own code, load it with "
        "trust_remote_code=True in a process that does not import hf_elmo."
    )
    return True


def read_as_the_core_reads(load: Callable[..., Any], source: object, model_class: type) -> Callable[..., Any]:
    """`load` (a model class's transformers `from_pretrained`), reading a local folder as elmo_core reads it.

    The sizes in config.json (or a `config=` given) are checked against the weights' headers
    before anything is allocated. A folder of one variant's weights is read as that variant
    without naming it. A broken folder gets the core's diagnosis (`check_model_folder`), which
    names the file and the fix.
    """
    if not isinstance(source, (str, os.PathLike)) or not os.path.isdir(source):
        return load
    load = _sizes_checked(load, source, model_class)

    def read(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("variant") is None:
            kwargs["variant"] = folder_variant(os.fspath(source))
        if not kwargs.get("ignore_mismatched_sizes"):
            check_model_folder(os.fspath(source), kwargs.get("variant"), sizes_only=True)
        try:
            return load(*args, **kwargs)
        except Exception as err:
            try:
                check_model_folder(os.fspath(source), kwargs.get("variant"))
            except ValueError as problem:  # WeightFileError / OptionsError
                raise problem from err
            raise

    return read
