from __future__ import annotations

from pathlib import Path

import pytest

from elmo_core.apps.training.vocab import SPECIAL_TOKENS, Vocabulary


def test_vocabulary_puts_specials_first_then_words_by_count():
    vocab = Vocabulary.build([["b", "a", "b"], ["c", "b", "a"]])
    assert vocab.tokens == ["<S>", "</S>", "<UNK>", "b", "a", "c"]
    assert vocab.counts == [2, 2, 0, 3, 2, 1]
    assert (vocab.bos_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2)


def test_vocabulary_max_size_and_min_count_count_dropped_words_as_unknown():
    sentences = [["a"] * 5 + ["b"] * 3 + ["c"] * 2 + ["d"]]
    assert Vocabulary.build(sentences, max_size=5).tokens[3:] == ["a", "b"]
    by_count = Vocabulary.build(sentences, min_count=2)
    assert by_count.tokens[3:] == ["a", "b", "c"]
    assert by_count.counts[2] == 1  # the one "d"


def test_vocabulary_encode_maps_unknown_words_to_unk():
    vocab = Vocabulary(list(SPECIAL_TOKENS) + ["the", "cat"])
    assert vocab.encode(["the", "dog", "cat"]) == [3, 2, 4]
    assert vocab.decode([0, 3, 1]) == ["<S>", "the", "</S>"]
    assert "cat" in vocab and "dog" not in vocab and len(vocab) == 5


@pytest.mark.parametrize("with_counts", [True, False])
def test_vocabulary_round_trips_through_vocab_txt(tmp_path, with_counts):
    vocab = Vocabulary.build([["naïve", "x", "😀", "x"], ["<UNK>", "."]])
    if not with_counts:
        vocab = Vocabulary(vocab.tokens)
    path = tmp_path / "vocab.txt"
    vocab.save(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:3] == (["<S>\t2", "</S>\t2"] if with_counts else ["<S>", "</S>"]) + lines[2:3]
    loaded = Vocabulary.load(path)
    assert loaded == vocab and loaded.counts == vocab.counts


def test_vocabulary_reads_a_bilm_tf_file_without_counts(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("<S>\n</S>\n<UNK>\nthe\n,\n", encoding="utf-8")
    assert Vocabulary.load(path).encode(["the", ","]) == [3, 4]


def test_vocabulary_rejects_a_file_without_special_tokens_first(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("the\n<S>\n</S>\n<UNK>\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"must start with \['<S>', '</S>', '<UNK>'\]"):
        Vocabulary.load(path)


def test_vocabulary_rejects_repeated_and_unsaveable_tokens():
    with pytest.raises(ValueError, match="unique"):
        Vocabulary(list(SPECIAL_TOKENS) + ["a", "a"])
    with pytest.raises(ValueError, match="tab or newline"):
        Vocabulary(list(SPECIAL_TOKENS) + ["a\tb"])
    with pytest.raises(ValueError, match="max_size"):
        Vocabulary.build([["a"]], max_size=3)


def test_a_save_that_fails_midway_leaves_the_earlier_vocab_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "vocab.txt"
    Vocabulary([*SPECIAL_TOKENS, "a", "b"]).save(path)
    before = path.read_bytes()

    def write_half_then_die(self, text, encoding=None):
        with open(self, "w", encoding=encoding) as f:
            f.write(text[: len(text) // 2])
        raise KeyboardInterrupt  # a Ctrl-C halfway through the write

    monkeypatch.setattr(Path, "write_text", write_half_then_die)
    with pytest.raises(KeyboardInterrupt):
        Vocabulary([*SPECIAL_TOKENS, "a", "b", "c", "d"]).save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vocab.txt"]
