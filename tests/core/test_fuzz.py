"""Property-based checks over token lists drawn from all of Unicode (hypothesis).

What an empty-string token means: a real token with no characters. It takes one
position and one output row like any other token; its character ids are
begin-of-word, end-of-word, then padding characters (never the all-zero row of a padded
position), so outputs stay aligned with inputs. Whitespace and control characters are
ordinary bytes, and a lone surrogate (not encodable as UTF-8) is dropped from its token.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elmo_core import embed_sentences, words_to_char_ids
from elmo_core.model.characters import word_to_char_ids
from tests.conftest import make_tiny_elmo

ODD_TOKENS = [
    "",
    " ",
    "\t",
    "\n",
    "\r\n",
    "\x00",
    "\x7f",
    "\u200b",
    "\u200d",
    "\ufeff",
    "\u00a0",
    "👨‍👩‍👧‍👦",
    "🏳️‍🌈",
    "👍🏽",
    "e\u0301\u0302\u0303",
    "\u0301",
    "שלום",
    "مرحبا",
    "\u202eabc\u202c",
    "x" * 300,
    "中" * 100,
    "😀" * 80,
    "<S>",
    "</S>",
    "\ud800",
    "a\udfffb",
]

# Any code point (surrogates too), short and very long tokens, and the odd ones above.
tokens = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=()), max_size=12),
    st.text(alphabet=st.characters(exclude_categories=()), min_size=100, max_size=400),
    st.sampled_from(ODD_TOKENS),
)
sentences = st.lists(tokens, max_size=8)
batches = st.lists(sentences, min_size=1, max_size=6)

FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

ELMO = make_tiny_elmo()


@FUZZ
@given(batch=batches, batch_size=st.sampled_from([1, 2, 3, None]))
def test_any_tokens_embed_one_finite_row_each_whatever_the_batch(batch, batch_size):
    out = embed_sentences(ELMO, batch, layers="all", batch_size=batch_size)
    assert len(out) == len(batch)
    for sentence, vectors in zip(batch, out):
        assert vectors.shape == (3, len(sentence), 16) and vectors.dtype == np.float32
        assert np.isfinite(vectors).all()
        alone = embed_sentences(ELMO, [sentence], layers="all")[0]
        np.testing.assert_allclose(vectors, alone, atol=1e-5, rtol=1e-4)


@FUZZ
@given(sentence=sentences)
def test_char_ids_of_any_token_follow_the_byte_formula(sentence):
    char_ids, mask = words_to_char_ids([sentence])
    assert char_ids.shape == (1, len(sentence), 50) and mask.sum() == len(sentence)
    for k, token in enumerate(sentence):
        row = char_ids[0, k].tolist()
        assert row == list(word_to_char_ids(token)) and all(1 <= i <= 261 for i in row)
        if token in ("<S>", "</S>"):
            continue
        data = token.encode("utf-8", "ignore")[:48]
        assert row == [259, *(b + 1 for b in data), 260] + [261] * (48 - len(data))


def test_empty_token_is_a_real_position_not_padding():
    assert list(word_to_char_ids("")) == [259, 260] + [261] * 48
    out = embed_sentences(ELMO, [["a", "", "b"], [""], []], layers="all")
    assert [o.shape[1] for o in out] == [3, 1, 0]
    assert np.abs(out[1]).sum() > 0  # not the zero vector of a padded position
    np.testing.assert_allclose(out[0][0, 1], out[1][0, 0], atol=1e-6, rtol=0)  # layer 0: the token alone
