"""The registered, versioned architectures and the component's default config."""

from __future__ import annotations

import pytest
import spacy
from spacy.util import fix_random_seed, registry
from thinc.api import Config

from spacy_elmo.architectures import ElmoLayers_v1, ElmoLayers_v2, ElmoListener_v1, Tok2VecElmo_v1
from spacy_elmo.pipeline_component import DEFAULT_CONFIG_STR

from .conftest import examples, make_nlp, ner_config


@pytest.mark.parametrize(
    "name, function",
    [
        ("spacy-elmo.ElmoLayers.v1", ElmoLayers_v1),
        ("spacy-elmo.ElmoLayers.v2", ElmoLayers_v2),
        ("spacy-elmo.ElmoListener.v1", ElmoListener_v1),
        ("spacy-elmo.Tok2VecElmo.v1", Tok2VecElmo_v1),
    ],
)
def test_architectures_are_registered_under_versioned_names(name, function):
    assert registry.architectures.get(name) is function


@pytest.mark.parametrize(
    "first_name, function", [("spacy-elmo.ElmoModel.v1", ElmoLayers_v1), ("spacy-elmo.ElmoModel.v2", ElmoLayers_v2)]
)
def test_the_first_names_of_the_layers_architectures_stay_registered(first_name, function):
    # Configs and saved pipelines written before the rename name these; they must load as before.
    assert registry.architectures.get(first_name) is function


def test_a_config_with_a_first_name_loads_without_a_warning(tiny_model_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"@architectures": "spacy-elmo.ElmoModel.v2", "path": str(tiny_model_dir)}})
    nlp.initialize()
    assert nlp("The bank.")._.elmo_layers.shape[1] == 3  # filterwarnings=error: no warning either


def test_the_old_python_names_warn_and_resolve():
    with pytest.warns(DeprecationWarning, match=r"renamed ElmoLayers_v2 \(registered as spacy-elmo.ElmoLayers.v2\)"):
        from spacy_elmo.architectures import ElmoModel_v2
    assert ElmoModel_v2 is ElmoLayers_v2


def test_default_config_builds_an_elmo_component_without_reading_anything():
    config = Config().from_str(DEFAULT_CONFIG_STR)
    assert config["elmo"]["model"]["@architectures"] == "spacy-elmo.ElmoLayers.v2"
    assert config["elmo"]["model"]["path"] == ""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    assert nlp.get_pipe_config("elmo")["model"]["max_batch_tokens"] == 4096


@pytest.mark.parametrize("width", [0, -3, True])
def test_listener_width_must_be_positive(width):
    with pytest.raises(ValueError, match="width must be a positive integer"):
        ElmoListener_v1(width=width)


def test_listener_output_width_with_and_without_tok2vec_and_projection(tiny_model_dir):
    for change, expected in (({"width": 20}, 20), ({"tok2vec": None}, 16), ({}, 16 + 32)):
        nlp = make_nlp(tiny_model_dir)
        config = ner_config()
        config["model"]["tok2vec"].update(change)
        nlp.add_pipe("ner", config=config)
        nlp.initialize(lambda nlp=nlp: examples(nlp))
        docs = list(nlp.pipe(["a b c"]))
        out = nlp.get_pipe("ner").model.get_ref("tok2vec").layers[0].predict(docs)
        assert out[0].shape == (3, expected)


def test_ner_with_elmo_features_lowers_its_loss(tiny_model_dir):
    fix_random_seed(0)
    nlp = make_nlp(tiny_model_dir)
    nlp.add_pipe("ner", config=ner_config())
    optimizer = nlp.initialize(lambda: examples(nlp))
    losses = [nlp.update(examples(nlp), sgd=optimizer, annotates=["elmo"])["ner"] for _ in range(30)]
    assert losses[-1] < 0.75 * max(losses[:3])
