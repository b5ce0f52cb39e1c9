"""ElmoListener and Tok2VecElmo: wiring, replace_listeners, what trains and what stays frozen."""

from __future__ import annotations

import numpy as np
import pytest
import spacy
import torch
from spacy.util import fix_random_seed
from thinc.api import set_dropout_rate

from spacy_elmo import get_scalar_mix_weights
from spacy_elmo.architectures import ElmoListener_v2
from spacy_elmo.layers import ElmoFeatureDropout, ElmoListener, ScalarMixLayer

from .conftest import DIM, NUM_LAYERS, examples, hash_embed_cnn, make_ner_nlp, make_nlp, ner_config

TEXTS = ["Apple is a company in London .", "Mary lives in Paris .", "Bob went to Berlin with Google ."]


def entities(nlp, texts=TEXTS) -> list:
    return [[(e.start, e.end, e.label_) for e in doc.ents] for doc in nlp.pipe(texts)]


def listener_of(nlp, name: str = "ner") -> ElmoListener:
    (listener,) = [n for n in nlp.get_pipe(name).model.walk() if isinstance(n, ElmoListener)]
    return listener


def ner_tok2vec_output(nlp, texts=TEXTS) -> list[np.ndarray]:
    """The NER's token vectors (ELMo mix + hash-embedding CNN), on fresh Docs."""
    docs = [nlp.make_doc(t) for t in texts]
    # The parser's "tok2vec" ref is chain(our tok2vec, list2array, Linear); take ours.
    return nlp.get_pipe("ner").model.get_ref("tok2vec").layers[0].predict(docs)


def bilm_state(elmo) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in elmo.bilm.state_dict().items()}


# ---------------------------------------------------------------- linking
def test_listener_is_linked_and_sized_from_the_upstream(tiny_model_dir):
    nlp = make_ner_nlp(tiny_model_dir, steps=0)
    elmo = nlp.get_pipe("elmo")
    listener = listener_of(nlp)
    assert elmo.listening_components == ["ner"] and elmo.listeners == [listener]
    assert listener.upstream is elmo
    assert listener.get_dim("nO") == DIM and listener.get_dim("nL") == NUM_LAYERS


def test_a_listener_sized_for_another_bilm_is_refused_naming_both_sizes(tiny_model_dir):
    nlp = make_ner_nlp(tiny_model_dir, steps=0)
    listener = listener_of(nlp)
    listener.set_dim("nO", DIM + 2, force=True)  # as if built for a wider biLM
    component = nlp.get_pipe("elmo")
    with pytest.raises(ValueError) as info:
        component._set_listener_dims(listener, component.elmo)
    assert str(info.value) == (
        f"a listener of 'elmo' was set up for nO={DIM + 2} (vector width), but the biLM being loaded has "
        f"nO={DIM}. Retrain the listening component with this ELMo model."
    )
    with pytest.raises(ValueError, match=rf"^this ElmoListener \(upstream 'elmo'\) was set up for nO={DIM + 2} "):
        listener.initialize()


def test_listener_output_shapes(tiny_model_dir):
    nlp = make_ner_nlp(tiny_model_dir, steps=0)
    docs = list(nlp.pipe(["a b c", "d"]))
    layers = listener_of(nlp).predict(docs)
    assert [x.shape for x in layers] == [(NUM_LAYERS, 3, DIM), (NUM_LAYERS, 1, DIM)]
    vectors = nlp.get_pipe("ner").model.get_ref("tok2vec").layers[0].predict(docs)
    assert [v.shape for v in vectors] == [(3, DIM + 32), (1, DIM + 32)]  # ELMo mix ++ HashEmbedCNN


def test_listener_reads_the_docs_layers_or_asks_the_upstream(tiny_model_dir):
    nlp = make_ner_nlp(tiny_model_dir, steps=0)
    listener = listener_of(nlp)
    annotated = list(nlp.get_pipe("elmo").pipe([nlp.make_doc(t) for t in TEXTS]))
    fresh = [nlp.make_doc(t) for t in TEXTS]
    for a, b, doc in zip(listener.predict(annotated), listener.predict(fresh), annotated):
        np.testing.assert_array_equal(a, doc._.elmo_layers)
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def test_training_with_or_without_annotating_elmo_gives_the_same_model(tiny_model_dir):
    fix_random_seed(0)
    annotating = make_ner_nlp(tiny_model_dir, steps=2, annotates=True)
    fix_random_seed(0)
    not_annotating = make_ner_nlp(tiny_model_dir, steps=2, annotates=False)
    for a, b in zip(ner_tok2vec_output(annotating), ner_tok2vec_output(not_annotating)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- replace_listeners
def test_replace_listeners_keeps_predictions_through_removal_and_reload(tiny_model_dir, tmp_path):
    nlp = make_ner_nlp(tiny_model_dir, steps=10)  # enough for varied predictions
    ents_before = entities(nlp)
    assert any(ents_before)
    vectors_before = ner_tok2vec_output(nlp)
    mix_before = get_scalar_mix_weights(nlp, "ner")

    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    tok2vec_cfg = nlp.config["components"]["ner"]["model"]["tok2vec"]
    assert tok2vec_cfg["@architectures"] == "spacy-elmo.Tok2VecElmo.v2"
    assert tok2vec_cfg["elmo"]["@architectures"] == "spacy-elmo.ElmoLayers.v2"
    assert tok2vec_cfg["tok2vec"] == hash_embed_cnn()
    assert nlp.get_pipe("elmo").listening_components == []
    assert not any(isinstance(n, ElmoListener) for n in nlp.get_pipe("ner").model.walk())
    assert entities(nlp) == ents_before

    nlp.remove_pipe("elmo")
    assert entities(nlp) == ents_before
    for a, b in zip(ner_tok2vec_output(nlp), vectors_before):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)

    nlp.to_disk(tmp_path / "ner_only")
    reloaded = spacy.load(tmp_path / "ner_only")
    assert reloaded.pipe_names == ["ner"]
    assert entities(reloaded) == ents_before
    for a, b in zip(ner_tok2vec_output(reloaded), vectors_before):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    mix_after = get_scalar_mix_weights(reloaded, "ner")
    np.testing.assert_array_equal(mix_after.scalar_weights, mix_before.scalar_weights)
    assert mix_after.gamma == mix_before.gamma


def input_placement_tok2vec() -> dict:
    """spaCy's Tok2Vec.v2 whose `embed` is an ELMo listener: ELMo joins the embeddings, before the encoder."""
    embeddings = {
        "@architectures": "spacy.MultiHashEmbed.v2",
        "width": 32,
        "attrs": ["NORM", "PREFIX", "SUFFIX", "SHAPE"],
        "rows": [500, 100, 250, 250],
        "include_static_vectors": False,
    }
    return {
        "@architectures": "spacy.Tok2Vec.v2",
        "embed": {
            "@architectures": "spacy-elmo.ElmoListener.v2",
            "upstream": "elmo",
            "width": 32,
            "tok2vec": embeddings,
        },
        "encode": {
            "@architectures": "spacy.MaxoutWindowEncoder.v2",
            "width": 32,
            "depth": 1,
            "window_size": 1,
            "maxout_pieces": 3,
        },
    }


def test_replace_listeners_at_the_embeddings_keeps_predictions_through_removal_and_reload(tiny_model_dir, tmp_path):
    nlp = make_nlp(tiny_model_dir)
    nlp.add_pipe("ner", config=ner_config(tok2vec=input_placement_tok2vec()))
    optimizer = nlp.initialize(lambda: examples(nlp))
    for _ in range(30):
        nlp.update(examples(nlp), sgd=optimizer)
    ents_before, vectors_before = entities(nlp), ner_tok2vec_output(nlp)
    assert any(ents_before)

    nlp.replace_listeners("elmo", "ner", ["model.tok2vec.embed"])
    tok2vec_cfg = nlp.config["components"]["ner"]["model"]["tok2vec"]
    assert tok2vec_cfg["@architectures"] == "spacy.Tok2Vec.v2"  # the encoder stays where it was
    embed = tok2vec_cfg["embed"]
    assert embed["@architectures"] == "spacy-elmo.Tok2VecElmo.v2" and embed["width"] == 32
    assert embed["elmo"]["@architectures"] == "spacy-elmo.ElmoLayers.v2"
    assert embed["tok2vec"] == input_placement_tok2vec()["embed"]["tok2vec"]
    nlp.remove_pipe("elmo")
    nlp.to_disk(tmp_path / "ner_only")
    reloaded = spacy.load(tmp_path / "ner_only")
    assert reloaded.pipe_names == ["ner"] and entities(reloaded) == ents_before
    for a, b in zip(ner_tok2vec_output(reloaded), vectors_before):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_replace_listeners_names_the_paths_when_the_listener_cannot_be_found(tiny_model_dir):
    from spacy_elmo.layers.elmo_layers import _replace_listener_cfg

    with pytest.raises(ValueError, match=r"expected one spacy-elmo.ElmoListener block .*; found 0\. Give"):
        _replace_listener_cfg({}, hash_embed_cnn())
    two = {
        "@architectures": "spacy.Tok2Vec.v2",
        "embed": input_placement_tok2vec()["embed"],
        "other": {"x": input_placement_tok2vec()["embed"]},
    }
    with pytest.raises(ValueError, match=r"found 2\. Give the listener's own path"):
        _replace_listener_cfg({}, two)


def test_standalone_tok2vec_elmo_trains_and_round_trips(tiny_model_dir, tmp_path):
    nlp = spacy.blank("en")
    tok2vec = {
        "@architectures": "spacy-elmo.Tok2VecElmo.v2",
        "elmo": {"@architectures": "spacy-elmo.ElmoLayers.v2", "path": str(tiny_model_dir)},
        "tok2vec": hash_embed_cnn(),
        "width": 24,
    }
    nlp.add_pipe("ner", config=ner_config(tok2vec=tok2vec))
    optimizer = nlp.initialize(lambda: examples(nlp))
    for _ in range(2):
        nlp.update(examples(nlp), sgd=optimizer)
    vectors = ner_tok2vec_output(nlp)
    assert [v.shape for v in vectors] == [(len(nlp.make_doc(t)), 24) for t in TEXTS]
    nlp.to_disk(tmp_path / "standalone")
    reloaded = spacy.load(tmp_path / "standalone")
    assert entities(reloaded) == entities(nlp)
    for a, b in zip(ner_tok2vec_output(reloaded), vectors):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


# ---------------------------------------------------------------- mismatched upstream
def test_listener_with_missing_upstream_raises_at_initialize(tiny_model_dir):
    nlp = make_nlp(tiny_model_dir)
    nlp.add_pipe("ner", config=ner_config(upstream="nonexistent"))
    with pytest.raises(ValueError, match="upstream = 'nonexistent'"):
        nlp.initialize(lambda: examples(nlp))


def test_listener_pointing_at_a_spacy_tok2vec_raises_naming_it():
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec")
    nlp.add_pipe("ner", config=ner_config(upstream="tok2vec"))
    with pytest.raises(ValueError, match="'tok2vec' is not an ELMo component"):
        nlp.initialize(lambda: examples(nlp))


def test_unlinked_listener_raises_at_first_call_too(tiny_model_dir):
    nlp = make_ner_nlp(tiny_model_dir, steps=0)
    listener = listener_of(nlp)
    nlp.get_pipe("elmo").remove_listener(listener, "ner")
    with pytest.raises(ValueError, match="upstream = 'elmo'"):
        listener.predict([nlp.make_doc("a b")])


def test_spacy_tok2vec_listener_pointing_at_elmo_is_refused(tiny_model_dir):
    nlp = make_nlp(tiny_model_dir)
    spacy_listener = {"@architectures": "spacy.Tok2VecListener.v1", "width": 16, "upstream": "elmo"}
    with pytest.raises(ValueError, match="Use spacy-elmo.ElmoListener.v2"):
        nlp.add_pipe("ner", config=ner_config(tok2vec=spacy_listener))


def test_layers_from_a_different_model_are_refused(tiny_model_dir):
    nlp = make_ner_nlp(tiny_model_dir, steps=0)
    doc = nlp.make_doc("a b")
    doc._.elmo_layers = np.zeros((NUM_LAYERS, 2, DIM + 1), dtype="float32")
    with pytest.raises(ValueError, match="different ELMo model"):
        listener_of(nlp).predict([doc])


# ---------------------------------------------------------------- frozen vs trained
def test_training_changes_only_the_listeners_mix_not_the_bilm(tiny_model_dir, tmp_path):
    nlp = make_ner_nlp(tiny_model_dir, steps=0)
    elmo = nlp.get_pipe("elmo").elmo
    frozen_before = bilm_state(elmo)
    assert not any(p.requires_grad for p in elmo.bilm.parameters())
    mix = get_scalar_mix_weights(nlp, "ner")
    np.testing.assert_array_equal(mix.scalar_weights, np.zeros(NUM_LAYERS, dtype="float32"))
    assert mix.gamma == 1.0
    # The only ELMo-side thinc params of the NER are the mix's w and gamma.
    elmo_side = [
        (node.name, name)
        for node in nlp.get_pipe("ner").model.walk()
        if node.name in ("elmo_listener", "elmo_scalar_mix")
        for name in node.param_names
    ]
    assert sorted(elmo_side) == [("elmo_scalar_mix", "W"), ("elmo_scalar_mix", "gamma")]

    optimizer = nlp.resume_training()
    for _ in range(3):
        nlp.update(examples(nlp), sgd=optimizer, annotates=["elmo"])

    for name, tensor in bilm_state(elmo).items():
        assert torch.equal(tensor, frozen_before[name]), name
    trained = get_scalar_mix_weights(nlp, "ner")
    assert not np.array_equal(trained.scalar_weights, mix.scalar_weights)
    assert trained.gamma != 1.0
    np.testing.assert_allclose(trained.normalized_weights.sum(), 1.0, rtol=1e-6)
    # The elmo component's own mix (behind doc.tensor) is untouched.
    np.testing.assert_array_equal(get_scalar_mix_weights(nlp, "elmo").scalar_weights, np.zeros(NUM_LAYERS))

    nlp.to_disk(tmp_path / "trained")
    reloaded = get_scalar_mix_weights(spacy.load(tmp_path / "trained"), "ner")
    np.testing.assert_array_equal(reloaded.scalar_weights, trained.scalar_weights)
    np.testing.assert_array_equal(reloaded.normalized_weights, trained.normalized_weights)
    assert reloaded.gamma == trained.gamma


def test_get_scalar_mix_weights_errors(tiny_model_dir):
    nlp = make_nlp(tiny_model_dir)
    nlp.add_pipe("tok2vec")
    with pytest.raises(ValueError, match="has no ELMo scalar mix"):
        get_scalar_mix_weights(nlp, "tok2vec")
    nlp.add_pipe("ner", config=ner_config())
    with pytest.raises(ValueError, match="not initialised"):
        get_scalar_mix_weights(nlp, "ner")


# ---------------------------------------------------------------- ElmoListener.v2 settings
def make_v2_ner_nlp(model_dir, steps: int, **settings):
    nlp = make_nlp(model_dir)
    config = ner_config(**settings)
    config["model"]["tok2vec"]["@architectures"] = "spacy-elmo.ElmoListener.v2"
    nlp.add_pipe("ner", config=config)
    optimizer = nlp.initialize(lambda: examples(nlp))
    for _ in range(steps):
        nlp.update(examples(nlp), sgd=optimizer, drop=0.1)
    return nlp


def test_feature_dropout_keeps_its_own_rate_whatever_spacy_sets():
    layer = ElmoFeatureDropout(0.25)
    set_dropout_rate(layer, 0.0)  # what spaCy does with [training] dropout before each update
    X = np.ones((400, 50), dtype="float32")
    (Y,), backprop = layer.begin_update([X])
    zeroed = float((Y == 0).mean())
    assert abs(zeroed - 0.25) < 0.02  # 20,000 draws: 6 standard deviations is 0.018
    np.testing.assert_array_equal(np.unique(Y), np.array([0.0, 1 / 0.75], dtype="float32"))
    (dX,) = backprop([np.full_like(X, 3.0)])
    np.testing.assert_array_equal(dX, 3.0 * Y)  # the same mask on the way back
    assert layer.predict([X])[0] is X


def test_feature_dropout_of_the_listener_survives_training_with_no_dropout(tiny_model_dir):
    nlp = make_v2_ner_nlp(tiny_model_dir, steps=1, dropout=0.3)
    (node,) = [n for n in nlp.get_pipe("ner").model.walk() if n.name == "elmo_feature_dropout"]
    nlp.update(examples(nlp), drop=0.0)
    assert node.attrs["elmo_dropout_rate"] == 0.3


def test_mix_l2_adds_two_lambda_w_to_the_gradient_of_w():
    rng = np.random.default_rng(0)
    Xs = [rng.normal(size=(3, n, 4)).astype("float32") for n in (2, 5)]
    dYs = [rng.normal(size=(n, 4)).astype("float32") for n in (2, 5)]
    w = np.array([0.5, -1.0, 0.25], dtype="float32")
    grads = {}
    for l2 in (0.0, 0.3):
        mix = ScalarMixLayer(l2=l2)
        mix.initialize(X=Xs)
        mix.set_param("W", w.copy())
        _, backprop = mix.begin_update(Xs)
        backprop(dYs)
        grads[l2] = mix.get_grad("W")
    np.testing.assert_allclose(grads[0.3] - grads[0.0], 2 * 0.3 * w, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"dropout": 1.0}, r"the ELMo feature dropout must be a number in \[0, 1\); got 1.0"),
        ({"dropout": -0.1}, r"the ELMo feature dropout must be a number in \[0, 1\); got -0.1"),
        ({"mix_l2": -1.0}, r"the scalar mix's l2 must be a finite number >= 0; got -1.0"),
        ({"mix_l2": float("inf")}, r"the scalar mix's l2 must be a finite number >= 0; got inf"),
    ],
)
def test_listener_v2_refuses_bad_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        ElmoListener_v2(**settings)


def test_replace_listeners_carries_the_v2_settings_and_keeps_predictions(tiny_model_dir):
    nlp = make_v2_ner_nlp(tiny_model_dir, steps=10, dropout=0.2, mix_l2=0.01)
    ents_before = entities(nlp)
    nlp.replace_listeners("elmo", "ner", ["model.tok2vec"])
    tok2vec_cfg = nlp.config["components"]["ner"]["model"]["tok2vec"]
    assert tok2vec_cfg["@architectures"] == "spacy-elmo.Tok2VecElmo.v2"
    assert (tok2vec_cfg["dropout"], tok2vec_cfg["mix_l2"]) == (0.2, 0.01)
    assert entities(nlp) == ents_before
