"""The registered, versioned architectures and the component's default config."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
import spacy
from spacy.util import RegistryError, fix_random_seed, registry
from thinc.api import Config

import elmo_core
import spacy_elmo.architectures
import spacy_elmo.layers
from spacy_elmo.architectures import ElmoLayers_v2, ElmoListener_v2, Tok2VecElmo_v2
from spacy_elmo.pipeline_component import DEFAULT_CONFIG_STR

from .conftest import examples, make_nlp, ner_config

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "name, function",
    [
        ("spacy-elmo.ElmoLayers.v2", ElmoLayers_v2),
        ("spacy-elmo.ElmoListener.v2", ElmoListener_v2),
        ("spacy-elmo.Tok2VecElmo.v2", Tok2VecElmo_v2),
    ],
)
def test_architectures_are_registered_under_versioned_names(name, function):
    assert registry.architectures.get(name) is function


def test_the_registered_spacy_elmo_architectures_are_the_versioned_names_only():
    # One name per thing: no second registration of the biLM layer under another name, and one
    # version of each (nothing was released, so no shim keeps an older one).
    registered = {name for name in registry.architectures.get_all() if name.startswith("spacy-elmo.")}
    assert registered == {
        f"spacy-elmo.{name}.v{version}" for name in ("ElmoLayers", "ElmoListener", "Tok2VecElmo") for version in (2,)
    }
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    declared = pyproject.split("[project.entry-points.spacy_architectures]")[1].split("\n[")[0]
    assert set(re.findall(r'^"(spacy-elmo\.[^"]+)" =', declared, flags=re.M)) == registered
    for name in ("spacy-elmo.ElmoModel.v1", "spacy-elmo.ElmoModel.v2"):
        with pytest.raises(RegistryError, match="ElmoModel"):
            registry.architectures.get(name)


def test_the_biLM_layer_is_named_elmo_layers_in_its_module_builder_and_thinc_node(tiny_model_dir):
    layers_module = importlib.import_module("spacy_elmo.layers.elmo_layers")
    assert importlib.util.find_spec("spacy_elmo.layers.elmo_model") is None
    assert ElmoLayers_v2(path=str(tiny_model_dir)).name == "elmo_layers"
    assert spacy_elmo.layers.build_elmo_layers is layers_module.build_elmo_layers
    # No deprecated aliases: the old Python names are simply gone.
    assert not hasattr(spacy_elmo.architectures, "ElmoModel_v2")
    assert not hasattr(spacy_elmo.layers, "ScalarMix")


def test_default_config_builds_an_elmo_component_without_reading_anything():
    config = Config().from_str(DEFAULT_CONFIG_STR)
    assert config["elmo"]["model"]["@architectures"] == "spacy-elmo.ElmoLayers.v2"
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    assert nlp.get_pipe_config("elmo")["model"]["max_batch_tokens"] == 4096
    assert nlp.get_pipe_config("elmo")["model"]["path"] == ""


def test_the_components_settings_are_declared_once_in_its_layers_signature():
    import inspect

    # The factory's default config names the architecture and sets nothing: spaCy fills in
    # every argument from ElmoLayers.v2's signature, the one place its defaults are written.
    assert dict(Config().from_str(DEFAULT_CONFIG_STR)["elmo"]["model"]) == {
        "@architectures": "spacy-elmo.ElmoLayers.v2"
    }
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    filled = {k: v for k, v in nlp.get_pipe_config("elmo")["model"].items() if k != "@architectures"}
    signature = inspect.signature(ElmoLayers_v2).parameters
    assert filled == {name: p.default for name, p in signature.items()}
    assert filled["max_batch_tokens"] == elmo_core.runtime.embedding.DEFAULT_BATCH_TOKENS
    assert filled["window_tokens"] == elmo_core.runtime.windows.DEFAULT_WINDOW_TOKENS


@pytest.mark.parametrize("width", [0, -3, True])
def test_listener_width_must_be_positive(width):
    with pytest.raises(ValueError, match="width must be a positive integer"):
        ElmoListener_v2(width=width)


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
