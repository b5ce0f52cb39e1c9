"""Property-based checks of ElmoTokenizer + ElmoModel over token lists from all of Unicode."""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings

from ..core.test_fuzz import batches
from .conftest import batch, make_tiny_hf_model

MODEL = make_tiny_hf_model()

FUZZ = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)


@FUZZ
@given(sentences=batches)
def test_any_tokens_give_one_row_each_independent_of_batch_mates(sentences, tiny_tokenizer):
    sentences = [s for s in sentences if s] or [["a"]]  # a batch of only empty sentences is covered elsewhere
    inputs = batch(tiny_tokenizer, sentences)
    assert inputs["attention_mask"].sum(1).tolist() == [len(s) for s in sentences]
    with torch.no_grad():
        together = MODEL(**inputs, output_hidden_states=True)
        for k, sentence in enumerate(sentences):
            n = len(sentence)
            alone = MODEL(**batch(tiny_tokenizer, [sentence]), output_hidden_states=True)
            assert torch.isfinite(alone.last_hidden_state).all() and alone.last_hidden_state.shape == (1, n, 16)
            torch.testing.assert_close(
                together.last_hidden_state[k, :n], alone.last_hidden_state[0], atol=1e-5, rtol=1e-4
            )
            for layer, layer_alone in zip(together.hidden_states, alone.hidden_states):
                torch.testing.assert_close(layer[k, :n], layer_alone[0], atol=1e-5, rtol=1e-4)
            if n < inputs["input_ids"].shape[1]:
                assert together.last_hidden_state[k, n:].abs().max() == 0  # padding gets no vector
