"""The version of elmo-bilm (as pyproject.toml's), recorded in every saved model folder."""

from __future__ import annotations

__version__ = "0.1.0"
