"""spacy_elmo: ELMo for spaCy v3.

    import spacy
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": "path/to/model"}})
    doc = nlp("The river bank was muddy.")
    doc.tensor            # [tokens, dim]: the scalar mix of the biLM layers
    doc._.elmo_layers     # [n_layers + 1, tokens, dim]: every layer

spaCy finds the `elmo` factory, the `spacy-elmo.*` architectures and the corpus reader
through entry points. Importing this package registers `Doc._.elmo_layers` and
`Doc._.elmo_mix`, for Docs loaded without the pipeline.
"""

from __future__ import annotations

from elmo_core.face_api import missing_extra

try:
    import spacy  # noqa: F401 - before the modules that use it, to name the extra if it is missing
except ImportError as err:
    raise missing_extra(err, "spacy", "spacy", "spacy_elmo") from err

from . import architectures, corpus  # noqa: F401, E402 - registers the architectures and the reader
from .pipeline_component import ElmoComponent  # also registers the "elmo" factory
from .util import ScalarMixWeights, get_scalar_mix_weights, restore_docs

__all__ = [
    "ElmoComponent",
    "ScalarMixWeights",
    "get_scalar_mix_weights",
    "restore_docs",
]
