"""`elmo_core.model.recurrence.dropout.fast_dropout`: F.dropout's contract, with 16 random bits per element."""

from __future__ import annotations

import math

import pytest
import torch

from elmo_core.model.recurrence.dropout import DROPOUT_LEVELS, fast_dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.0001])
def test_the_dropped_fraction_is_p_rounded_to_16_bits_in_every_byte_lane(p):
    torch.manual_seed(0)
    n = 1 << 22
    rounded = round(p * DROPOUT_LEVELS) / DROPOUT_LEVELS
    dropped = fast_dropout(torch.ones(n), p) == 0
    # Each of a 64-bit word's four 16-bit lanes is its own coin: a generator call that left
    # the top lane's sign bit clear (torch's random_() without a range) would drop nothing there.
    for lane in range(4):
        share = dropped[lane::4].double().mean().item()
        sigma = math.sqrt(rounded * (1 - rounded) / (n / 4))
        assert abs(share - rounded) < 5 * sigma, (lane, share, rounded)


def test_kept_elements_are_scaled_by_the_reciprocal_of_the_rounded_keep_rate():
    torch.manual_seed(1)
    x = torch.randn(3, 5, 7, dtype=torch.float64)  # 105 elements: not a multiple of 4
    y = fast_dropout(x, 0.1)
    kept = y != 0
    scale = DROPOUT_LEVELS / (DROPOUT_LEVELS - 6554)  # round(0.1 * 2**16) = 6554
    assert y.shape == x.shape and y.dtype == x.dtype
    torch.testing.assert_close(y[kept], x[kept] * scale, rtol=0, atol=0)
    assert 0 < int((~kept).sum()) < 105


def test_the_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(2)
    x = torch.randn(64, 33, requires_grad=True)
    y = fast_dropout(x, 0.3)
    y.backward(torch.ones_like(y))
    scale = DROPOUT_LEVELS / (DROPOUT_LEVELS - round(0.3 * DROPOUT_LEVELS))
    torch.testing.assert_close(x.grad, (y != 0).float() * scale)


def test_the_same_generator_state_gives_the_same_mask_and_a_new_state_another():
    x = torch.randn(1000)
    torch.manual_seed(3)
    first = fast_dropout(x, 0.2)
    second = fast_dropout(x, 0.2)
    torch.manual_seed(3)
    assert torch.equal(fast_dropout(x, 0.2), first)
    assert not torch.equal(first, second)


def test_off_in_eval_and_at_zero_all_zeros_at_one_and_a_bad_rate_is_refused():
    x = torch.randn(10)
    assert fast_dropout(x, 0.5, training=False) is x
    assert fast_dropout(x, 0.0) is x
    assert torch.equal(fast_dropout(x, 1.0), torch.zeros(10))
    with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
        fast_dropout(x, 1.5)
