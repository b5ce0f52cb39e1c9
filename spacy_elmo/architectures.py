"""Registered, versioned model architectures. Once released, a `.vN` never changes.

    spacy-elmo.ElmoLayers.v2    Docs -> every biLM layer      (the `elmo` component's model)
    spacy-elmo.ElmoListener.v2  Docs -> token vectors, from the shared `elmo` component
    spacy-elmo.Tok2VecElmo.v2   Docs -> token vectors, with a biLM of its own

Each architecture is one name with its versions: `spacy-elmo.ElmoLayers.vN` is built by
`ElmoLayers_vN` here, which calls `build_elmo_layers` in `layers/elmo_layers.py`, whose thinc
node is called "elmo_layers" (as spacy-transformers' `TransformerModel.vN` comes from
`layers/transformer_model.py`). No other name is registered for it. hf_elmo's `ElmoModel` is
the Hugging Face model, an unrelated thing.

The two tok2vec architectures are the same composition with a different source of
layers (ELMo as the paper adds it to an existing model, section 3.3):

    layers (listener or own biLM) -> ScalarMixLayer (trainable w, gamma) -> Dropout
                                     (optional L2 on w)             (optional rate of its own)
        [-> concatenate with a standard spaCy tok2vec, e.g. spacy.HashEmbedCNN.v2]
        [-> Maxout to `width`]

`nlp.replace_listeners("elmo", "ner", [path])` turns the first into the second, with
`path` the listener's place in the NER's config ("model.tok2vec" when it wraps a whole
tok2vec, "model.tok2vec.embed" when it is the embed of a `spacy.Tok2Vec.v2`): the listener
is swapped for a copy of the `elmo` component's biLM, and the trained mix, tok2vec and
projection stay as they are, so predictions do not change.
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

    The default model of the `elmo` component. Nothing is read when the model is built.
    The biLM is loaded when the pipeline is initialised (or first used), and a saved
    pipeline carries it in its own files.

    Windows: a unit (a sentence, or a Doc without sentence boundaries) longer than
    `window_tokens` is read in overlapping windows, so one 100,000-token Doc does not
    become one 100,000-step biLM pass. Cache: the biLM is frozen, so the layers of a
    sentence never change. Training a downstream component for several epochs shows it
    the same sentences again and again. With a cache, the biLM runs on each distinct
    sentence once, and later epochs (and the dev evaluations) read the stored layers.
    The Docs get the same numbers as without the cache (up to the float32 rounding of
    batching, about 1e-6) and their own copies, so nothing a Doc's owner does can change
    the cache.

    path (str): A model folder (config.json + model.safetensors). Leave empty with
        `options`/`weights` empty too for the default model that ships with the package.
    options (str): bilm-tf's options.json, for the original files; goes with `weights`.
    weights (str): bilm-tf's hdf5 weights; goes with `options`.
    max_batch_tokens (int): Padded positions per biLM batch (sentences are sorted by
        length first). 4096 is about 0.3 GB of LSTM activations for the original model.
        Lower it on a small machine; raise it on a GPU. A sentence longer than the
        budget gets a batch of its own.
    per_sentence (bool): Run the biLM on each sentence when the Doc has sentence
        boundaries (ELMo was trained on sentences). Leave on. Without boundaries the
        whole Doc is one sequence.
    window_tokens (int): A sentence (or boundary-less Doc) longer than this is read in
        overlapping windows of this many tokens, so a 100,000-token Doc needs no more
        memory than a few windows. 1024 (the default) reads any real sentence and a
        600-token paragraph whole; units no longer than the window are never affected.
        0 reads every unit whole, however long (memory then grows with the longest
        unit). Vectors near a cut differ a little from a whole-Doc run; see
        `elmo_core.runtime.windows` and the README.
    window_context (int | None): Tokens of context on each side of a window's kept
        tokens. null (default) = window_tokens // 8. Leave unset.
    cache_bytes (int): Memory for cached layers, in bytes; the least recently used sentence
        goes first when it is full. 0 (the default) caches nothing. A token costs (n_layers
        + 1) * dim * 4 bytes: 3 KB with the default model, 12 KB with the original, so
        CoNLL-2003 train + dev (255k tokens) takes 0.8 GB with the default model. Size it to
        the training and dev data when they fit in memory; a smaller budget still helps, a
        larger one costs nothing until it is used. Only for training and repeated
        evaluation: a pipeline that annotates new text once gains nothing from it. A
        sentence read in windows is cached whole, once all its windows are read.
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

    Use it as the `tok2vec` of a downstream component (NER, tagger, ...). It reads the
    frozen biLM layers the `elmo` component computed, mixes them with a scalar mix of
    its own (weights w and scale gamma, starting at the plain average; read them after
    training with `spacy_elmo.util.get_scalar_mix_weights(nlp, "ner")`), and, as the
    paper does, concatenates them with the component's usual token representation.
    Dropout on the mixed vectors follows `[training] dropout` unless `dropout` is set.

    Where the vectors enter is set by what it wraps. With `tok2vec` a whole tok2vec
    (embeddings and CNN encoder), ELMo joins the encoder's output. As the `embed` of a
    `spacy.Tok2Vec.v2`, with `tok2vec` the embeddings (`spacy.MultiHashEmbed.v2`) and
    `width` the encoder's width, ELMo joins the embeddings and spaCy's CNN encoder reads
    it: the paper's main recipe ([x_k; ELMo_k] into the task's contextual encoder).

    upstream (str): The name of the `elmo` component to listen to ("*" for any). Leave
        at "elmo" unless you named it differently.
    tok2vec (Model | None): A standard spaCy tok2vec to concatenate with, e.g.
        `spacy.HashEmbedCNN.v2` (width 96, depth 4). None gives ELMo vectors alone.
    width (int | None): Project the concatenation to this width with a Maxout layer.
        Leave unset (null) for NER, parser and tagger, whose own input layer projects;
        set it when the downstream model needs a fixed width. The output is otherwise
        2 * projection_dim (+ the tok2vec's width).
    dropout (float | None): Dropout rate on the mixed ELMo vectors, fixed for this
        listener whatever `[training] dropout` says ("a moderate amount of dropout to
        ELMo"). null follows `[training] dropout`.
    mix_l2 (float): lambda of the penalty lambda * ||w||^2 on the mix's weights before
        the softmax, which keeps the mix close to the average of the layers (the
        paper's regularisation of the ELMo weights). 0 adds nothing. It comes on top of
        the optimizer's own L2 (`[training.optimizer] L2`), which decays every weight.
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

    The same as `spacy-elmo.ElmoListener.v2`, but the component owns its biLM (a
    `spacy-elmo.ElmoLayers.v2` block) instead of reading the shared `elmo` component.
    `nlp.replace_listeners` produces this architecture. It costs a biLM per consumer.
    With several consumers, share one `elmo` component through listeners instead.

    elmo (Model): A `spacy-elmo.ElmoLayers.v2` block (the biLM and where it comes from).
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
