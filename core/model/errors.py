"""Exceptions raised by `elmo_core`.

Every error says what was expected, what arrived and how to fix it. All of them are
`ValueError`s, so code that already catches bad arguments keeps working.
"""

from __future__ import annotations

__all__ = ["ElmoError", "OptionsError", "WeightFileError"]


class ElmoError(ValueError):
    """Base class of the errors raised by `elmo_core`."""


class OptionsError(ElmoError):
    """The biLM options are inconsistent, incomplete or of the wrong type."""


class WeightFileError(ElmoError):
    """A weight file (bilm-tf hdf5, safetensors) or model folder cannot be used.

    The message names the file and, for a dataset or tensor, its name and both shapes.
    """
