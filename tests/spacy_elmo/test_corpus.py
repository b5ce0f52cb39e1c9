"""spacy-elmo.ConllNerCorpus.v1 and `spacy train` of the example NER config on WikiGold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.tokens import DocBin

from spacy_elmo import get_scalar_mix_weights
from spacy_elmo.corpus import ConllNerCorpus, read_conll_ner

from ..conftest import REPO
from .conftest import NUM_LAYERS

EXAMPLE_CONFIG = REPO / "examples" / "spacy_elmo" / "ner_elmo.cfg"

IOB1 = """-DOCSTART- O

John I-PER
Smith I-PER
visited I-LOC
Paris I-LOC
. O

He O
left O
. O

-DOCSTART- O

Acme I-ORG
Corp I-ORG
hired O
Ann I-PER
. O
"""

IOB2_NO_DOCSTART = """Acme NNP B-NP B-ORG
hires VBZ B-VP O
Danish JJ B-NP B-MISC
staff NN I-NP O
. . O O

Maria NNP B-NP B-PER
Lopez NNP I-NP I-PER
"""


def test_reads_iob1_with_docstart_lines_as_documents(tmp_path):
    path = tmp_path / "a.conll"
    path.write_text(IOB1, encoding="utf-8")
    docs = read_conll_ner(path)
    assert len(docs) == 2
    first, second = docs
    assert [t.text for t in first] == ["John", "Smith", "visited", "Paris", ".", "He", "left", "."]
    # IOB1 without B- tags: adjacent same-type tokens form one entity (as released).
    assert [(e.text, e.label_) for e in first.ents] == [("John Smith", "PER"), ("visited Paris", "LOC")]
    assert [t.is_sent_start for t in first][5] is True
    assert [(e.text, e.label_) for e in second.ents] == [("Acme Corp", "ORG"), ("Ann", "PER")]


def test_reads_iob2_four_columns_in_groups_of_sentences(tmp_path):
    path = tmp_path / "b.conll"
    path.write_text(IOB2_NO_DOCSTART, encoding="utf-8")
    (doc,) = read_conll_ner(path, n_sents=10)
    assert [(e.text, e.label_) for e in doc.ents] == [("Acme", "ORG"), ("Danish", "MISC"), ("Maria Lopez", "PER")]


def _long_documents_conll(sentences_per_document: tuple[int, ...]) -> tuple[str, list[list[str]], list[tuple]]:
    """A generated CoNLL file: -DOCSTART- lines, documents of many sentences.

    Returns the text, its sentences (tokens) and its entities (text, label), in order.
    """
    lines, sentences, entities = [], [], []
    for d, count in enumerate(sentences_per_document):
        lines += ["-DOCSTART- -X- O O", ""]  # the delimiter spaCy's converter knows
        for k in range(count):
            words = [f"Name{d}x{k}", f"Other{d}x{k}", "met", f"Town{d}x{k}", "today", "."]
            tags = ["B-PER", "I-PER", "O", "B-LOC", "O", "O"]
            lines += [f"{w} NNP B-NP {t}" for w, t in zip(words, tags)] + [""]
            sentences.append(words)
            entities += [(f"Name{d}x{k} Other{d}x{k}", "PER"), (f"Town{d}x{k}", "LOC")]
    return "\n".join(lines) + "\n", sentences, entities


@pytest.mark.parametrize("route", ["conll", "spacy_convert_docbin"])
@pytest.mark.parametrize("n_sents", [1, 10])
def test_documents_of_many_sentences_become_docs_of_at_most_n_sents_sentences(tmp_path, route, n_sents):
    from spacy.training.converters import conll_ner_to_docs

    text, sentences, entities = _long_documents_conll((23, 3))
    path = tmp_path / "docs.conll"
    path.write_text(text, encoding="utf-8")
    if route == "spacy_convert_docbin":  # what `spacy convert --converter ner` writes: whole documents
        whole = list(conll_ner_to_docs(text, n_sents=n_sents, no_print=True))
        assert [len(list(doc.sents)) for doc in whole] == [23, 3]
        path = tmp_path / "docs.spacy"
        DocBin(docs=whole).to_disk(path)
    examples = list(ConllNerCorpus(path, n_sents=n_sents)(spacy.blank("en")))
    docs = [eg.reference for eg in examples]
    per_doc = [[[t.text for t in sent] for sent in doc.sents] for doc in docs]
    # Document 0 (23 sentences) in groups of n_sents, then document 1 (3) on its own.
    expected_sizes = [1] * 26 if n_sents == 1 else [10, 10, 3, 3]
    assert [len(s) for s in per_doc] == expected_sizes
    assert [sent for doc in per_doc for sent in doc] == sentences  # every sentence, in order, once
    assert [(e.text, e.label_) for doc in docs for e in doc.ents] == entities
    assert max(len(doc) for doc in docs) == 6 * min(n_sents, 23)
    for eg in examples:
        assert [t.text for t in eg.predicted] == [t.text for t in eg.reference]


def test_a_cut_never_splits_an_entity_that_runs_over_a_sentence_start():
    from spacy.tokens import Doc, Span

    from spacy_elmo.corpus import split_into_sentence_groups

    nlp = spacy.blank("en")
    doc = Doc(nlp.vocab, words=["a", "b", "New", "York", "c", "d"], sent_starts=[1, 0, 0, 1, 0, 1])
    doc.ents = [Span(doc, 2, 4, label="LOC")]
    pieces = split_into_sentence_groups([doc], 1)
    assert [[t.text for t in piece] for piece in pieces] == [["a", "b", "New", "York", "c"], ["d"]]
    assert [(e.text, e.label_) for e in pieces[0].ents] == [("New York", "LOC")]
    with pytest.raises(ValueError, match="n_sents must be an integer >= 0.*got -1"):
        ConllNerCorpus(None, n_sents=-1)


@pytest.mark.parametrize("config", ["ner_elmo.cfg", "ner_elmo_vectors.cfg", "add_elmo_to_pipeline.cfg"])
def test_example_configs_cache_the_layers_and_read_sentence_sized_docs(tmp_path, config):
    """The README's training advice, in the configs themselves: a feature cache, and sentence-sized Docs."""
    from spacy.util import load_config, registry

    cfg = load_config(REPO / "examples" / "spacy_elmo" / config, interpolate=False)
    assert int(cfg["components"]["elmo"]["model"]["cache_bytes"]) >= 1 << 30  # CoNLL-2003 needs 0.8 GB
    text, sentences, _ = _long_documents_conll((30,))
    path = tmp_path / "one_document.conll"
    path.write_text(text, encoding="utf-8")
    for split in ("train", "dev"):
        reader = dict(cfg["corpora"][split], path=str(path))
        corpus = registry.resolve({"corpus": reader})["corpus"]
        docs = [eg.reference for eg in corpus(spacy.blank("en"))]
        assert sum(len(list(doc.sents)) for doc in docs) == len(sentences)
        assert max(len(list(doc.sents)) for doc in docs) <= 10, split


def test_reader_gives_examples_with_the_files_tokens(tmp_path):
    path = tmp_path / "a.conll"
    path.write_text(IOB1, encoding="utf-8")
    nlp = spacy.blank("en")
    examples = list(ConllNerCorpus(path)(nlp))
    assert len(examples) == 2
    assert [t.text for t in examples[0].predicted] == [t.text for t in examples[0].reference]
    assert not examples[0].predicted.ents and examples[0].reference.ents
    assert examples[0].predicted.vocab is nlp.vocab
    assert len(list(ConllNerCorpus(path, limit=1)(nlp))) == 1


def test_reader_errors_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="missing.conll does not exist"):
        read_conll_ner(tmp_path / "missing.conll")
    with pytest.raises(ValueError, match="paths.train"):
        list(ConllNerCorpus(None)(spacy.blank("en")))


def _split_wikigold(source: Path, tmp_path: Path) -> tuple[Path, Path]:
    """WikiGold has no split: the first 8 articles train, the next 2 evaluate."""
    articles = [a for a in source.read_text(encoding="utf-8").split("-DOCSTART- O\n") if a.strip()]
    train, dev = tmp_path / "train.conll", tmp_path / "dev.conll"
    train.write_text("".join("-DOCSTART- O\n" + a for a in articles[:8]), encoding="utf-8")
    dev.write_text("".join("-DOCSTART- O\n" + a for a in articles[8:10]), encoding="utf-8")
    return train, dev


def test_spacy_train_of_the_example_config_on_wikigold(wikigold, tiny_model_dir, tmp_path):
    train, dev = _split_wikigold(wikigold, tmp_path)
    output = tmp_path / "trained"
    command = [
        sys.executable,
        "-m",
        "spacy",
        "train",
        str(EXAMPLE_CONFIG),
        "--output",
        str(output),
        "--paths.train",
        str(train),
        "--paths.dev",
        str(dev),
        "--paths.elmo",
        str(tiny_model_dir),
        "--training.max_steps",
        "4",
        "--training.eval_frequency",
        "2",
        "--components.ner.model.tok2vec.encode.width",
        "32",
        "--components.ner.model.tok2vec.encode.depth",
        "1",
    ]
    # A fresh `python -m spacy` finds the factory, architectures and reader through entry
    # points. One torch thread: tiny models are far faster so on a busy machine.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "Set annotations on update for: ['sentencizer', 'elmo']" in done.stdout

    nlp = spacy.load(output / "model-last")
    assert nlp.pipe_names == ["sentencizer", "elmo", "ner"]
    mix = get_scalar_mix_weights(nlp, "ner")
    assert mix.normalized_weights.shape == (NUM_LAYERS,)
    np.testing.assert_allclose(mix.normalized_weights.sum(), 1.0, rtol=1e-6)
    assert np.abs(mix.scalar_weights).max() > 0 and mix.gamma != 1.0  # learned, not the start
    doc = nlp("The band played in London .")
    assert doc.tensor.shape == (len(doc), 16)
    assert set(nlp.get_pipe("ner").labels) == {"LOC", "MISC", "ORG", "PER"}
    assert_elmo_enters_before_the_encoder(nlp)


def assert_elmo_enters_before_the_encoder(nlp) -> None:
    """ELMo joins the NER's embeddings, before its CNN encoder (1 layer of window 1 in these tests).

    A change to the ELMo layers of token 2 reaches tokens 1..3 of the NER's tok2vec output,
    and no others (at the encoder's output it would reach token 2 alone).
    """
    doc = nlp("The band played in London .")
    tok2vec = nlp.get_pipe("ner").model.get_ref("tok2vec")
    before = tok2vec.predict([doc])
    doc._.elmo_layers = doc._.elmo_layers.copy()
    doc._.elmo_layers[:, 2] *= 3.0
    changed = np.abs(tok2vec.predict([doc]) - before).max(axis=1) > 1e-6
    assert changed.tolist() == [abs(i - 2) <= 1 for i in range(len(doc))]


def test_read_conll_ner_treats_whitespace_only_lines_as_sentence_breaks(tmp_path):
    # WNUT-17's train file separates some sentences with a line holding only a tab.
    path = tmp_path / "wnut_like.txt"
    path.write_text("Kim\tB-person\nsings\tO\n\t\nOslo\tB-location\nrocks\tO\n \r\n", encoding="utf-8")
    (doc,) = read_conll_ner(path)
    assert [[t.text for t in s] for s in doc.sents] == [["Kim", "sings"], ["Oslo", "rocks"]]
    assert [(e.text, e.label_) for e in doc.ents] == [("Kim", "person"), ("Oslo", "location")]


def _docbin(tmp_path: Path, name: str = "train.spacy") -> Path:
    conll = tmp_path / "source.conll"
    conll.write_text(IOB1, encoding="utf-8")
    path = tmp_path / name
    DocBin(docs=read_conll_ner(conll)).to_disk(path)
    return path


def test_reader_takes_spacy_docbin_files_like_conll_files(tmp_path):
    conll = tmp_path / "a.conll"
    conll.write_text(IOB1, encoding="utf-8")
    nlp = spacy.blank("en")
    from_conll = list(ConllNerCorpus(conll)(nlp))
    from_docbin = list(ConllNerCorpus(_docbin(tmp_path))(nlp))
    assert len(from_docbin) == len(from_conll) == 2
    for a, b in zip(from_docbin, from_conll):
        assert [t.text for t in a.predicted] == [t.text for t in b.predicted]
        assert [(e.text, e.label_) for e in a.reference.ents] == [(e.text, e.label_) for e in b.reference.ents]
        assert not a.predicted.ents
    assert len(list(ConllNerCorpus(_docbin(tmp_path), limit=1)(nlp))) == 1


def test_a_wrong_corpus_file_is_one_clear_message(tmp_path):
    nlp = spacy.blank("en")
    docbin = _docbin(tmp_path, "looks_like.conll")  # a DocBin under a CoNLL name
    with pytest.raises(ValueError, match=r"looks_like.conll is not UTF-8 text .* \.spacy DocBin"):
        list(ConllNerCorpus(docbin)(nlp))
    (tmp_path / "text.spacy").write_text(IOB1, encoding="utf-8")  # CoNLL text under a DocBin name
    with pytest.raises(ValueError, match=r"text.spacy is not a spaCy DocBin .* spacy convert"):
        list(ConllNerCorpus(tmp_path / "text.spacy")(nlp))
    with pytest.raises(ValueError, match="is a folder; give the path of a file"):
        list(ConllNerCorpus(tmp_path)(nlp))
    (tmp_path / "prose.txt").write_text("Just a sentence of prose.\nAnd another one here.\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"prose.txt is not a CoNLL file: line 2 .* 4 columns, line 1 5\..*DocBin"):
        list(ConllNerCorpus(tmp_path / "prose.txt")(nlp))


def test_the_spacy_reader_and_elmo_probe_refuse_prose_with_one_message(tmp_path):
    from elmo_core import ElmoError
    from elmo_core.apps.probe import read_conll_column

    path = tmp_path / "raw.txt"
    path.write_text("The river bank was quiet today .\nShe paid at the bank .\n", encoding="utf-8")
    with pytest.raises(ElmoError) as probe_error:
        read_conll_column(path, 1)
    assert "raw.txt is not a CoNLL file: line 2 " in str(probe_error.value)
    with pytest.raises(ValueError) as reader_error:
        read_conll_ner(path)
    assert str(reader_error.value).startswith(str(probe_error.value))


def test_byte_order_mark_and_windows_line_endings_change_nothing_in_conll_files(tmp_path):
    plain, marked = tmp_path / "plain.conll", tmp_path / "marked.conll"
    plain.write_text(IOB1, encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + IOB1.replace("\n", "\r\n").encode("utf-8"))
    a, b = read_conll_ner(plain), read_conll_ner(marked)
    assert [[t.text for t in d] for d in a] == [[t.text for t in d] for d in b]
    assert [[(e.text, e.label_) for e in d.ents] for d in a] == [[(e.text, e.label_) for e in d.ents] for d in b]


def spacy_train(config: Path, output: Path, model_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m spacy train` of `config` for 2 steps, with a small NER tok2vec and one torch thread."""
    command = [
        sys.executable,
        "-m",
        "spacy",
        "train",
        str(config),
        "--output",
        str(output),
        "--paths.elmo",
        str(model_dir),
        "--training.max_steps",
        "2",
        "--training.eval_frequency",
        "1",
        "--components.ner.model.tok2vec.encode.width",
        "32",
        "--components.ner.model.tok2vec.encode.depth",
        "1",
        *args,
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done


def test_spacy_train_of_the_example_config_on_spacy_docbin_files(tiny_model_dir, tmp_path):
    train = _docbin(tmp_path, "train.spacy")
    output = tmp_path / "trained"
    spacy_train(EXAMPLE_CONFIG, output, tiny_model_dir, "--paths.train", str(train), "--paths.dev", str(train))
    nlp = spacy.load(output / "model-last")
    assert set(nlp.get_pipe("ner").labels) == {"LOC", "ORG", "PER"}
    assert_elmo_enters_before_the_encoder(nlp)


ADD_ELMO_CONFIG = REPO / "examples" / "spacy_elmo" / "add_elmo_to_pipeline.cfg"


def _base_pipeline(tmp_path: Path) -> tuple[Path, Path]:
    """A small trained pipeline of a user's own (tok2vec, tagger, ner) and its training data."""
    from spacy.training import Example

    conll = tmp_path / "source.conll"
    conll.write_text(IOB1, encoding="utf-8")
    docs = read_conll_ner(conll)
    for doc in docs:
        for token in doc:
            token.tag_ = "NNP" if token.text[0].isupper() else "X"
    data = tmp_path / "data.spacy"
    DocBin(docs=docs).to_disk(data)
    nlp = spacy.blank("en")
    nlp.add_pipe("tok2vec")
    nlp.add_pipe("tagger")
    nlp.add_pipe("ner")
    examples = [Example(nlp.make_doc(doc.text), doc) for doc in docs]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    base = tmp_path / "base"
    nlp.to_disk(base)
    return base, data


def test_adding_elmo_to_an_existing_pipeline_keeps_the_sourced_components(tiny_model_dir, tmp_path):
    base, data = _base_pipeline(tmp_path)
    output = tmp_path / "with_elmo"
    spacy_train(
        ADD_ELMO_CONFIG,
        output,
        tiny_model_dir,
        "--paths.base",
        str(base),
        "--paths.train",
        str(data),
        "--paths.dev",
        str(data),
    )
    before, after = spacy.load(base), spacy.load(output / "model-last")
    assert after.pipe_names == ["tok2vec", "tagger", "elmo", "ner"]
    for name in ("tok2vec", "tagger"):  # sourced and frozen: the very same weights
        assert after.get_pipe(name).model.to_bytes() == before.get_pipe(name).model.to_bytes(), name
    text = "John Smith visited Paris ."
    assert [t.tag_ for t in after(text)] == [t.tag_ for t in before(text)]
    assert get_scalar_mix_weights(after, "ner").normalized_weights.shape == (NUM_LAYERS,)  # the new NER reads ELMo
    assert_elmo_enters_before_the_encoder(after)


VECTORS_CONFIG = REPO / "examples" / "spacy_elmo" / "ner_elmo_vectors.cfg"


def test_the_elmo_and_vectors_config_is_the_elmo_config_with_static_vectors():
    from spacy.util import load_config

    elmo, both = load_config(EXAMPLE_CONFIG, interpolate=False), load_config(VECTORS_CONFIG, interpolate=False)
    embed = both["components"]["ner"]["model"]["tok2vec"]["embed"]["tok2vec"]
    assert embed["@architectures"] == "spacy.MultiHashEmbed.v2" and embed["include_static_vectors"] is True
    assert both["initialize"]["vectors"] == "${paths.vectors}"
    embed["include_static_vectors"] = False
    assert both == elmo  # nothing else differs


def test_spacy_train_of_the_elmo_and_vectors_config_reads_the_vectors(wikigold, tiny_model_dir, tmp_path):
    train, dev = _split_wikigold(wikigold, tmp_path)
    vectors = spacy.blank("en")
    rng = np.random.default_rng(0)
    for word in ("the", "The", "London", "band", "in"):
        vectors.vocab.set_vector(word, rng.standard_normal(6).astype("float32"))
    vectors.to_disk(tmp_path / "vectors")
    output = tmp_path / "trained"
    command = [sys.executable, "-m", "spacy", "train", str(VECTORS_CONFIG), "--output", str(output)]
    command += ["--paths.train", str(train), "--paths.dev", str(dev), "--paths.elmo", str(tiny_model_dir)]
    command += ["--paths.vectors", str(tmp_path / "vectors"), "--training.max_steps", "2"]
    command += ["--components.ner.model.tok2vec.encode.width", "32", "--components.ner.model.tok2vec.encode.depth", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    with pytest.warns(UserWarning, match="has static word vectors, so spaCy's token.vector"):  # as the config says
        nlp = spacy.load(output / "model-last")
    assert (nlp.vocab.vectors.n_keys, nlp.vocab.vectors.shape[1]) == (5, 6) and nlp.vocab["London"].has_vector
    # The static vectors reach the NER: changing London's row changes its tok2vec output.
    tok2vec = nlp.get_pipe("ner").model.get_ref("tok2vec")
    doc = nlp("The band played in London .")
    before = tok2vec.predict([doc])
    nlp.vocab.set_vector("London", nlp.vocab["London"].vector * 3 + 1)
    changed = np.abs(tok2vec.predict([nlp("The band played in London .")]) - before).max(axis=1) > 1e-6
    assert changed[4] and not changed[0]  # London moves; "The" (4 tokens away, window 1 x depth 1) does not
    assert_elmo_enters_before_the_encoder(nlp)


def test_adding_elmo_to_a_pipeline_scores_only_entities():
    """The corpus holds entities only: a sourced tagger, parser, ... would score 0.00 in the table."""
    from spacy.language import Language
    from spacy.util import combine_score_weights, load_config

    spacy.blank("en")  # registers spaCy's factories
    cfg = load_config(ADD_ELMO_CONFIG, interpolate=False)
    sourced = ["tok2vec", "tagger", "attribute_ruler", "lemmatizer", "morphologizer", "parser", "senter", "ner"]
    defaults = [Language.get_factory_meta(name).default_score_weights for name in sourced]
    weights = combine_score_weights(defaults, cfg["training"]["score_weights"])
    shown = {name for name, weight in weights.items() if weight is not None}  # spaCy's ConsoleLogger's rule
    assert shown == {"ents_f", "ents_p", "ents_r"}
