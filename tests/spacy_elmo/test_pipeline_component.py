"""The `elmo` component: what it writes on Docs, batching, memory, errors, serialisation."""

from __future__ import annotations

import copy
import gc
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch
from spacy.lang.en import English
from spacy.language import Language

from elmo_core import WeightFileError, embed_sentences, save_model_folder
from spacy_elmo import ElmoComponent

from ..conftest import make_tiny_elmo
from .conftest import DIM, NUM_LAYERS, make_ner_nlp, make_nlp

S = "hello my name is mud ."


def core_vectors(nlp, words: list[str], layers="mix") -> np.ndarray:
    """The core's own answer for one tokenised sentence (the reference)."""
    return embed_sentences(nlp.get_pipe("elmo").elmo, [words], layers=layers)[0]


# ---------------------------------------------------------------- what every Doc gets
def test_doc_gets_layers_tensor_and_mix_with_documented_shapes(nlp):
    doc = nlp("The river bank was muddy .")
    assert doc._.elmo_layers.shape == (NUM_LAYERS, len(doc), DIM)
    assert doc._.elmo_layers.dtype == np.float32 and isinstance(doc._.elmo_layers, np.ndarray)
    assert doc.tensor.shape == (len(doc), DIM) and doc.tensor.dtype == np.float32
    np.testing.assert_allclose(doc._.elmo_mix, [1 / 3, 1 / 3, 1 / 3, 1.0], rtol=0, atol=1e-7)


def test_layers_and_tensor_equal_the_core_on_the_same_tokens(nlp):
    doc = nlp("The river bank was muddy .")
    words = [t.text for t in doc]
    np.testing.assert_allclose(doc._.elmo_layers, core_vectors(nlp, words, "all"), rtol=0, atol=1e-6)
    np.testing.assert_allclose(doc.tensor, core_vectors(nlp, words, "mix"), rtol=0, atol=1e-6)


def test_tensor_uses_the_model_folders_first_scalar_mix(tmp_path):
    elmo = make_tiny_elmo()
    with torch.no_grad():
        elmo.scalar_mixes[0].scalar_weights.copy_(torch.tensor([0.0, -1.0, 2.0]))
        elmo.scalar_mixes[0].gamma.fill_(0.5)
    save_model_folder(elmo, tmp_path)
    nlp = make_nlp(tmp_path)
    doc = nlp("a b c")
    weights = torch.softmax(torch.tensor([0.0, -1.0, 2.0]), 0).numpy()
    expected = 0.5 * np.tensordot(weights, doc._.elmo_layers, axes=1)
    np.testing.assert_allclose(doc.tensor, expected, rtol=1e-6, atol=1e-6)
    mix = nlp.get_pipe("elmo").mix_weights
    np.testing.assert_allclose(mix.normalized_weights, weights, rtol=1e-6)
    assert mix.gamma == pytest.approx(0.5)


def test_token_span_and_doc_vectors_come_from_the_tensor(nlp):
    # doc.tensor is set, aligned with spaCy's tokens, and the vectors follow it.
    for text in ["Apple shares rose on the news .", "Don't stop-me now!!"]:
        doc = nlp(text)
        assert doc.tensor.shape == (len(doc), DIM) and doc.tensor.dtype == np.float32
        for token in doc:
            np.testing.assert_array_equal(token.vector, doc.tensor[token.i])
            assert token.has_vector
        span = doc[1:4]
        np.testing.assert_allclose(span.vector, doc.tensor[1:4].mean(0), rtol=0, atol=1e-6)
        np.testing.assert_allclose(doc.vector, doc.tensor.mean(0), rtol=0, atol=1e-6)


def test_long_doc_is_one_sequence_equal_to_the_core(nlp):
    # A 600-token doc without sentence boundaries is read whole, no windowing.
    words = [f"w{i % 37}" for i in range(600)]
    doc = nlp(" ".join(words))
    assert len(doc) == 600 and doc.tensor.shape == (600, DIM)
    np.testing.assert_allclose(doc.tensor, core_vectors(nlp, words), rtol=1e-4, atol=1e-5)


def cosine(a, b) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_similarity_is_the_cosine_of_elmo_vectors_even_for_the_same_word(nlp):
    river, money = nlp("The river bank ."), nlp("A bank lends money .")
    assert river.similarity(money) == pytest.approx(cosine(river.vector, money.vector), abs=1e-6)
    assert river[1:3].similarity(money[0:2]) == pytest.approx(cosine(river[1:3].vector, money[0:2].vector), abs=1e-6)
    # spaCy's own Token.similarity says 1.0 for two tokens of the same text.
    assert river[2].similarity(money[1]) == pytest.approx(cosine(river[2].vector, money[1].vector), abs=1e-6)
    assert river[2].similarity(money[1]) < 1.0


def test_similarity_with_an_empty_doc_warns_and_is_zero(nlp):
    with pytest.warns(UserWarning, match="all-zero vector"):
        assert nlp("a b").similarity(nlp(" ")) == 0.0


def test_adding_and_using_elmo_replaces_no_method_of_the_pipeline(tiny_model_dir):
    """The component sets hooks on its Docs only: `nlp.pipe` and the rest stay spaCy's own."""
    blank_attributes = set(vars(spacy.blank("en")))
    classes = {cls: dict(vars(cls)) for cls in (Language, English)}
    nlp = make_nlp(tiny_model_dir)
    nlp.initialize()
    sourced = spacy.blank("en")
    sourced.add_pipe("elmo", source=nlp)
    sourced.initialize()
    for pipeline in (nlp, sourced):
        list(pipeline.pipe(["a b", "c"]))
        assert "pipe" not in vars(pipeline)
        assert type(pipeline).pipe is Language.pipe and pipeline.pipe.__func__ is Language.pipe
        assert set(vars(pipeline)) == blank_attributes  # no attribute over a method of the class
    assert {cls: dict(vars(cls)) for cls in classes} == classes


# ---------------------------------------------------------------- no carried state
def test_same_text_gives_same_tensor_whatever_came_before(tiny_model_dir, nlp):
    first = nlp(S).tensor.copy()
    second = nlp(S).tensor.copy()
    list(nlp.pipe(["unrelated filler words"] * 8))
    after_filler = nlp(S)
    fresh = make_nlp(tiny_model_dir)(S)
    for other in (second, after_filler.tensor, fresh.tensor):
        np.testing.assert_allclose(other, first, rtol=0, atol=1e-6)
    np.testing.assert_allclose(after_filler._.elmo_layers, fresh._.elmo_layers, rtol=0, atol=1e-6)
    assert not nlp.get_pipe("elmo").elmo.bilm.stateful


def test_a_stateful_model_folder_is_loaded_stateless(tmp_path):
    save_model_folder(make_tiny_elmo(stateful=True), tmp_path)
    nlp = make_nlp(tmp_path)
    assert not nlp.get_pipe("elmo").elmo.bilm.stateful
    np.testing.assert_array_equal(nlp(S).tensor, nlp(S).tensor)


# ---------------------------------------------------------------- batching, padding
def test_batch_size_does_not_change_vectors(nlp):
    texts = [" ".join(f"w{j}" for j in range(1 + k % 12)) for k in range(40)]
    runs = {b: list(nlp.pipe(texts, batch_size=b)) for b in (1, 7, 32, 40)}
    for k, text in enumerate(texts):
        reference = runs[1][k].tensor
        assert reference.shape == (1 + k % 12, DIM)
        np.testing.assert_allclose(reference, core_vectors(nlp, text.split()), rtol=1e-4, atol=1e-5)
        for b in (7, 32, 40):
            np.testing.assert_allclose(runs[b][k].tensor, reference, rtol=1e-4, atol=1e-5)


def test_token_budget_splits_batches_without_changing_vectors(tiny_model_dir, nlp):
    texts = [" ".join(f"w{j}" for j in range(1 + k % 12)) for k in range(40)]
    small_budget = make_nlp(tiny_model_dir, max_batch_tokens=20)
    for a, b in zip(nlp.pipe(texts, batch_size=40), small_budget.pipe(texts, batch_size=40)):
        np.testing.assert_allclose(a._.elmo_layers, b._.elmo_layers, rtol=1e-4, atol=1e-5)


def test_doc_vector_ignores_padding_of_its_batch(nlp):
    texts = ["Short one.", "This is a much longer sentence with many more tokens in it ."]
    docs = list(nlp.pipe(texts, batch_size=2))
    np.testing.assert_allclose(docs[0].vector, docs[0].tensor.mean(0), rtol=0, atol=1e-6)
    np.testing.assert_allclose(docs[0].vector, nlp("Short one.").vector, rtol=0, atol=1e-5)
    np.testing.assert_allclose(docs[1].vector, nlp(texts[1]).vector, rtol=0, atol=1e-5)


def test_pipe_runs_one_forward_per_batch(nlp):
    # nlp.pipe batches; 130 texts at batch size 64 -> 3 biLM calls.
    calls = []
    handle = nlp.get_pipe("elmo").elmo.register_forward_hook(lambda *args: calls.append(1))
    try:
        docs = list(nlp.pipe([f"text number {i} ." for i in range(130)], batch_size=64))
    finally:
        handle.remove()
    assert len(docs) == 130 and len(calls) == 3


# ---------------------------------------------------------------- empty and odd docs
ODD_TEXTS = ["", " ", "\n\n\n", "\t", "K", "   a   "]


def test_empty_whitespace_and_one_char_docs(tiny_model_dir):
    nlp = make_ner_nlp(tiny_model_dir, steps=1)
    one_by_one = [nlp(text) for text in ODD_TEXTS]
    piped = list(nlp.pipe(ODD_TEXTS))
    assert [d.text for d in piped] == ODD_TEXTS
    for doc, other in zip(one_by_one, piped):
        for d in (doc, other):
            assert d.tensor.shape == (len(d), DIM)
            assert np.isfinite(d.tensor).all() and np.isfinite(d._.elmo_layers).all()
            assert all(len(t.vector) == DIM for t in d)
        np.testing.assert_allclose(doc.tensor, other.tensor, rtol=0, atol=1e-6)


def test_whitespace_tokens_get_zero_rows_and_do_not_change_the_others(nlp):
    spaced = nlp("   a   b")
    plain = nlp("a b")
    words = [t for t in spaced if not t.is_space]
    assert [t.text for t in words] == ["a", "b"]
    for token in spaced:
        if token.is_space:
            assert not token.vector.any()
    np.testing.assert_allclose(spaced.tensor[[t.i for t in words]], plain.tensor, rtol=0, atol=1e-6)


def test_each_sentence_is_read_alone_when_the_doc_has_sentences(tiny_model_dir, nlp):
    with_sentences = make_nlp(tiny_model_dir)
    with_sentences.add_pipe("sentencizer", first=True)
    doc = with_sentences("The bank is old . It lends money .")
    assert len(list(doc.sents)) == 2
    np.testing.assert_allclose(doc.tensor[:5], nlp("The bank is old .").tensor, rtol=0, atol=1e-6)
    np.testing.assert_allclose(doc.tensor[5:], nlp("It lends money .").tensor, rtol=0, atol=1e-6)
    whole = make_nlp(tiny_model_dir, per_sentence=False)
    whole.add_pipe("sentencizer", first=True)
    np.testing.assert_allclose(
        whole("The bank is old . It lends money .").tensor,
        nlp("The bank is old . It lends money .").tensor,
        rtol=0,
        atol=1e-6,
    )


# ---------------------------------------------------------------- no growth, no graphs
def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _tensors_reachable_from(doc) -> list:
    found, stack = [], [doc.tensor, dict(doc.user_data), doc.user_hooks, doc.user_token_hooks, doc.user_span_hooks]
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
    return found


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc for RSS")
def test_memory_does_not_grow_across_calls_and_docs_hold_no_graph(tiny_model_dir):
    nlp = make_ner_nlp(tiny_model_dir, steps=1)
    rng = np.random.default_rng(0)
    texts = [" ".join(f"w{j % 50}" for j in range(rng.integers(50, 201))) for _ in range(210)]
    for text in texts[:10]:
        nlp(text)
    gc.collect()
    before = _rss_bytes()
    docs = [nlp(text) for text in texts[10:]]
    gc.collect()
    after = _rss_bytes()
    assert after <= 1.1 * before + 50 * 2**20, (before / 2**20, after / 2**20)
    for doc in docs:
        assert _tensors_reachable_from(doc) == []
        assert isinstance(doc._.elmo_layers, np.ndarray) and isinstance(doc.tensor, np.ndarray)
    assert not any(p.requires_grad for p in nlp.get_pipe("elmo").elmo.bilm.parameters())


# ---------------------------------------------------------------- sources and errors
def test_original_options_and_hdf5_pair_as_source(tiny_bilm_hdf5, tiny_model_dir):
    options, weights = tiny_bilm_hdf5
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"options": str(options), "weights": str(weights)}})
    np.testing.assert_allclose(nlp(S)._.elmo_layers, make_nlp(tiny_model_dir)(S)._.elmo_layers, rtol=0, atol=1e-6)


def test_no_source_means_the_default_model_with_a_clear_error_when_absent(monkeypatch, tmp_path):
    import elmo_core.files.model_folder as model_folder

    monkeypatch.setattr(model_folder, "DEFAULT_MODEL_DIR", tmp_path / "missing")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")  # nothing is read when the pipeline is built
    with pytest.raises(WeightFileError, match="no default model is installed"):
        nlp.initialize()


def test_default_model_is_loaded_when_installed(monkeypatch, tiny_model_dir):
    import elmo_core.files.model_folder as model_folder

    monkeypatch.setattr(model_folder, "DEFAULT_MODEL_DIR", tiny_model_dir)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    np.testing.assert_allclose(nlp(S).tensor, make_nlp(tiny_model_dir)(S).tensor, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "model, match",
    [
        ({"path": "x", "options": "o.json", "weights": "w.hdf5"}, "either a model folder"),
        ({"options": "o.json"}, "options and weights go together"),
        ({"max_batch_tokens": 0}, "max_batch_tokens must be a positive integer"),
    ],
)
def test_bad_source_config_raises_clear_errors(model, match):
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match=match):
        nlp.add_pipe("elmo", config={"model": model})
        nlp.initialize()


def test_missing_model_folder_names_the_folder(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(tmp_path / "nowhere")}})
    with pytest.raises(WeightFileError, match="nowhere"):
        nlp("a b")


def test_an_error_handler_that_returns_gets_the_doc_through_unannotated(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(tmp_path / "nowhere")}})
    seen = []
    nlp.set_error_handler(lambda name, component, docs, error: seen.append((name, [d.text for d in docs], type(error))))
    doc = nlp("a b")  # spaCy raises E005 for a component that returns None instead of a Doc
    assert doc.text == "a b" and doc._.elmo_layers is None
    assert seen == [("elmo", ["a b"], WeightFileError)]


def test_whole_batch_layer_norm_mix_is_refused(tmp_path):
    save_model_folder(make_tiny_elmo(do_layer_norm=True, layer_norm_scope="batch"), tmp_path)
    with pytest.raises(ValueError, match="layer_norm_scope='batch'"):
        make_nlp(tmp_path)("a b")


def test_per_sentence_layer_norm_mix_is_batch_invariant_in_spacy(tmp_path):
    save_model_folder(make_tiny_elmo(do_layer_norm=True), tmp_path)
    nlp = make_nlp(tmp_path)
    short = "the bank of the river"
    alone = nlp(short).tensor
    docs = list(nlp.pipe([short, "a much longer sentence with many more words about money and banks ."], batch_size=2))
    np.testing.assert_allclose(docs[0].tensor, alone, atol=1e-5, rtol=1e-5)


def test_static_vectors_in_the_vocab_are_warned_about(nlp):
    nlp.vocab.set_vector("bank", np.ones(4, dtype="float32"))
    with pytest.warns(UserWarning, match="static word vectors"):
        nlp.initialize()


# ---------------------------------------------------------------- one load
def count_loads(monkeypatch) -> list[str]:
    """Record each run of the component's one load (`ElmoComponent._load`)."""
    calls: list[str] = []
    load = ElmoComponent._load

    def counting_load(self):
        calls.append(self.name)
        return load(self)

    monkeypatch.setattr(ElmoComponent, "_load", counting_load)
    return calls


def test_the_biLM_is_loaded_once_at_initialize_and_never_per_batch(monkeypatch, tiny_model_dir):
    nlp = make_nlp(tiny_model_dir)
    loads = count_loads(monkeypatch)
    nlp.initialize()
    assert loads == ["elmo"]
    docs = list(nlp.pipe([f"text number {i} ." for i in range(6)], batch_size=2))  # 3 batches
    nlp(S)
    _ = nlp.get_pipe("elmo").mix_weights
    assert loads == ["elmo"] and docs[-1].tensor.shape == (4, DIM)


def test_first_use_without_initialize_loads_once(monkeypatch, tiny_model_dir):
    nlp = make_nlp(tiny_model_dir)
    loads = count_loads(monkeypatch)
    first = nlp(S)
    later = [nlp(S), *nlp.pipe([S, S, S], batch_size=1)]
    assert loads == ["elmo"]
    for doc in later:
        np.testing.assert_array_equal(doc.tensor, first.tensor)


def test_a_saved_pipeline_loads_once_from_its_own_files(monkeypatch, nlp, tmp_path):
    expected = nlp(S).tensor
    nlp.to_disk(tmp_path / "pipeline")
    loads = count_loads(monkeypatch)
    loaded = spacy.load(tmp_path / "pipeline")
    assert loads == ["elmo"]
    np.testing.assert_allclose(loaded(S).tensor, expected, rtol=0, atol=1e-6)
    list(loaded.pipe([S, S], batch_size=1))
    assert loads == ["elmo"]


# ---------------------------------------------------------------- serialisation
def test_to_disk_writes_a_model_folder_and_loads_identically(nlp, tmp_path):
    expected = nlp(S).tensor
    nlp.to_disk(tmp_path / "pipeline")
    folder = tmp_path / "pipeline" / "elmo" / "model"
    assert {p.name for p in folder.iterdir()} == {"config.json", "model.safetensors", "tokenizer_config.json"}
    assert not any(p.suffix in (".pt", ".bin", ".pkl") for p in (tmp_path / "pipeline" / "elmo").rglob("*"))
    loaded = spacy.load(tmp_path / "pipeline")
    np.testing.assert_allclose(loaded(S).tensor, expected, rtol=0, atol=1e-6)


def test_saved_pipeline_never_reads_the_source_again(tmp_path):
    source = tmp_path / "source"
    save_model_folder(make_tiny_elmo(), source)
    nlp = make_nlp(source)
    expected = nlp(S).tensor
    nlp.to_disk(tmp_path / "pipeline")
    for p in source.iterdir():
        p.unlink()
    source.rmdir()
    np.testing.assert_allclose(spacy.load(tmp_path / "pipeline")(S).tensor, expected, rtol=0, atol=1e-6)


def test_to_bytes_round_trip(nlp, tiny_model_dir):
    expected = nlp(S).tensor
    data = nlp.to_bytes()
    other = spacy.blank("en")
    other.add_pipe("elmo", config={"model": {"path": "/does/not/matter"}})
    other.from_bytes(data)
    np.testing.assert_allclose(other(S).tensor, expected, rtol=0, atol=1e-6)


def test_component_and_pipeline_pickle_and_deepcopy(tiny_model_dir):
    # No lambdas or closures on the component or its model.
    nlp = make_ner_nlp(tiny_model_dir, steps=1)
    text = "a b c"
    expected = nlp(text)
    for other in (pickle.loads(pickle.dumps(nlp)), copy.deepcopy(nlp)):
        doc = other(text)
        np.testing.assert_allclose(doc.tensor, expected.tensor, rtol=0, atol=1e-6)
        assert [(e.start, e.end, e.label_) for e in doc.ents] == [(e.start, e.end, e.label_) for e in expected.ents]
    component = pickle.loads(pickle.dumps(nlp.get_pipe("elmo")))
    assert isinstance(component, ElmoComponent)
    np.testing.assert_allclose(component.predict([nlp.make_doc(text)])[0], expected._.elmo_layers, rtol=0, atol=1e-6)


# ---------------------------------------------------------------- fine-tuning (R44)
@pytest.mark.parametrize("route", ["listener", "tok2vec_elmo"])
def test_training_with_a_biLM_the_user_unfroze_is_refused_not_silently_frozen(tiny_model_dir, route):
    from spacy_elmo.layers.elmo_layers import elmo_module

    from .conftest import examples, hash_embed_cnn, ner_config

    if route == "listener":
        nlp = make_ner_nlp(tiny_model_dir, steps=0)
        bilm = nlp.get_pipe("elmo").elmo.bilm
    else:  # the NER's own biLM, no shared component
        nlp = spacy.blank("en")
        tok2vec = {
            "@architectures": "spacy-elmo.Tok2VecElmo.v2",
            "elmo": {"@architectures": "spacy-elmo.ElmoLayers.v2", "path": str(tiny_model_dir)},
            "tok2vec": hash_embed_cnn(),
        }
        nlp.add_pipe("ner", config=ner_config(tok2vec=tok2vec))
        nlp.initialize(lambda: examples(nlp))
        (bilm,) = [elmo_module(node).bilm for node in nlp.get_pipe("ner").model.walk() if node.name == "elmo_layers"]
    text = "Mary lives in Paris ."
    before = nlp(text).tensor.copy() if route == "listener" else None
    nlp.update(examples(nlp), annotates=["elmo"] if route == "listener" else [])  # frozen: trains
    bilm.char_cnn.requires_grad_(True)  # the user expects the char CNN to fine-tune
    with pytest.raises(ValueError, match="requires_grad=True.*run the biLM frozen.*save_model_folder"):
        nlp.update(examples(nlp), annotates=["elmo"] if route == "listener" else [])
    doc = nlp(text)  # inference is unaffected
    if before is not None:
        np.testing.assert_allclose(doc.tensor, before, atol=1e-6, rtol=0)
    bilm.requires_grad_(False)
    nlp.update(examples(nlp), annotates=["elmo"] if route == "listener" else [])


# ---------------------------------------------------------------- torch's default dtype
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64], ids=str)
def test_the_component_loads_float32_under_another_default_dtype(tiny_model_dir, dtype):
    text = "The river bank flooded ."
    reference = make_nlp(tiny_model_dir)(text)._.elmo_layers
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        nlp = make_nlp(tiny_model_dir)
        layers = nlp(text)._.elmo_layers
        assert torch.get_default_dtype() == dtype
    finally:
        torch.set_default_dtype(before)
    assert {p.dtype for p in nlp.get_pipe("elmo").elmo.parameters()} == {torch.float32}
    assert layers.dtype == np.float32
    np.testing.assert_allclose(layers, reference, rtol=0, atol=1e-6)


# ---------------------------------------------------------------- repeated loads
RELOAD_SCRIPT = """
import gc
import spacy
import spacy_elmo  # noqa: F401

def rss_mb():
    gc.collect()
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

def cycle():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp("a b c")

cycle()
start = rss_mb()
gc.disable()  # spaCy pipelines are freed by the cyclic collector: here all at once, at the end
for _ in range(5):
    cycle()
gc.enable()
print(rss_mb() - start)
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc for the resident size")
def test_repeated_loads_give_their_memory_back():
    # A service that loads a pipeline per tenant or request: the freed models' heap goes back
    # to the OS with no call from the user (the default model: 11 MB of weights).
    result = subprocess.run([sys.executable, "-c", RELOAD_SCRIPT], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    grown_mb = float(result.stdout.split()[-1])
    assert grown_mb < 20, f"the resident size grew by {grown_mb:.1f} MB over 5 loads"
