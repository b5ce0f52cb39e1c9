"""Exceptions raised by `elmo_core`: `ValueError`s that say what was expected, what arrived and the fix."""

from __future__ import annotations

import errno

__all__ = ["ElmoError", "OptionsError", "WeightFileError"]


class ElmoError(ValueError):
    """Base class of the errors raised by `elmo_core`."""


class OptionsError(ElmoError):
    """The biLM options are inconsistent, incomplete or of the wrong type."""


class WeightFileError(ElmoError):
    """A weight file (bilm-tf hdf5, safetensors) or model folder cannot be used."""


class SettingError(ValueError):
    """A setting has a value it cannot take. `names` lets a face reword them (`--batch-size`)."""

    def __init__(self, message: str, *names: str) -> None:
        super().__init__(message)
        self.names = names


def missing_extra(err: ImportError, package: str, extra: str, what: str) -> ImportError:
    """The error to raise where `what` imports `package`: one naming the extra if `package` is missing, else `err`."""
    if (err.name or "").split(".")[0] != package:
        return err
    label = {"spacy": "spaCy"}.get(package, package)
    return ImportError(f"{what} needs {label}, which is not installed: pip install 'elmo-bilm[{extra}]'", name=package)


class DiskFullError(ElmoError, OSError):
    """A file system filled up: the message says which file, and the space needed and free.

    Also an `OSError` (ENOSPC).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.errno = errno.ENOSPC
