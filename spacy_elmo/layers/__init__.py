"""Thinc layers of spacy_elmo: the frozen biLM, the listener and the trainable scalar mix."""

from __future__ import annotations

import warnings
from typing import Any

from .elmo_model import build_elmo_model
from .feature_dropout import ElmoFeatureDropout
from .listener import ElmoListener
from .scalar_mix import ScalarMixLayer

__all__ = ["ElmoFeatureDropout", "ElmoListener", "ScalarMixLayer", "build_elmo_model"]


def __getattr__(name: str) -> Any:
    # The thinc layer was called ScalarMix, the name of the torch module elmo_core.ScalarMix.
    if name == "ScalarMix":
        warnings.warn(
            "spacy_elmo.layers.ScalarMix was renamed ScalarMixLayer (elmo_core.ScalarMix is the torch "
            "module); import ScalarMixLayer instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return ScalarMixLayer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
