"""The code files of a saved model folder: self-contained copies of hf_elmo's three modules.

A folder written by `save_pretrained` holds what a transformers model folder holds:

    config.json              bilm-tf options + Elmo settings + auto_map
    model.safetensors        the weights
    tokenizer_config.json    the character-id settings + auto_map
    configuration_elmo.py    ElmoConfig
    modeling_elmo.py         ElmoPreTrainedModel, ElmoModel, ElmoForTokenClassification
    tokenization_elmo.py     ElmoTokenizer

so that `AutoModel.from_pretrained(folder, trust_remote_code=True)` works where
elmo-bilm is not installed. The three `.py` files are not hf_elmo's own modules (those
import `elmo_core`), but the files in this folder, written by `generate.py` in the way
of transformers' "modular" models: each is its hf_elmo module with the `elmo_core`
definitions it uses (`BiLM`, `ScalarMix`, `BiLMOptions`, ...) inlined, copied from the
core's source, so that the folder needs only torch and transformers (and spaCy for
raw text). `modeling_elmo.py` takes the definitions it shares with the configuration
from `.configuration_elmo` (a relative import: transformers copies and loads it with
the file), so a loaded model and its config agree on one `BiLMOptions`;
`tokenization_elmo.py` imports no sibling, because a tokenizer is often saved alone.

hf_elmo's modules stay the one source: they import `elmo_core` like every other user
of the core, and the generated files are committed beside this module and checked by
`tests/hf_elmo/test_remote_code.py`, which fails, naming the command
(`python -m hf_elmo.remote_code.generate`), whenever a change to hf_elmo or to a core
definition they inline has not been regenerated. A loaded folder always runs its own
code, whatever version of elmo-bilm is installed beside it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["GENERATED_DIR", "GENERATED_FILES", "save_generated_code"]

GENERATED_DIR = Path(__file__).resolve().parent
"""Where the committed generated files live (this package)."""

GENERATED_FILES = ("configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py")
"""The code files a saved folder can hold, named as transformers expects."""


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
