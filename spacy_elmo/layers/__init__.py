"""Thinc layers of spacy_elmo: the frozen biLM, the listener and the trainable scalar mix."""

from __future__ import annotations

from .elmo_model import build_elmo_model
from .listener import ElmoListener
from .scalar_mix import ScalarMix

__all__ = ["ElmoListener", "ScalarMix", "build_elmo_model"]
