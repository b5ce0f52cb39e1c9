"""The version of elmo-bilm, the one source (pyproject.toml reads it)."""

from __future__ import annotations

__version__ = "0.1.0"
