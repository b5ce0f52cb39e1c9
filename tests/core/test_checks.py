"""`check_int`: the one wording of every integer argument check."""

import pytest

from elmo_core.model.checks import check_int
from elmo_core.model.errors import OptionsError


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
