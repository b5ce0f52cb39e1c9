"""spacy-elmo.ConllNerCorpus.v1 and `spacy train` of the example NER config on WikiGold."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import spacy

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
        sys.executable, "-m", "spacy", "train", str(EXAMPLE_CONFIG), "--output", str(output),
        "--paths.train", str(train), "--paths.dev", str(dev), "--paths.elmo", str(tiny_model_dir),
        "--training.max_steps", "4", "--training.eval_frequency", "2",
        "--components.ner.model.tok2vec.tok2vec.width", "32",
        "--components.ner.model.tok2vec.tok2vec.depth", "1",
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


def test_read_conll_ner_treats_whitespace_only_lines_as_sentence_breaks(tmp_path):
    # WNUT-17's train file separates some sentences with a line holding only a tab.
    path = tmp_path / "wnut_like.txt"
    path.write_text("Kim\tB-person\nsings\tO\n\t\nOslo\tB-location\nrocks\tO\n \r\n", encoding="utf-8")
    (doc,) = read_conll_ner(path)
    assert [[t.text for t in s] for s in doc.sents] == [["Kim", "sings"], ["Oslo", "rocks"]]
    assert [(e.text, e.label_) for e in doc.ents] == [("Kim", "person"), ("Oslo", "location")]
