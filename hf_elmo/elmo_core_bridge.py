"""Where hf_elmo meets elmo_core, and how a saved model folder carries elmo_core's code.

Every hf_elmo module that `save_pretrained` copies into a model folder
(`configuration_elmo.py`, `modeling_elmo.py`, `tokenization_elmo.py`) imports the core
through this one module, never `elmo_core` directly.

Why: a folder loaded with `AutoModel.from_pretrained(path, trust_remote_code=True)` runs
the *folder's* copies of these files, in a process that may not have elmo-bilm
installed (peer report R25: "loads where the product package is not importable").
transformers copies a saved file's relative imports (`from .x import y`) along with it,
both when saving and when loading, and it checks that a file's absolute imports are
installed, except those inside a `try` block. So:

1. The names below come from the installed `elmo_core` when it can be imported: the
   normal case, and the case of a fresh process that has elmo-bilm installed but never
   imported hf_elmo. Loaded models are then made of real `elmo_core` classes.
2. Otherwise they come from `elmo_core_copy`, a module that re-exports the copies of
   elmo_core's own source files that `save_elmo_core_copy` writes into every saved
   folder (unchanged, under their own names: `bilm.py`, `options.py`, ...).

Inside the installed package `elmo_core_copy.py` is only a placeholder (transformers
needs the file to exist when it copies this module's relative imports at save time);
`save_elmo_core_copy` replaces it in the folder with the real re-exports. The copies
import nothing but torch, numpy and the standard library (and safetensors/h5py lazily,
in functions a loaded model does not call), so a saved folder needs only
transformers and torch.
"""

from __future__ import annotations

import ast
import inspect
import shutil
from pathlib import Path

try:  # the installed package (always importable where hf_elmo itself is installed)
    from elmo_core.batching import batches_by_token_budget
    from elmo_core.bilm import BiLM, check_char_ids
    from elmo_core.char_cnn import CharCNN
    from elmo_core.characters import (
        BEGINNING_OF_SENTENCE_CHARACTER,
        BEGINNING_OF_WORD_CHARACTER,
        BOS_TOKEN,
        CHAR_ID_OFFSET,
        END_OF_SENTENCE_CHARACTER,
        END_OF_WORD_CHARACTER,
        EOS_TOKEN,
        PADDING_CHARACTER,
        check_sentences,
        word_to_char_ids,
        words_to_char_ids,
    )
    from elmo_core.elmo import Elmo
    from elmo_core.embedding import DEFAULT_BATCH_TOKENS
    from elmo_core.errors import ElmoError, OptionsError
    from elmo_core.highway import Highway
    from elmo_core.memory import release_free_memory
    from elmo_core.model_folder import ELMO_SETTINGS, check_model_folder, default_model_dir, tokenizer_settings
    from elmo_core.options import BiLMOptions
    from elmo_core.scalar_mix import ScalarMix
    from elmo_core.tokenizers import DEFAULT_TOKENIZER, get_tokenizer
except ImportError:  # a saved model folder, loaded where elmo-bilm is not installed
    from .elmo_core_copy import (  # type: ignore[no-redef]
        BEGINNING_OF_SENTENCE_CHARACTER,
        BEGINNING_OF_WORD_CHARACTER,
        BOS_TOKEN,
        CHAR_ID_OFFSET,
        DEFAULT_BATCH_TOKENS,
        DEFAULT_TOKENIZER,
        ELMO_SETTINGS,
        END_OF_SENTENCE_CHARACTER,
        END_OF_WORD_CHARACTER,
        EOS_TOKEN,
        PADDING_CHARACTER,
        BiLM,
        BiLMOptions,
        CharCNN,
        Elmo,
        ElmoError,
        Highway,
        OptionsError,
        ScalarMix,
        check_char_ids,
        check_model_folder,
        check_sentences,
        default_model_dir,
        get_tokenizer,
        release_free_memory,
        tokenizer_settings,
        word_to_char_ids,
        words_to_char_ids,
    )

__all__ = [
    "BEGINNING_OF_SENTENCE_CHARACTER",
    "BEGINNING_OF_WORD_CHARACTER",
    "BOS_TOKEN",
    "CHAR_ID_OFFSET",
    "CORE_MODULES",
    "DEFAULT_BATCH_TOKENS",
    "DEFAULT_TOKENIZER",
    "ELMO_SETTINGS",
    "END_OF_SENTENCE_CHARACTER",
    "END_OF_WORD_CHARACTER",
    "EOS_TOKEN",
    "PADDING_CHARACTER",
    "BiLM",
    "BiLMOptions",
    "CharCNN",
    "Elmo",
    "ElmoError",
    "Highway",
    "OptionsError",
    "ScalarMix",
    "batches_by_token_budget",
    "check_char_ids",
    "check_model_folder",
    "check_sentences",
    "default_model_dir",
    "get_tokenizer",
    "release_free_memory",
    "save_elmo_core_copy",
    "tokenizer_settings",
    "word_to_char_ids",
    "words_to_char_ids",
]

CORE_MODULES = (
    "batching", "bilm", "char_cnn", "characters", "elmo", "embedding", "errors", "highway",
    "memory", "model_folder", "options", "scalar_mix", "tokenizers",
)
"""The elmo_core modules imported above. Their relative imports are copied too."""

COPY_MODULE = "elmo_core_copy"

_COPY_HEADER = '''"""elmo_core's public names, from the copies of its modules saved beside this file.

Written by hf_elmo's save_pretrained; elmo_core_bridge.py imports from here only when
the elmo-bilm package is not installed. bilm.py, options.py and the other modules named
below are elmo_core's own source files, unchanged; configuration_elmo.py,
modeling_elmo.py, tokenization_elmo.py and elmo_core_bridge.py are hf_elmo's.
"""
'''


def _relative_imports(path: Path) -> set[str]:
    """Sibling modules a file imports with `from .x import ...` or `from . import x`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module)
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 1:
            raise ValueError(f"{path} imports from a parent package; it cannot be copied flat into a model folder.")
    return found


def _public_names(path: Path) -> list[str]:
    """The names in a module's `__all__`, read from its source without importing it."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [ast.literal_eval(element) for element in node.value.elts]  # type: ignore[attr-defined]
    raise ValueError(f"{path} has no __all__; elmo_core modules list their public names in __all__.")


def save_elmo_core_copy(folder: str | Path) -> list[Path]:
    """Copy the elmo_core source files this code needs into a model folder.

    Writes `CORE_MODULES` and every module they import relatively (byte for byte, from
    wherever the running core was imported: the installed package, or the copy a
    folder was itself loaded from), and `elmo_core_copy.py`, which re-exports their
    `__all__`. Called by the `save_pretrained` of `ElmoConfig`, `ElmoPreTrainedModel`
    and `ElmoTokenizer`, after transformers has copied the hf_elmo files.

    Returns:
        The paths written.

    Raises:
        ValueError: if a core module imports from a subpackage (the folder is flat).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    source_dir = Path(inspect.getfile(BiLM)).resolve().parent
    needed: set[str] = set()
    pending = list(CORE_MODULES)
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        path = source_dir / f"{name}.py"
        if not path.is_file():
            raise ValueError(f"elmo_core module {name!r} not found at {path}; cannot save a self-contained folder.")
        needed.add(name)
        pending.extend(_relative_imports(path) - needed)
    written = []
    for name in sorted(needed):
        target = folder / f"{name}.py"
        if (source_dir / f"{name}.py") != target.resolve():
            shutil.copyfile(source_dir / f"{name}.py", target)
        written.append(target)
    lines = [_COPY_HEADER, ""]
    for name in CORE_MODULES:
        lines.append(f"from .{name} import {', '.join(_public_names(source_dir / f'{name}.py'))}")
    copy_path = folder / f"{COPY_MODULE}.py"
    copy_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    written.append(copy_path)
    return written
