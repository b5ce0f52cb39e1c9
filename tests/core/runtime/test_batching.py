from __future__ import annotations

import pytest

from elmo_core.runtime.batching import batches_by_token_budget


def test_every_index_once_and_budget_respected():
    lengths = [5, 1, 30, 7, 7, 0, 12, 3] * 5
    batches = batches_by_token_budget(lengths, 64)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        cost = len(batch) * (max(lengths[i] for i in batch) + 2)
        assert cost <= 64 or len(batch) == 1


def test_sorted_longest_first_and_stable():
    batches = batches_by_token_budget([3, 9, 3, 9], 1000)
    assert batches == [[1, 3, 0, 2]]


def test_oversized_sentence_gets_its_own_batch_and_cap_applies():
    assert batches_by_token_budget([100, 1, 1], 10) == [[0], [1, 2]]
    assert batches_by_token_budget([1, 1, 1], 1000, max_batch_size=2) == [[0, 1], [2]]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_budget(bad):
    with pytest.raises(ValueError, match="max_tokens must be a positive integer"):
        batches_by_token_budget([1], bad)


def test_with_chunks_a_row_counts_at_most_the_chunk_steps():
    """The biLM steps long rows `chunk_steps` at a time: a batch's cost is rows x min(longest + 2, chunk)."""
    lengths = [1024] * 40 + [300] * 3 + [25] * 10
    batches = batches_by_token_budget(lengths, 4096, chunk_steps=256)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert [len(b) for b in batches] == [16, 16, 16, 5]  # rows count min(length + 2, 256): 8 + 3 + 5 fit the third
    for batch in batches:
        assert len(batch) * min(max(lengths[i] for i in batch) + 2, 256) <= 4096
    assert [len(b) for b in batches_by_token_budget(lengths, 4096)][:2] == [3, 3]  # every step counted
    with pytest.raises(ValueError, match="chunk_steps must be a positive integer"):
        batches_by_token_budget(lengths, 4096, chunk_steps=0)
