"""The code files of a saved model folder: self-contained copies of hf_elmo's three modules.

A folder written by `save_pretrained` holds what a transformers model folder holds:

    config.json              bilm-tf options + Elmo settings + auto_map
    model.safetensors        the weights
    tokenizer_config.json    the character-id settings + auto_map
    configuration_elmo.py    ElmoConfig
    modeling_elmo.py         ElmoPreTrainedModel, ElmoModel, ElmoForTokenClassification,
                             ElmoForSequenceClassification
    tokenization_elmo.py     ElmoTokenizer
    elmo_reference.py        the plain ELMo forward and the core helpers the three import

so that `AutoModel.from_pretrained(folder, trust_remote_code=True)` works where
elmo-bilm is not installed. The three HF files are hf_elmo's own modules copied whole
by `generate.py`, as transformers' modular converter copies a model file: their imports
of `elmo_core` read `elmo_reference.py` instead, and their function docstrings stay
here. `elmo_reference.py` is hand-written: the core's plain forward (no fast paths),
with the runtime's parts as no-ops. Tests check its vectors against the core's and
fail, naming `python -m hf_elmo.remote_code.generate`, when a copy is stale.

Which code a loaded folder runs (transformers' rule, `auto_factory.py` and
`configuration_auto.py`: a class registered in this process takes precedence over a
folder's `auto_map`, even with `trust_remote_code=True`):

- in a process that imported `hf_elmo` (which registers its classes), every folder runs
  the installed hf_elmo, whatever version saved it;
- elsewhere, `trust_remote_code=True` runs the folder's own files.

The config records the `elmo_bilm_version` that saved it. When the installed classes
load a folder saved by another version, or whose code files differ from this
installation's, `note_which_code_runs` logs one warning per folder saying which code
runs; the folder format is the same, so the vectors are too, unless the two versions
compute them differently.
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
from elmo_core.face_api import atomic_folder

__all__ = [
    "ELMO_BILM_VERSION",
    "GENERATED_DIR",
    "GENERATED_FILES",
    "note_which_code_runs",
    "save_atomically",
    "save_generated_code",
]

logger = logging.getLogger("hf_elmo")

GENERATED_DIR = Path(__file__).resolve().parent
"""Where the committed generated files live (this package)."""

GENERATED_FILES = ("configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py", "elmo_reference.py")
"""The code files a saved folder can hold: hf_elmo's three modules, named as transformers expects, and the
plain model they import (`elmo_reference.py`)."""


def save_generated_code(folder: str | os.PathLike, *names: str) -> list[Path]:
    """Copy generated code files into a model folder, replacing what transformers copied.

    Called by the `save_pretrained` of `ElmoConfig`, `ElmoPreTrainedModel` and
    `ElmoTokenizer` after transformers has written `auto_map` and copied hf_elmo's own
    module files (which import elmo_core) under the same names.

    Args:
        folder: The model folder.
        *names: File names from `GENERATED_FILES`.

    Returns:
        The paths written.

    Raises:
        ValueError: for a name that is not a generated file.
    """
    written = []
    for name in names:
        if name not in GENERATED_FILES:
            raise ValueError(f"{name!r} is not a generated code file; choose from {GENERATED_FILES}.")
        target = Path(folder) / name
        shutil.copyfile(GENERATED_DIR / name, target)
        written.append(target)
    return written


_SHARD = re.compile(r"(?P<stem>.+)-\d{5}-of-\d{5}\.safetensors")


def save_atomically(save: Callable[..., Any], folder: str | os.PathLike, *code: str) -> Callable[..., Any]:
    """`save` (a transformers `save_pretrained`), writing every file through the core's atomic writer.

    transformers writes config.json, tokenizer_config.json and the code files in place, so
    a save into a folder of links (the Hugging Face cache's snapshots) would change the
    files the links point to. The save goes to a temporary folder inside `folder` whose
    files then replace their names in `folder` (`elmo_core.files.atomic_files.atomic_folder`).
    `code` names the generated code files to add (`save_generated_code`). As transformers
    does, shards of an earlier save that this save did not write are deleted.

    Returns:
        A function of `save`'s arguments (the folder first), returning what `save` returns
        with the paths in `folder`.
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

    Called by the installed `ElmoConfig` and `ElmoPreTrainedModel` when they load a local
    folder (AutoConfig, AutoModel, AutoModelForTokenClassification, `pipeline(...)`):
    that they run at all means this installation's code runs, not the folder's (see the
    module docstring). A folder counts as saved by other code when its config.json
    records another `elmo_bilm_version`, or one of its `*_elmo.py` files differs from the
    generated file this installation would write. Anything else (a Hub id, a folder
    without code files saved by this version) is silent.

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
