"""Registered, versioned model architectures. Once released, a `.vN` never changes.

    spacy-elmo.ElmoLayers.v2    Docs -> every biLM layer      (the `elmo` component's model)
    spacy-elmo.ElmoListener.v2  Docs -> token vectors, from the shared `elmo` component
    spacy-elmo.Tok2VecElmo.v2   Docs -> token vectors, with a biLM of its own

The two tok2vec architectures add ELMo to a task model as the paper does (section 3.3):
layers -> trainable scalar mix -> dropout [-> concatenate with a spaCy tok2vec] [-> Maxout].
"""

# No `from __future__ import annotations` here: spaCy builds the registered functions' arguments from their
# annotations, and confection before 1.0 (spaCy 3.7's) cannot resolve them as strings.

from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Dropout, Maxout, Model, chain, concatenate, with_array
from thinc.types import Floats2d, Floats3d

from elmo_core.face_api import DEFAULT_BATCH_TOKENS, DEFAULT_WINDOW_TOKENS, check_int

from .layers.elmo_layers import build_elmo_layers
from .layers.feature_dropout import ElmoFeatureDropout
from .layers.listener import ElmoListener
from .layers.scalar_mix import ScalarMixLayer

__all__ = ["ElmoLayers_v2", "ElmoListener_v2", "Tok2VecElmo_v2"]


@registry.architectures("spacy-elmo.ElmoLayers.v2")
def ElmoLayers_v2(
    path: str = "",
    options: str = "",
    weights: str = "",
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    per_sentence: bool = True,
    window_tokens: int = DEFAULT_WINDOW_TOKENS,
    window_context: int | None = None,
    cache_bytes: int = 0,
) -> Model[list[Doc], list[Floats3d]]:
    """A frozen ELMo biLM: every layer of each Doc, [n_layers + 1, tokens, dim].

    The `elmo` component's model. A saved pipeline carries the biLM in its own files.

    path (str): A model folder. Leave `path`, `options` and `weights` empty for the default model.
    options (str): bilm-tf's options.json, with `weights`.
    weights (str): bilm-tf's hdf5 weights, with `options`.
    max_batch_tokens (int): Padded positions per biLM batch. Lower on a small machine, raise on a GPU.
    per_sentence (bool): Run the biLM on each sentence, as ELMo was trained. Leave on.
    window_tokens (int): Read a longer unit in overlapping windows of this many tokens. 0: whole.
    window_context (int | None): Context tokens each side of a window. Leave unset (window_tokens // 8).
    cache_bytes (int): An LRU cache of each sentence's layers, for training. Size it to the
        training and dev data, at (n_layers + 1) * dim * 4 bytes a token. 0: no cache.
    """
    return build_elmo_layers(
        path, options, weights, max_batch_tokens, per_sentence, window_tokens, window_context, cache_bytes=cache_bytes
    )


@registry.architectures("spacy-elmo.ElmoListener.v2")
def ElmoListener_v2(
    upstream: str = "elmo",
    tok2vec: Model[list[Doc], list[Floats2d]] | None = None,
    width: int | None = None,
    dropout: float | None = None,
    mix_l2: float = 0.0,
) -> Model[list[Doc], list[Floats2d]]:
    """ELMo token vectors from the shared `elmo` component, mixed for this component.

    The `tok2vec` of a downstream component, with a trainable scalar mix of its own. As the
    `embed` of a `spacy.Tok2Vec.v2`, ELMo joins the embeddings (the paper's main recipe).
    Wrapping a whole tok2vec, it joins the encoder's output.

    upstream (str): The `elmo` component's name ("*" for any). Leave it "elmo".
    tok2vec (Model | None): A spaCy tok2vec or embedding to concatenate with. None: ELMo alone.
    width (int | None): Maxout to this width. Set it for an `embed`. Leave it unset for NER,
        parser and tagger.
    dropout (float | None): Dropout on the mixed ELMo vectors. null follows `[training] dropout`.
    mix_l2 (float): lambda of a penalty lambda * ||w||^2 that keeps the mix near the average
        of the layers (paper section 3.3). 0: none.
    """
    return _mix_and_concatenate(ElmoListener(upstream), tok2vec, width, dropout=dropout, mix_l2=mix_l2)


@registry.architectures("spacy-elmo.Tok2VecElmo.v2")
def Tok2VecElmo_v2(
    elmo: Model[list[Doc], list[Floats3d]],
    tok2vec: Model[list[Doc], list[Floats2d]] | None = None,
    width: int | None = None,
    dropout: float | None = None,
    mix_l2: float = 0.0,
) -> Model[list[Doc], list[Floats2d]]:
    """ELMo token vectors with a frozen biLM of its own, for a single consumer.

    `spacy-elmo.ElmoListener.v2` with a biLM inside, which `nlp.replace_listeners`
    produces. With several consumers, share one `elmo` component instead.

    elmo (Model): A `spacy-elmo.ElmoLayers.v2` block.
    tok2vec, width, dropout, mix_l2: As for `spacy-elmo.ElmoListener.v2`.
    """
    return _mix_and_concatenate(elmo, tok2vec, width, dropout=dropout, mix_l2=mix_l2)


def _mix_and_concatenate(
    layers: Model[list[Doc], list[Floats3d]],
    tok2vec: Model[list[Doc], list[Floats2d]] | None,
    width: int | None,
    *,
    dropout: float | None = None,
    mix_l2: float = 0.0,
) -> Model[list[Doc], list[Floats2d]]:
    check_int("width", width, none_ok=True)
    # Dropout(0.0) takes `[training] dropout` from spaCy at every update.
    drop = Dropout(0.0) if dropout is None else ElmoFeatureDropout(dropout)
    features: Model[list[Doc], list[Floats2d]] = chain(layers, ScalarMixLayer(l2=mix_l2), drop)
    if tok2vec is not None:
        features = concatenate(features, tok2vec)
    if width is not None:
        features = chain(features, with_array(Maxout(nO=width, nP=3, normalize=True)))
    return features
