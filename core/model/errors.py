"""Exceptions raised by `elmo_core`.

Every error says what was expected, what arrived and how to fix it. All of them are
`ValueError`s, so code that already catches bad arguments keeps working.
"""

from __future__ import annotations

import errno

__all__ = ["ElmoError", "OptionsError", "WeightFileError"]


class ElmoError(ValueError):
    """Base class of the errors raised by `elmo_core`."""


class OptionsError(ElmoError):
    """The biLM options are inconsistent, incomplete or of the wrong type."""


class WeightFileError(ElmoError):
    """A weight file (bilm-tf hdf5, safetensors) or model folder cannot be used.

    The message names the file and, for a dataset or tensor, its name and both shapes.
    """


class SettingError(ValueError):
    """A setting (a function's argument, a settings field) has a value it cannot take.

    `names` are the settings the message names, spelled as in Python (`batch_size`), so
    that a face can name them as its users typed them (`elmo embed --batch-size`).
    """

    def __init__(self, message: str, *names: str) -> None:
        super().__init__(message)
        self.names = names


def missing_extra(err: ImportError, package: str, extra: str, what: str) -> ImportError:
    """What to raise for `err`, met where `what` imports `package`: if `package` itself is
    not installed, an ImportError that names the extra of elmo-bilm which installs it
    (`pip install 'elmo-bilm[hf]'`); else `err` itself (a module `package` needs is missing).
    """
    if (err.name or "").split(".")[0] != package:
        return err
    label = {"spacy": "spaCy"}.get(package, package)
    return ImportError(f"{what} needs {label}, which is not installed: pip install 'elmo-bilm[{extra}]'", name=package)


class DiskFullError(ElmoError, OSError):
    """A file system filled up: the message says which file, how much was needed and was free.

    Also an `OSError` (errno ENOSPC), as the failed write was.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.errno = errno.ENOSPC
