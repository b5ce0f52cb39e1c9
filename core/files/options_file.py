"""Reading a bilm-tf `options.json` file into `BiLMOptions`."""

from __future__ import annotations

import os
from pathlib import Path

from ..model.errors import OptionsError
from ..model.options import BiLMOptions
from .text_files import read_json

__all__ = ["read_options"]


def read_options(path: str | os.PathLike[str]) -> BiLMOptions:
    """Read a bilm-tf `options.json` file (the original's hyperparameter file, docs/bilm_tf.md §10).

    Returns:
        The options, with keys this project does not use kept in `extra`.

    Raises:
        OptionsError: if the file is missing, not UTF-8 or not JSON, or lacks a required key.
    """
    path = Path(path)
    data = read_json(path, "options file", error=OptionsError)
    try:
        return BiLMOptions.from_dict(data)
    except OptionsError as err:
        raise OptionsError(f"{path}: {err}") from None
