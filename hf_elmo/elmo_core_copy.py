"""Placeholder for the re-exports that `save_pretrained` writes into a model folder.

In a saved folder, `elmo_core_copy.py` re-exports elmo_core's public names from the
copies of elmo_core's source files saved beside it; `elmo_core_bridge` falls back to it
when the elmo-bilm package is not installed. See `elmo_core_bridge` for why.

Inside the installed package elmo_core is always importable, so this placeholder is
never imported; it exists because transformers copies a module's relative imports when
it saves the module, and so needs a file of this name here.
"""

from __future__ import annotations

raise ImportError(
    "hf_elmo.elmo_core_copy is a placeholder for the copy of elmo_core saved into model "
    "folders; import elmo_core (pip install elmo-bilm) instead."
)
