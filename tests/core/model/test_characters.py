from __future__ import annotations

import pytest
import torch

from elmo_core import words_to_char_ids
from elmo_core.model.characters import word_to_char_ids

BOW, EOW, PAD = 259, 260, 261  # after the +1 offset


def reference(word: str) -> list[int]:
    """docs/bilm_tf.md §1, written out: BOW, first min(48, nbytes) UTF-8 bytes + 1, EOW, PAD."""
    data = word.encode("utf-8")[:48]
    ids = [BOW] + [b + 1 for b in data] + [EOW]
    return ids + [PAD] * (50 - len(ids))


def test_boundary_tokens_match_allennlp_indexer():
    assert list(word_to_char_ids("<S>")) == [259, 257, 260] + [261] * 47
    assert list(word_to_char_ids("</S>")) == [259, 258, 260] + [261] * 47


def test_non_ascii_token_matches_allennlp_indexer():
    assert list(word_to_char_ids("Āt")) == [259, 197, 129, 117, 260] + [261] * 45


def test_empty_token_is_begin_and_end_of_word():
    assert list(word_to_char_ids("")) == [259, 260] + [261] * 48


# Bytes, not characters, are counted and cut.
@pytest.mark.parametrize(
    "word", ["中华人民共和国", "中" * 16, "中" * 17, "😀" * 13, "a" * 48, "a" * 49, "naïve", "x" * 10000]
)
def test_char_ids_follow_the_byte_formula(word):
    char_ids, mask = words_to_char_ids([[word]])
    assert char_ids.shape == (1, 1, 50)
    assert mask.tolist() == [[True]]
    assert char_ids[0, 0].tolist() == reference(word)
    assert 0 <= int(char_ids.min()) and int(char_ids.max()) < 262


def test_48_and_49_byte_words_collide_as_documented():
    assert word_to_char_ids("a" * 48) == word_to_char_ids("a" * 49)


def test_multibyte_character_cut_in_the_middle():
    # 17 three-byte characters = 51 bytes: the 17th is cut, keeping none of its bytes here
    # because 48 is a multiple of 3; with a leading ASCII byte the cut splits a character.
    ids = word_to_char_ids("a" + "中" * 16)
    assert ids[1 : 1 + 48] == tuple(b + 1 for b in ("a" + "中" * 16).encode()[:48])
    assert ids[49] == EOW


def test_lone_surrogate_is_dropped():
    assert word_to_char_ids("a\ud800b") == word_to_char_ids("ab")


def test_batch_is_right_padded_with_zero_positions():
    char_ids, mask = words_to_char_ids([["a", "b", "c"], [], ["d"]])
    assert char_ids.shape == (3, 3, 50) and char_ids.dtype == torch.long
    assert mask.tolist() == [[True, True, True], [False, False, False], [True, False, False]]
    assert int(char_ids[1].abs().sum()) == 0
    assert int(char_ids[2, 1:].abs().sum()) == 0


def test_no_sentences_gives_empty_batch():
    char_ids, mask = words_to_char_ids([])
    assert char_ids.shape == (0, 0, 50) and mask.shape == (0, 0)


@pytest.mark.parametrize(
    "bad, match",
    [
        ("hello world", "list of sentences"),
        (["hello world"], "sentence 0 must be a list of token strings"),
        ([["a", 3]], "every token must be a str"),
    ],
)
def test_bad_sentences_raise_clear_errors(bad, match):
    with pytest.raises(TypeError, match=match):
        words_to_char_ids(bad)
