"""examples/vectors/train_vectors.py: text -> word2vec -> a spaCy vectors folder (tiny, invented text)."""

from __future__ import annotations

import json
import random
import runpy
from collections import Counter

import pytest
import spacy

from ..conftest import REPO

SCRIPT = REPO / "examples" / "vectors" / "train_vectors.py"

WORDS = "the a cat dog sat ran on under mat house red big . , and".split()


def invented_text(n: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    # Zipf-like counts: some words fall under --min-count.
    weights = [1 / (rank + 1) ** 1.5 for rank in range(len(WORDS))]
    return [rng.choices(WORDS, weights, k=rng.randint(3, 12)) for _ in range(n)]


@pytest.fixture
def train_vectors():
    pytest.importorskip("gensim", reason='train_vectors.py needs gensim: pip install -e ".[vectors]"')
    return runpy.run_path(str(SCRIPT))["main"]


@pytest.mark.parametrize("pretokenized", [True, False])
def test_train_vectors_writes_a_spacy_vectors_folder_of_the_frequent_words(train_vectors, tmp_path, pretokenized):
    sentences = invented_text(300)
    source = tmp_path / "text.txt"
    source.write_text("".join(" ".join(s) + "\n" for s in sentences), encoding="utf-8")
    counts = Counter(w for s in sentences for w in s)
    frequent = {w for w, c in counts.items() if c >= 20}
    assert 3 < len(frequent) < len(counts)  # the test text has words on both sides of the cut
    out = tmp_path / "vectors"
    flags = ["--pretokenized"] if pretokenized else []
    assert (
        train_vectors([str(source), "--out", str(out), "--dim", "12", "--min-count", "20", "--epochs", "2", *flags])
        == 0
    )
    header = (out / "vectors.w2v.txt").read_text(encoding="utf-8").splitlines()[0]
    assert header == f"{len(frequent)} 12"  # word2vec text format: rows, width
    nlp = spacy.load(out / "spacy")
    assert nlp.vocab.vectors.shape == (len(frequent), 12) and nlp.vocab.vectors.n_keys == len(frequent)
    assert {nlp.vocab.strings[key] for key in nlp.vocab.vectors.keys()} == frequent
    info = json.loads((out / "train_vectors.json").read_text(encoding="utf-8"))
    assert (info["vocabulary"], info["dim"], info["min_count"], info["epochs"]) == (len(frequent), 12, 20, 2)
    # Raw text goes through the sentence splitter (spaCy's English rules): the same tokens here.
    assert info["tokens"] == sum(len(s) for s in sentences)


def test_train_vectors_refuses_a_missing_file_and_a_bad_width(train_vectors, tmp_path, capsys):
    with pytest.raises(SystemExit):
        train_vectors([str(tmp_path / "missing.txt"), "--out", str(tmp_path / "v")])
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "t.txt").write_text("a b\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        train_vectors([str(tmp_path / "t.txt"), "--out", str(tmp_path / "v"), "--dim", "0"])
    assert "--dim must be a positive integer; got 0" in capsys.readouterr().err


def test_train_vectors_without_a_word_over_min_count_says_so_and_leaves_no_sentences_file(train_vectors, tmp_path):
    # gensim stopped with a traceback ("you must first build vocabulary before training the
    # model"), leaving OUT/sentences.txt behind.
    source = tmp_path / "text.txt"
    source.write_text("a cat sat\non the mat\n", encoding="utf-8")
    out = tmp_path / "v"
    with pytest.raises(SystemExit) as stopped:
        train_vectors([str(source), "--out", str(out), "--dim", "4", "--min-count", "5"])
    assert str(stopped.value.code) == (
        "no word of the 6 tokens of the input is seen --min-count 5 times, so there is nothing to train; "
        "give a lower --min-count or more text."
    )
    assert list(out.iterdir()) == []
