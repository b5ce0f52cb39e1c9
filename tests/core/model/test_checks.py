"""`check_int`: the one wording of every integer argument check."""

import numpy as np
import pytest
import torch

from elmo_core import EmbedSettings, embed_sentences
from elmo_core.model.checks import check_int
from elmo_core.model.errors import OptionsError
from elmo_core.runtime.batching import batches_by_token_budget
from elmo_core.runtime.feature_cache import FeatureCache
from elmo_core.runtime.parts import serving_parts
from elmo_core.runtime.token_cache import TokenCache
from tests.conftest import make_tiny_elmo


@pytest.mark.parametrize("value", [1, 7, 10**12])
def test_positive_integers_pass(value):
    check_int("n", value)


@pytest.mark.parametrize("value", [0, -3, 1.0, 2.5, True, False, "3", None, [1]])
def test_anything_but_a_positive_int_is_refused_with_what_arrived(value):
    with pytest.raises(ValueError) as info:
        check_int("max_tokens", value)
    assert str(info.value) == f"max_tokens must be a positive integer; got {value!r}."


def test_the_minimum_sets_the_wording():
    check_int("seed", 0, minimum=0)
    with pytest.raises(ValueError, match=r"^seed must be a non-negative integer; got -1\.$"):
        check_int("seed", -1, minimum=0)
    check_int("max_size", 4, minimum=4)
    with pytest.raises(ValueError, match=r"^max_size must be an integer >= 4; got 3\.$"):
        check_int("max_size", 3, minimum=4)


def test_none_meaning_hint_and_error_class():
    check_int("width", None, none_ok=True)
    with pytest.raises(OptionsError) as info:
        check_int("cache", -1, minimum=0, none_ok=True, meaning="0 = off", hint="Try 0.", error=OptionsError)
    assert str(info.value) == "cache must be a non-negative integer (0 = off) or None; got -1. Try 0."


def test_an_option_that_may_be_left_out_says_so_instead_of_or_none():
    # A command's user cannot type None: `elmo train --max-steps 0` said "... or None".
    with pytest.raises(ValueError) as info:
        check_int("--max-steps", 0, none_ok=True)
    assert str(info.value) == "--max-steps must be a positive integer, or leave --max-steps out; got 0."


@pytest.mark.parametrize(
    "value", [np.int64(3), np.int32(3), np.int16(3), np.uint8(3), torch.tensor(3), torch.tensor(3, dtype=torch.int32)]
)
def test_numpy_and_torch_integer_scalars_pass_as_the_int_they_hold(value):
    checked = check_int("batch_size", value)
    assert checked == 3 and type(checked) is int


@pytest.mark.parametrize(
    "value", [np.bool_(True), torch.tensor(True), np.float64(3.0), torch.tensor(3.0), np.array([3])]
)
def test_numpy_and_torch_values_that_are_not_one_integer_are_refused(value):
    with pytest.raises(ValueError, match=r"^batch_size must be a positive integer; got "):
        check_int("batch_size", value)


def test_numpy_integers_are_taken_for_sizes_in_every_core_entry():
    elmo = make_tiny_elmo(dropout=0.0)
    sentences = [["The", "river", "bank", "."], ["a", "b"], ["x"]]
    want = embed_sentences(elmo, sentences, layers="top")
    got = embed_sentences(
        elmo,
        sentences,
        layers=np.int64(2),
        batch_tokens=np.int64(8),
        batch_size=np.int32(2),
        window_tokens=np.int64(64),
    )
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    settings = EmbedSettings(batch_tokens=np.int32(8), window_tokens=np.int16(16), window_context=np.int64(2))
    assert type(settings.batch_tokens) is int and type(settings.window_context) is int
    assert batches_by_token_budget([3, 2, 1], np.int64(4), max_batch_size=np.int64(1)) == [[0], [1], [2]]
    assert serving_parts(token_cache_words=np.int64(5))["token_cache"].max_words == 5
    assert type(TokenCache(np.int32(7)).max_words) is int and FeatureCache(np.uint16(9)).max_bytes == 9
