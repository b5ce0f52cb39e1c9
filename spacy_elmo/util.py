"""The ELMo annotations on a Doc: the extensions, the mix, and restoring them after serialisation.

`doc._.elmo_layers` records its tokens, and reads as None after they change. The
similarity hooks exist because spaCy's `Token.similarity` returns 1.0 for two tokens of
the same text.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
from spacy.tokens import Doc, Span, Token

from elmo_core.face_api import softmax_weights, weighted_layer_sum

from .layers.scalar_mix import SCALAR_MIX_NAME

if TYPE_CHECKING:
    from spacy.language import Language

__all__ = [
    "ScalarMixWeights",
    "get_scalar_mix_weights",
    "install_extensions",
    "mix_layers",
    "restore_docs",
    "set_similarity_hooks",
    "similarity",
]

EXTENSIONS = ("elmo_layers", "elmo_mix")
# Where spaCy keeps a plain extension's value. spaCy's stub types `Doc.user_data` as keyed by str, but
# spaCy keys every extension's value by such a tuple (spacy/tokens/underscore.py): hence the ignores.
_LAYERS_KEY = ("._.", "elmo_layers", None, None)
_TOKENS_KEY = ("._.", "elmo_layers_tokens", None, None)  # (start char, length) of each token then


class ScalarMixWeights(NamedTuple):
    """A scalar mix as numbers: `gamma * sum_k normalized_weights[k] * layer_k`.

    Attributes:
        scalar_weights: w, float32 [n_layers + 1], before the softmax.
        normalized_weights: softmax(w), float32 [n_layers + 1]. Index 0 is the char CNN layer.
        gamma: the scale.
    """

    scalar_weights: np.ndarray
    normalized_weights: np.ndarray
    gamma: float


def install_extensions() -> None:
    """Register `Doc._.elmo_layers` and `Doc._.elmo_mix`. Idempotent."""
    if not Doc.has_extension("elmo_mix"):
        Doc.set_extension("elmo_mix", default=None)
    if Doc.get_extension("elmo_layers") != (None, None, _get_layers, _set_layers):
        Doc.set_extension("elmo_layers", getter=_get_layers, setter=_set_layers, force=True)


def _token_spans(doc: Doc) -> np.ndarray:
    return np.array([(t.idx, len(t.text)) for t in doc], dtype="int64").reshape(len(doc), 2)


def _set_layers(doc: Doc, layers: np.ndarray | None) -> None:
    doc.user_data[_LAYERS_KEY] = layers  # type: ignore[index]  # tuple keys: see _LAYERS_KEY
    doc.user_data[_TOKENS_KEY] = None if layers is None else _token_spans(doc)  # type: ignore[index]


def _aligned_rows(doc: Doc, layers: np.ndarray) -> np.ndarray | None:
    recorded = doc.user_data.get(_TOKENS_KEY)  # type: ignore[call-overload]  # tuple keys: see _LAYERS_KEY
    current = _token_spans(doc)
    if recorded is None:  # a Doc stored before tokens were recorded
        return layers if layers.shape[1] == len(doc) else None
    recorded = np.asarray(recorded, dtype="int64").reshape(-1, 2)
    if recorded.shape == current.shape and (recorded == current).all():
        return layers
    return None


def _get_layers(doc: Doc) -> np.ndarray | None:
    layers = doc.user_data.get(_LAYERS_KEY)  # type: ignore[call-overload]  # tuple keys: see _LAYERS_KEY
    if layers is None:
        return None
    rows = _aligned_rows(doc, layers)
    if rows is None:
        warnings.warn(
            f"doc._.elmo_layers were computed for other tokens than this Doc's {len(doc)} (its tokens "
            "changed after the elmo component ran: doc.retokenize(), Doc.from_docs, ...), so they are "
            "dropped (None) rather than misaligned. Recompute them by running the Doc through the "
            "pipeline's elmo component again: nlp.get_pipe('elmo')(doc).",
            UserWarning,
            stacklevel=3,
        )
    return rows


def mix_layers(layers: np.ndarray, mix: np.ndarray) -> np.ndarray:
    """`gamma * sum_k s_k * layers[k]`, bit for bit as the component computes `doc.tensor`.

    Args:
        layers: float32 [n_layers + 1, tokens, dim].
        mix: float32 [n_layers + 2]: s, then gamma (the layout of `doc._.elmo_mix`).

    Returns:
        float32 [tokens, dim].
    """
    if mix.shape != (layers.shape[0] + 1,):
        raise ValueError(
            f"mix must hold one weight per layer plus gamma ({layers.shape[0] + 1} values) for "
            f"layers of shape {tuple(layers.shape)}; got shape {tuple(mix.shape)}."
        )
    weights, gamma = mix[:-1].astype("float32"), np.float32(mix[-1])
    return weighted_layer_sum(layers, weights, gamma).astype("float32", copy=False)  # the core's formula


def set_similarity_hooks(doc: Doc) -> None:
    """Make `doc`, its spans and tokens compare by the cosine of their ELMo vectors."""
    doc.user_hooks["similarity"] = similarity
    doc.user_span_hooks["similarity"] = similarity
    doc.user_token_hooks["similarity"] = similarity


def similarity(obj: Doc | Span | Token, other: Doc | Span | Token) -> float:
    """Cosine similarity of `obj.vector` and `other.vector` (0.0 if either is all zeros)."""
    a = np.asarray(obj.vector, dtype="float32")
    b = np.asarray(other.vector, dtype="float32")
    if a.shape != b.shape:
        raise ValueError(
            f"cannot compare vectors of different widths ({a.shape} and {b.shape}); compare "
            "objects annotated by the same ELMo pipeline."
        )
    norm = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    if norm == 0.0:
        warnings.warn(
            f"similarity of {obj!r} and {other!r}: one of them has an empty or all-zero vector "
            "(an empty Doc, or whitespace only); returning 0.0.",
            UserWarning,
            stacklevel=2,
        )
        return 0.0
    return float(np.dot(a, b) / norm)


def restore_docs(docs: Iterable[Doc]) -> int:
    """Give deserialised Docs back `doc.tensor` and the similarity hooks.

    For Docs of `nlp.pipe(texts, n_process=N)`, `Doc.from_bytes` and `DocBin.get_docs`.
    The tensor is rebuilt bit for bit from the layers and the mix.

    Returns:
        How many Docs were restored.

    Warns:
        UserWarning: once, for Docs without ELMo layers (a DocBin without `store_user_data`).
    """
    install_extensions()
    restored, missing, changed = 0, 0, 0
    for doc in docs:
        stored, mix = doc.user_data.get(_LAYERS_KEY), doc._.elmo_mix  # type: ignore[call-overload]  # see _LAYERS_KEY
        layers = None if stored is None else _aligned_rows(doc, stored)
        if stored is not None and layers is None:
            changed += 1
            continue
        if layers is None or mix is None:
            missing += 1
            continue
        doc.tensor = mix_layers(np.asarray(layers, dtype="float32"), np.asarray(mix, dtype="float32"))
        set_similarity_hooks(doc)
        restored += 1
    if missing:
        warnings.warn(
            f"{missing} Doc(s) carry no ELMo layers (doc._.elmo_layers), so their doc.tensor could "
            "not be restored and their vectors are not ELMo's. Store Docs with "
            "DocBin(store_user_data=True), or run them through the pipeline again.",
            UserWarning,
            stacklevel=2,
        )
    if changed:
        warnings.warn(
            f"{changed} Doc(s) had their tokens changed after the elmo component ran (doc.retokenize(), "
            "Doc.from_docs, ...), so their ELMo layers no longer fit their tokens and doc.tensor was not "
            "restored. Run them through the pipeline's elmo component again: nlp.get_pipe('elmo')(doc).",
            UserWarning,
            stacklevel=2,
        )
    return restored


def get_scalar_mix_weights(nlp: Language, name: str, index: int = 0) -> ScalarMixWeights:
    """The scalar mix a component learned, or the one the `elmo` component uses for `doc.tensor`.

    Args:
        nlp: The pipeline.
        name: A component name, e.g. "ner" or "elmo".
        index: Which mix, in `model.walk()` order.

    Raises:
        ValueError: if the component has no ELMo scalar mix, or it is not initialised.
    """
    component = nlp.get_pipe(name)
    if hasattr(component, "mix_weights") and hasattr(component, "listener_map"):
        return component.mix_weights
    model = getattr(component, "model", None)
    mixes = [node for node in model.walk() if node.name == SCALAR_MIX_NAME] if model is not None else []
    if not mixes:
        raise ValueError(
            f"component {name!r} has no ELMo scalar mix: its model uses neither "
            "spacy-elmo.ElmoListener.v2 nor spacy-elmo.Tok2VecElmo.v2."
        )
    if not 0 <= index < len(mixes):
        raise ValueError(f"component {name!r} has {len(mixes)} ELMo scalar mix(es); got index {index}.")
    mix = mixes[index]
    if not (mix.has_param("W") and mix.has_param("gamma")):
        raise ValueError(f"the ELMo scalar mix of {name!r} is not initialised yet; call nlp.initialize() first.")
    w = np.asarray(mix.ops.to_numpy(mix.get_param("W")), dtype="float32")
    gamma = float(mix.ops.to_numpy(mix.get_param("gamma"))[0])
    normalized = softmax_weights(torch.from_numpy(w.copy())).numpy()
    return ScalarMixWeights(w.copy(), normalized, gamma)
