"""Long inference batches stepped a chunk of steps at a time (elmo_core.model.recurrence.time_chunks)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import elmo_core.model.recurrence as recurrence_package
from elmo_core import Elmo, words_to_char_ids
from elmo_core.model.recurrence import Recurrence
from elmo_core.model.recurrence.lstm import input_block_steps
from elmo_core.model.recurrence.time_chunks import CHUNK_STEPS, chunk_length
from elmo_core.runtime.parts import serving_parts
from elmo_core.runtime.threads import THREAD_RULE, set_thread_policy, thread_policy
from tests.conftest import make_tiny_elmo, make_tiny_options, rebuilt

# Rows that end inside a chunk, on its last step, before the last chunk, and at once.
LENGTHS = [300, 300, 190, 126, 63, 5, 0]


def _batch(lengths=LENGTHS) -> tuple[torch.Tensor, torch.Tensor]:
    sentences = [[f"w{(7 * i + 3 * r) % 97}" for i in range(n)] for r, n in enumerate(lengths)]
    return words_to_char_ids(sentences, 50)


def _read(bilm, recurrence: Recurrence | None, char_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    model = rebuilt(bilm, recurrence, share_cache=True)  # layer 0 the same: the LSTMs differ only
    with torch.inference_mode():
        return model(char_ids, mask).activations


@pytest.mark.parametrize("boundaries", [False, True])
@pytest.mark.parametrize("rule", [None, THREAD_RULE], ids=["torch-threads", "runtime-threads"])
def test_chunks_give_one_passs_activations_to_the_last_bit(rule, boundaries):
    # A fixed count: the rule's own count follows the load, and a product on another count rounds otherwise.
    before = thread_policy()
    set_thread_policy(2)
    try:
        _chunks_equal_one_pass(rule, boundaries)
    finally:
        set_thread_policy(before)


def _chunks_equal_one_pass(rule, boundaries):
    elmo = make_tiny_elmo(dropout=0.0, keep_sentence_boundaries=boundaries).eval()  # clips: the step loop
    char_ids, mask = _batch()
    whole = _read(elmo.bilm, Recurrence("step", rule, chunk_steps=None), char_ids, mask)
    for steps in (7, 64, 100, CHUNK_STEPS):
        stepped = _read(elmo.bilm, Recurrence("step", rule, chunk_steps=steps), char_ids, mask)
        assert torch.equal(stepped, whole), steps
    reference = _read(elmo.bilm, None, char_ids, mask)  # no runtime: the plain step loop
    torch.testing.assert_close(whole, reference, atol=2e-6, rtol=0)


def test_fused_chunks_stay_within_rounding_of_one_fused_pass():
    options = make_tiny_options()
    options = dataclasses.replace(options, lstm=dataclasses.replace(options.lstm, cell_clip=None, proj_clip=None))
    torch.manual_seed(0)
    elmo = Elmo(options, **serving_parts(token_cache_words=0)).eval()
    char_ids, mask = _batch()
    whole = _read(elmo.bilm, Recurrence("fused", chunk_steps=None), char_ids, mask)
    stepped = _read(elmo.bilm, Recurrence("fused", chunk_steps=64), char_ids, mask)
    torch.testing.assert_close(stepped, whole, atol=2e-6, rtol=0)


def test_a_chunk_is_whole_input_blocks_so_the_products_are_the_same():
    for rows in (1, 3, 5, 16, 40, 129, 1000):
        block = input_block_steps(rows)
        length = chunk_length(rows)
        assert length % block == 0 and CHUNK_STEPS <= length < CHUNK_STEPS + block


@pytest.fixture
def chunk_calls(monkeypatch) -> list[tuple[int, int]]:
    """(rows, steps) of every batch the recurrence steps in chunks."""
    calls: list[tuple[int, int]] = []
    real = recurrence_package.run_in_chunks

    def spy(stacks, tokens, lengths, **kwargs):
        calls.append(tuple(tokens.shape[:2]))
        return real(stacks, tokens, lengths, **kwargs)

    monkeypatch.setattr(recurrence_package, "run_in_chunks", spy)
    return calls


def test_only_batches_longer_than_a_chunk_without_gradient_or_lstm_dropout_are_stepped_in_chunks(chunk_calls):
    elmo = rebuilt(make_tiny_elmo(dropout=0.0).eval(), Recurrence("step", chunk_steps=64))
    char_ids, mask = _batch([70, 3])
    with torch.inference_mode():
        elmo.bilm(char_ids, mask)  # 72 steps with <S> and </S>: stepped 64 at a time
        elmo.bilm(char_ids[:, :62], mask[:, :62])  # 64 steps: one pass
    assert chunk_calls == [(2, 72)]
    elmo.bilm.requires_grad_(True)
    out = elmo.bilm(char_ids, mask).activations  # a gradient pass keeps its graph whole
    out.sum().backward()
    assert elmo.bilm.forward_layers.layers[0].state_linear.weight.grad is not None
    elmo.bilm.requires_grad_(False)
    elmo.train()  # a frozen biLM under a trained scalar mix: no LSTM dropout, so chunks
    with torch.no_grad():
        chunked = elmo.bilm(char_ids, mask).activations
    assert chunk_calls == [(2, 72), (2, 72)]
    for stack in (elmo.bilm.forward_layers, elmo.bilm.backward_layers):
        stack.dropout = 0.1  # LSTM dropout acting (pretraining): its draws stay those of one pass
    with torch.no_grad():
        elmo.bilm(char_ids, mask)
    assert chunk_calls == [(2, 72), (2, 72)]
    elmo.eval()
    with torch.inference_mode():
        assert torch.equal(elmo.bilm(char_ids, mask).activations, chunked)
