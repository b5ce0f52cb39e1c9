"""Plug-ins found through entry points, so that the core imports no framework.

`spacy_elmo` registers tokenizers (`elmo_core.tokenizers`), `hf_elmo` a converter (`elmo_core.converters`).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from ..model.errors import ElmoError


def plugin_names(group: str) -> list[str]:
    """Names registered in an entry-point group."""
    return sorted(ep.name for ep in entry_points(group=group))


def load_plugin(group: str, name: str, install_hint: str) -> Any:
    """Load the object registered as `name` in `group`.

    Raises:
        ElmoError: if nothing of that name is installed, or it needs a missing package.
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
