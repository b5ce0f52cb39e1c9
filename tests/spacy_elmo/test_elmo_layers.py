"""spacy-elmo.ElmoLayers.v2 (`build_elmo_layers`): the frozen biLM as a thinc layer."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import spacy
import srsly
import torch
from spacy.tokens import Doc

from elmo_core import embed_sentences, save_model_folder
from spacy_elmo.architectures import ElmoLayers_v2
from spacy_elmo.layers.elmo_layers import (
    ElmoShim,
    deserialize_elmo,
    elmo_module,
    load_elmo_source,
    serialize_elmo,
    set_elmo,
)

from ..conftest import make_tiny_elmo
from .conftest import DIM, NUM_LAYERS

WORDS = [["The", "river", "bank", "."], ["a"], [], ["Money", "from", "the", "bank", "was", "lent", "."]]


def docs_for(words_list):
    vocab = spacy.blank("en").vocab
    return [Doc(vocab, words=words) for words in words_list]


def test_building_reads_nothing_and_init_loads_the_source(tiny_model_dir):
    model = ElmoLayers_v2(path=str(tiny_model_dir / "does-not-exist-yet"))
    assert elmo_module(model) is None
    model = ElmoLayers_v2(path=str(tiny_model_dir))
    model.initialize()
    assert elmo_module(model) is not None and model.get_dim("nO") == DIM and model.get_dim("nL") == NUM_LAYERS


def test_output_shapes_and_values_equal_the_core(tiny_model_dir):
    model = ElmoLayers_v2(path=str(tiny_model_dir))
    outputs = model.predict(docs_for(WORDS))  # loads on first use
    assert [x.shape for x in outputs] == [(NUM_LAYERS, len(w), DIM) for w in WORDS]
    assert all(x.dtype == np.float32 and isinstance(x, np.ndarray) for x in outputs)
    expected = embed_sentences(elmo_module(model), WORDS, layers="all")
    for x, e in zip(outputs, expected):
        np.testing.assert_allclose(x, e, rtol=1e-4, atol=1e-5)


def test_padding_and_batch_mates_do_not_change_a_docs_layers(tiny_model_dir):
    model = ElmoLayers_v2(path=str(tiny_model_dir), max_batch_tokens=10_000)
    together = model.predict(docs_for(WORDS))
    alone = [model.predict(docs_for([w]))[0] for w in WORDS]
    tiny_budget = ElmoLayers_v2(path=str(tiny_model_dir), max_batch_tokens=3).predict(docs_for(WORDS))
    for a, b, c in zip(together, alone, tiny_budget):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-5)


def test_backprop_is_a_no_op_and_no_tensor_keeps_a_graph(tiny_model_dir):
    model = ElmoLayers_v2(path=str(tiny_model_dir))
    outputs, backprop = model.begin_update(docs_for(WORDS))
    assert backprop([np.ones_like(x) for x in outputs]) == []
    assert all(isinstance(x, np.ndarray) for x in outputs)
    assert not any(p.requires_grad for p in elmo_module(model).bilm.parameters())


def test_serialisation_carries_the_model_folder_not_a_pickle(tiny_model_dir):
    model = ElmoLayers_v2(path=str(tiny_model_dir))
    expected = model.predict(docs_for(WORDS))
    data = model.to_bytes()
    other = ElmoLayers_v2(path="/nowhere")
    other.from_bytes(data)
    for a, b in zip(other.predict(docs_for(WORDS)), expected):
        np.testing.assert_array_equal(a, b)
    files = srsly.msgpack_loads(serialize_elmo(elmo_module(model)))["model_folder"]
    assert sorted(files) == ["config.json", "model.safetensors", "tokenizer_config.json"]
    assert b"cuda" not in files["config.json"]
    assert deserialize_elmo(None, b"", torch.device("cpu")) is None


def test_the_shim_runs_the_module_it_shows_after_loading_deserializing_copying_and_pickling(tiny_model_dir):
    # ElmoShim.elmo is the module thinc's shim runs (thinc has no public accessor for it).
    model = ElmoLayers_v2(path=str(tiny_model_dir))
    model.initialize()
    restored = ElmoLayers_v2(path="/nowhere").from_bytes(model.to_bytes())
    for layer in (model, restored, model.copy(), pickle.loads(pickle.dumps(model))):
        shim = layer.layers[0].shims[0]
        assert isinstance(shim, ElmoShim) and shim.elmo is elmo_module(layer)
        calls: list[int] = []
        handle = shim.elmo.register_forward_hook(lambda *args, calls=calls: calls.append(1))
        try:
            layer.predict(docs_for(WORDS[:1]))
        finally:
            handle.remove()
        assert calls == [1]
    assert elmo_module(restored) is not elmo_module(model)


def test_copy_is_independent_and_equal(tiny_model_dir):
    model = ElmoLayers_v2(path=str(tiny_model_dir))
    model.initialize()
    copy = model.copy()
    assert elmo_module(copy) is not elmo_module(model)
    for a, b in zip(copy.predict(docs_for(WORDS)), model.predict(docs_for(WORDS))):
        np.testing.assert_array_equal(a, b)


def test_set_elmo_refuses_a_differently_shaped_model(tiny_model_dir):
    model = ElmoLayers_v2(path=str(tiny_model_dir))
    model.initialize()
    from elmo_core import BiLMOptions, Elmo
    from elmo_core.model.options import CharCNNOptions, LSTMOptions

    wider = Elmo(
        BiLMOptions(
            char_cnn=CharCNNOptions(embedding_dim=4, filters=((1, 4),), n_highway=0),
            lstm=LSTMOptions(dim=16, projection_dim=4, n_layers=1),
        )
    )
    with pytest.raises(ValueError, match="same shape"):
        set_elmo(model, wider)


@pytest.mark.parametrize(
    "source, match",
    [
        ({"path": "p", "options": "o"}, "not both"),
        ({"weights": "w.hdf5"}, "go together"),
    ],
)
def test_load_elmo_source_errors(source, match):
    with pytest.raises(ValueError, match=match):
        load_elmo_source(**source)


def test_follows_thinc_device_on_cpu(tiny_model_dir):
    # On the CPU: nothing is pinned to a device; outputs are CPU numpy.
    model = ElmoLayers_v2(path=str(tiny_model_dir))
    outputs = model.predict(docs_for(WORDS[:1]))
    assert next(elmo_module(model).parameters()).device.type == "cpu"
    assert isinstance(outputs[0], np.ndarray)


@pytest.mark.gpu
def test_require_gpu_moves_the_module_and_outputs_stay_on_cpu(tiny_model_dir):
    spacy.require_gpu()
    try:
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"model": {"path": str(tiny_model_dir)}})
        doc = nlp("a b")
        assert next(nlp.get_pipe("elmo").elmo.parameters()).device.type == "cuda"
        assert isinstance(doc.tensor, np.ndarray) and doc.tensor.shape == (2, DIM)
    finally:
        spacy.require_cpu()


def test_saved_tiny_model_round_trip_through_load_elmo_source(tmp_path):
    elmo = make_tiny_elmo()
    save_model_folder(elmo, tmp_path)
    loaded = load_elmo_source(path=str(tmp_path))
    for name, tensor in elmo.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


# ------------------------------------------------------------------ v2: the feature cache
def test_v2_cached_layers_equal_uncached_and_hits_skip_the_bilm(tiny_model_dir):
    from spacy_elmo.architectures import ElmoLayers_v2
    from spacy_elmo.layers.elmo_layers import feature_cache

    plain = ElmoLayers_v2(path=str(tiny_model_dir)).predict(docs_for(WORDS))
    model = ElmoLayers_v2(path=str(tiny_model_dir), cache_bytes=1 << 20)
    first = model.predict(docs_for(WORDS))
    hits_before = feature_cache(model).stats.hits
    second = model.predict(docs_for(WORDS[::-1]))[::-1]  # other batch order, all hits
    stats = feature_cache(model).stats
    assert stats.entries == 3 and stats.hits - hits_before == 3  # the empty Doc is no unit
    for a, b, c in zip(plain, first, second):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)
        np.testing.assert_allclose(c, a, rtol=0, atol=1e-6)


def test_v2_docs_get_their_own_writable_copies_of_cached_layers(tiny_model_dir):
    from spacy_elmo.architectures import ElmoLayers_v2

    model = ElmoLayers_v2(path=str(tiny_model_dir), cache_bytes=1 << 20)
    expected = model.predict(docs_for(WORDS[:1]))[0].copy()
    for _ in range(2):  # the miss, then the hit
        out = model.predict(docs_for(WORDS[:1]))[0]
        assert out.flags.writeable
        out[:] = 123.0  # a caller corrupting its output does not reach the cache
    np.testing.assert_array_equal(model.predict(docs_for(WORDS[:1]))[0], expected)


def test_v2_cache_respects_its_byte_budget(tiny_model_dir):
    from spacy_elmo.architectures import ElmoLayers_v2
    from spacy_elmo.layers.elmo_layers import feature_cache

    per_token = NUM_LAYERS * DIM * 4
    model = ElmoLayers_v2(path=str(tiny_model_dir), cache_bytes=8 * per_token)
    model.predict(docs_for(WORDS))  # 4 + 1 + 7 tokens
    cache = feature_cache(model)
    assert 0 < cache.nbytes <= 8 * per_token and cache.stats.entries < 3  # never all 12 tokens
    assert ElmoLayers_v2(path=str(tiny_model_dir)).attrs["feature_cache"] is None  # 0 = v1


def test_v2_cache_is_emptied_when_another_bilm_is_set(tiny_model_dir):
    from spacy_elmo.architectures import ElmoLayers_v2
    from spacy_elmo.layers.elmo_layers import feature_cache

    model = ElmoLayers_v2(path=str(tiny_model_dir), cache_bytes=1 << 20)
    model.predict(docs_for(WORDS))
    other = make_tiny_elmo(seed=1)
    set_elmo(model, other)
    np.testing.assert_allclose(
        model.predict(docs_for(WORDS[:1]))[0], embed_sentences(other, WORDS[:1], layers="all")[0], atol=1e-6, rtol=0
    )
    assert feature_cache(model).stats.entries == 1


@pytest.mark.parametrize("budget", [-1, "1GB"])
def test_v2_rejects_a_bad_cache_budget(tiny_model_dir, budget):
    from spacy_elmo.architectures import ElmoLayers_v2

    with pytest.raises(ValueError, match="cache_bytes must be a non-negative integer"):
        ElmoLayers_v2(path=str(tiny_model_dir), cache_bytes=budget)


def test_v2_caches_a_sentence_read_in_windows_whole(tiny_model_dir):
    from spacy_elmo.architectures import ElmoLayers_v2
    from spacy_elmo.layers.elmo_layers import feature_cache

    long_words = [[f"w{i % 7}" for i in range(40)]]
    plain = ElmoLayers_v2(path=str(tiny_model_dir), window_tokens=16).predict(docs_for(long_words))[0]
    model = ElmoLayers_v2(path=str(tiny_model_dir), window_tokens=16, cache_bytes=1 << 20)
    first = model.predict(docs_for(long_words))[0]
    second = model.predict(docs_for(long_words))[0]
    assert feature_cache(model).stats[:3] == (1, 1, 1)  # one hit, one miss, one entry
    np.testing.assert_allclose(first, plain, rtol=0, atol=1e-6)
    np.testing.assert_allclose(second, plain, rtol=0, atol=1e-6)


@pytest.mark.parametrize("training", [False, True])
def test_component_leaves_the_bilms_mode_and_the_callers_modes_as_it_found_them(nlp, training):
    elmo = nlp.get_pipe("elmo").elmo
    expected = nlp("The river bank .").tensor.copy()
    elmo.train(training)
    seen = []
    handle = elmo.bilm.register_forward_pre_hook(
        lambda *_: seen.append((elmo.training, torch.is_inference_mode_enabled()))
    )
    doc = nlp("The river bank .")
    handle.remove()
    assert seen == [(False, True)]  # the biLM itself runs in eval mode under inference mode
    assert elmo.training == training
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    np.testing.assert_allclose(doc.tensor, expected, atol=1e-6, rtol=0)
