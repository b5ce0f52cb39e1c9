"""Two threads calling one loaded ElmoModel get what one thread gets."""

from __future__ import annotations

import torch

from ..core.test_concurrency import run_in_threads
from .conftest import TOKENS, batch, make_tiny_hf_model


def test_two_threads_on_one_model_match_one_thread(tiny_tokenizer):
    model = make_tiny_hf_model()
    inputs = [batch(tiny_tokenizer, TOKENS), batch(tiny_tokenizer, [["hello", "my", "name", "is", "mud", "."]])]
    with torch.no_grad():
        expected = [model(**x, output_hidden_states=True) for x in inputs]

    def work(i: int) -> int:
        torch.set_num_threads(1)
        with torch.no_grad():
            for round in range(40):
                k = (round + i) % 2
                out = model(**inputs[k], output_hidden_states=True)
                torch.testing.assert_close(out.last_hidden_state, expected[k].last_hidden_state, atol=1e-6, rtol=0)
                torch.testing.assert_close(
                    torch.stack(out.hidden_states), torch.stack(expected[k].hidden_states), atol=1e-6, rtol=0
                )
        return round + 1

    assert run_in_threads(work) == [40, 40]
