"""Thinc layers of spacy_elmo: the frozen biLM, the listener and the trainable scalar mix."""

from __future__ import annotations

from .elmo_layers import build_elmo_layers
from .feature_dropout import ElmoFeatureDropout
from .listener import ElmoListener
from .scalar_mix import ScalarMixLayer

__all__ = ["ElmoFeatureDropout", "ElmoListener", "ScalarMixLayer", "build_elmo_layers"]
